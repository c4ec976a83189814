// What the pattern-rewriting passes (fuse-attention, fuse-gelu, widen-sums)
// share: counting the readers of each value, and rewriting nodes in graph
// order with the new nodes placed before the node that called for them.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace sgc::ir {

/// How many times each value is read: node inputs, and graph outputs once each.
std::map<const Value*, int> countUses(const Graph& g);

/// The node of op `op` that produces `v`, when `v` is read once only (by the pattern being
/// matched, which may then replace it); else null.
Node* producerReadOnce(const Value* v, Op op, const std::map<const Value*, int>& uses);

/// The value of `v` when it is a one-element floating-point constant (the scalars of a written-out
/// formula: epsilon, 0.5, sqrt(2)...); else none.
std::optional<double> constantScalar(const Value* v);

/// Calls `rewrite` on each node in graph order; the nodes it returns (new nodes it made,
/// perhaps none) are placed just before that node, and a rewrite counts when it returns
/// anything at all. Afterwards, when something was rewritten, unread nodes are removed (with
/// `removeDead`) and shapes inferred again. The number of rewrites goes to `count`.
Error rewriteInOrder(Graph& g, const std::function<std::optional<std::vector<Node*>>(Node&)>& rewrite, bool removeDead,
                     int* count = nullptr);

} // namespace sgc::ir
