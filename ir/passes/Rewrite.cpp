// The shared helpers of the rewriting passes (see Rewrite.h).
#include "ir/passes/Rewrite.h"

#include "ir/passes/InferShapes.h"

namespace sgc::ir {

std::map<const Value*, int> countUses(const Graph& g) {
  std::map<const Value*, int> uses;
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs)
      if (v) ++uses[v];
  for (const Value* v : g.outputs) ++uses[v];
  return uses;
}

Node* producerReadOnce(const Value* v, Op op, const std::map<const Value*, int>& uses) {
  if (!v || !v->producer || v->producer->op != op) return nullptr;
  auto it = uses.find(v);
  return it != uses.end() && it->second == 1 ? v->producer : nullptr;
}

std::optional<double> constantScalar(const Value* v) {
  if (!v || v->kind != ValueKind::Const || !isFloat(v->type.dtype) || v->data->numel() != 1) return std::nullopt;
  return v->data->getF(0);
}

Error rewriteInOrder(Graph& g, const std::function<std::optional<std::vector<Node*>>(Node&)>& rewrite, bool removeDead, int* count) {
  std::vector<Node*> order, placed;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  int rewritten = 0;
  for (Node* n : order) {
    if (auto added = rewrite(*n)) {
      placed.insert(placed.end(), added->begin(), added->end());
      ++rewritten;
    }
    placed.push_back(n);
  }
  g.setOrder(placed);
  if (count) *count = rewritten;
  if (!rewritten) return Error::success();
  if (removeDead) g.removeDeadNodes();
  return inferShapes(g);
}

} // namespace sgc::ir
