// Lowering of IR nodes into kernels: a fused group of elementwise nodes
// (broadcasting included) becomes one flat parallel loop whose body is the
// composed expression; a reduction becomes a parallel loop over its results
// with a serial accumulation loop inside.
//
// Requires: static shapes on every value the nodes touch.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::kir {

/// Whether a node can be part of a fused elementwise kernel (its class is Elementwise).
bool isFusibleElementwise(const ir::Node& n);

/// Lowers `group` (elementwise nodes in graph order; each may consume the
/// results of earlier ones; the last one's result is the kernel's output,
/// and every node shares its shape) into one kernel. Buffers: the external
/// inputs in order of first use, then the output.
Expected<Kernel> lowerElementwise(const std::string& name, const std::vector<const ir::Node*>& group);

class Builder;

/// The expression of an elementwise chain's last result at flat output index
/// `flat`; `seedValue` (if any) is not loaded but stands for `seed` (a matrix
/// product's element, say). External inputs are registered in `b`.
Expected<ExprRef> chainExpression(Builder& b, const std::vector<const ir::Node*>& chain, const ir::Value* seedValue, ExprRef seed,
                                  ExprRef flat);

/// Lowers a ReduceSum/Mean/Max/Min/SumSquare/L2 node with constant axes.
Expected<Kernel> lowerReduce(const std::string& name, const ir::Node& n);

} // namespace sgc::kir
