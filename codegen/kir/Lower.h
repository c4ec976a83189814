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

#include <map>
#include <set>

namespace sgc::kir {

/// Whether a node can be part of a fused elementwise kernel: its class is Elementwise, or it is
/// an Expand (a broadcast load inside the kernel).
bool isFusibleElementwise(const ir::Node& n);

/// Lowers `group` (elementwise nodes in graph order; each may consume the
/// results of earlier ones, and every node shares its shape) into one kernel
/// that stores the last node's result and those of `stored` (the results
/// read outside the group): each element's values are all computed before
/// any is stored. Buffers: the external inputs in order of first use, then
/// the outputs, in the group's order.
Expected<Kernel> lowerElementwise(const std::string& name, const std::vector<const ir::Node*>& group,
                                  const std::set<const ir::Value*>& stored = {});

class Builder;

/// The expression of an elementwise chain's last result at flat output index
/// `flat`; `seedValue` (if any) is not loaded but stands for `seed` (a matrix
/// product's element, say). External inputs are registered in `b`.
/// With `all`, every node's result expression is put there too.
Expected<ExprRef> chainExpression(Builder& b, const std::vector<const ir::Node*>& chain, const ir::Value* seedValue, ExprRef seed,
                                  ExprRef flat, std::map<const ir::Value*, ExprRef>* all = nullptr);

/// Lowers a ReduceSum/Mean/Max/Min/SumSquare/L2 node with constant axes.
Expected<Kernel> lowerReduce(const std::string& name, const ir::Node& n);

} // namespace sgc::kir
