// Reverse-mode automatic differentiation as an IR pass. Appends to the graph
// the nodes that compute d(loss)/d(v) for each requested value, using one
// gradient rule per op (the Grad column of Ops.def; rules live in this folder,
// one file per op family). Only floating-point values get gradients; ops
// whose rule is None (comparisons, ArgMax, Shape, ...) stop the flow; nodes
// that lead to no requested value are skipped (dead-gradient pruning); a
// value used several times (tied weights) sums its gradients.
//
// Requires: infer-shapes has run (rules read forward types).
// Ensures: the returned gradients are defined in the graph; infer-shapes has
// run again so every new value is typed.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <map>
#include <vector>

namespace sgc::ir {

/// Gradients of `loss` (a scalar, or any static shape: then of the sum of its
/// elements) with respect to each of `wrt` (nullptr where the loss does not
/// depend on it).
Expected<std::map<Value*, Value*>> autodiff(Graph& g, Value* loss, const std::vector<Value*>& wrt);

/// What a gradient rule sees and builds with.
struct GradCtx {
  Graph& g;
  Node& n;
  std::vector<Value*> dy;  ///< gradient of each output; nullptr means zero
  std::vector<bool> wants; ///< which inputs need a gradient
  std::vector<Value*> dx;  ///< set by the rule for the wanted inputs

  Value* x(size_t i) const { return n.input(i); }
  Value* y(size_t i) const { return i < n.outputs.size() ? n.outputs[i] : nullptr; }
  Error fail(const std::string& msg) const { return makeError(describe(n) + ": gradient: " + msg); }

  Node* emitNode(Op op, std::vector<Value*> ins, int outs = 1, std::map<std::string, Attr> attrs = {});
  Value* emit(Op op, std::vector<Value*> ins, std::map<std::string, Attr> attrs = {});
  Value* shapeOf(Value* v);
  Value* scalar(double v, DType t);
  Value* ints(const std::vector<int64_t>& v);
  /// `d`, which has the shape of `from`, summed over the dims that `to` was broadcast along.
  Value* sumTo(Value* d, Value* to, Value* from);
  /// Where(mask, d, 0).
  Value* maskedBy(Value* mask, Value* d, DType t);
};

} // namespace sgc::ir
