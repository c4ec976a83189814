// The narrow-params pass (see NarrowParams.h).
#include "ir/passes/NarrowParams.h"

#include "ir/passes/InferShapes.h"

#include <algorithm>

namespace sgc::ir {

Error narrowParams(Graph& g, int* count) {
  int narrowed = 0;
  for (const auto& u : g.updates)
    if (u.first->kind == ValueKind::Param) return makeError("narrow-params: the graph updates parameter %" + u.first->name);
  for (Value* p : g.params) {
    if (p->type.dtype != DType::F32 || std::count(g.outputs.begin(), g.outputs.end(), p)) continue;
    std::vector<Node*> casts;
    bool all = true;
    for (const auto& n : g.nodes())
      if (std::count(n->inputs.begin(), n->inputs.end(), p)) {
        all = all && n->op == Op::Cast && n->getString("to", "") == "bf16";
        casts.push_back(n.get());
      }
    if (!all || casts.empty()) continue;
    p->data = std::make_shared<const Tensor>(Tensor::fromF64(DType::BF16, p->data->shape, p->data->toF64()));
    p->type = Type::of(DType::BF16, p->data->shape);
    for (Node* c : casts) g.replaceAllUses(c->outputs[0], p);
    ++narrowed;
  }
  if (count) *count = narrowed;
  if (!narrowed) return Error::success();
  g.removeDeadNodes();
  return inferShapes(g);
}

} // namespace sgc::ir
