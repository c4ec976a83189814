// Lowering of every other op the code generator supports into kernels (one
// or more per node): data movement, matrix products, row-wise ops (softmax,
// normalization, losses and their gradients), convolution and pooling,
// optimizer updates. Kernels whose body is not one parallel loop run as a
// single serial call.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <vector>

namespace sgc::kir {

/// The kernels of one node; `name` prefixes their names. Errors name the
/// node and what is not generated yet.
Expected<std::vector<Kernel>> lowerNode(const std::string& name, const ir::Node& n);

/// A MatMul or Gemm followed by elementwise nodes applied to its result
/// (group[0] is the product), as one kernel.
Expected<std::vector<Kernel>> lowerProductGroup(const std::string& name, const std::vector<const ir::Node*>& group);

/// Whether a kernel runs as one serial call (its body is not a parallel loop).
inline bool isSerial(const Kernel& k) { return !(k.body->kind == StmtKind::Loop && k.body->parallel); }

} // namespace sgc::kir
