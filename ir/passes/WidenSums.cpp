// The widen-sums pass (see WidenSums.h).
#include "ir/passes/WidenSums.h"

#include "ir/passes/InferShapes.h"

#include <map>

namespace sgc::ir {

Error widenSums(Graph& g, int* count) {
  std::map<const Value*, int> uses;
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs)
      if (v) ++uses[v];
  for (const Value* v : g.outputs) ++uses[v];
  std::vector<Node*> order, placed;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  std::map<const Node*, Node*> before; // a rewritten cast -> the widening placed before it
  for (Node* n : order) {
    if (n->op != Op::Cast || n->getString("to", "") != "f32") continue;
    const Value* sum = n->inputs[0];
    const Node* s = sum->producer;
    if (!s || s->op != Op::SumTo || uses[sum] != 1) continue;
    Value* x = s->inputs[0];
    if ((x->type.dtype != DType::BF16 && x->type.dtype != DType::F16) || x->type.dims == sum->type.dims) continue; // (a copy)
    Node* wide = g.addNode(Op::Cast, {x}, 1, s->name + ".widen", {g.uniqueName(x->name + ".f32")});
    wide->attrs["to"] = std::string("f32");
    // The cast becomes the sum (its result, which later nodes may already hold, stays the
    // same value); the narrow sum is left unread, for dead-code elimination.
    n->op = Op::SumTo;
    n->inputs = {wide->outputs[0], s->inputs[1]};
    n->attrs = s->attrs;
    before[n] = wide;
  }
  for (Node* n : order) {
    if (before.count(n)) placed.push_back(before[n]);
    placed.push_back(n);
  }
  g.setOrder(placed);
  if (count) *count = (int)before.size();
  return before.empty() ? Error::success() : inferShapes(g);
}

} // namespace sgc::ir
