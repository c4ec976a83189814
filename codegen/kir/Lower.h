// Lowering of IR nodes into kernels: a fused group of elementwise nodes
// (broadcasting included) and data movement becomes one flat parallel loop
// whose body is the composed expression; a reduction becomes a parallel loop
// over its results with a serial accumulation loop inside.
//
// Requires: static shapes on every value the nodes touch.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <functional>
#include <map>
#include <set>

namespace sgc::kir {

/// Whether a node can be part of a fused elementwise kernel: its class is Elementwise, or it is
/// an Expand (a broadcast load inside the kernel).
bool isFusibleElementwise(const ir::Node& n);

/// Whether a data movement node can be part of a fused kernel, computed where its readers read
/// it: a view (Reshape, Flatten, Squeeze, Unsqueeze), Transpose, Expand, Concat, or Slice and
/// SliceGrad with constant geometry, all of static shapes.
bool isFusibleMovement(const ir::Node& n);

/// A view op (Reshape, Flatten, Squeeze, Unsqueeze): its result has its input's elements in
/// their order, so an element of it is the input's at the same flat index.
inline bool keepsElementOrder(const ir::Node& n) { return ir::opClass(n.op) == ir::OpClass::View; }

/// Either of the two: a node an elementwise kernel can compute.
inline bool isFusible(const ir::Node& n) { return isFusibleElementwise(n) || isFusibleMovement(n); }

/// Element `offset` (flat, in row-major order) of input `k` of a node.
using ElementOf = std::function<ExprRef(size_t k, ExprRef offset)>;

/// Element `c` (coordinates in its result) of a fusible movement node's result, in terms of its
/// inputs' elements; every offset it asks for lies inside its input.
Expected<ExprRef> movedElement(const ir::Node& n, const std::vector<ExprRef>& c, const ElementOf& input);

/// Lowers `group` (fusible nodes in graph order; each may consume the results
/// of earlier ones) into one kernel over the last node's elements that stores
/// its result and those of `stored` (the results read outside the group,
/// which have its shape): each element's values are all computed before any
/// is stored. A value of another shape is computed at the elements its
/// readers ask for (through broadcasts and the movements' index maps), once
/// for each index they ask. Buffers: the external inputs in order of first
/// use, then the outputs, in the group's order.
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
