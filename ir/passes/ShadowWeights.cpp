// The shadow-weights pass (see ShadowWeights.h).
#include "ir/passes/ShadowWeights.h"

#include "ir/passes/InferShapes.h"

#include <map>

namespace sgc::ir {

Error shadowWeights(Graph& g, int* count) {
  std::map<const Value*, std::vector<Node*>> casts; // parameter -> its casts to bf16
  for (auto& n : g.nodes())
    if (n->op == Op::Cast && n->getString("to", "") == "bf16" && !n->has("shadow") && n->inputs[0]->kind == ValueKind::Param)
      casts[n->inputs[0]].push_back(n.get());
  std::map<std::pair<DType, std::vector<int64_t>>, std::shared_ptr<const Tensor>> zeros; // state starts at zero
  int shadowed = 0;
  size_t updates = g.updates.size();
  for (size_t u = 0; u < updates; ++u) {
    auto [p, next] = g.updates[u];
    Node* adam = next->producer;
    auto it = casts.find(p);
    if (it == casts.end() || p->type.dtype != DType::F32 || !p->type.isStatic() || !adam || adam->op != Op::AdamUpdate ||
        adam->inputs[0] != p || adam->outputs[0] != next || adam->outputs.size() != 3)
      continue;
    std::shared_ptr<const Tensor>& zero = zeros[{DType::BF16, p->type.shape()}];
    if (!zero) zero = std::make_shared<const Tensor>(DType::BF16, p->type.shape());
    Value* copy = g.addState(g.uniqueName(p->name + ".bf16_copy"), zero);
    Node* kept = it->second[0]; // a weight read by several products (a tied embedding): one copy
    for (size_t i = 1; i < it->second.size(); ++i) g.replaceAllUses(it->second[i]->outputs[0], kept->outputs[0]);
    kept->attrs["shadow"] = copy->name;
    Value* written = g.addResult(adam, g.uniqueName(p->name + ".bf16_copy.next"));
    g.updates.push_back({copy, written});
    ++shadowed;
  }
  if (count) *count = shadowed;
  if (!shadowed) return Error::success();
  g.removeDeadNodes();
  return inferShapes(g);
}

} // namespace sgc::ir
