// The narrow-params pass (see NarrowParams.h).
#include "ir/passes/NarrowParams.h"

#include "ir/passes/InferShapes.h"

#include <algorithm>
#include <map>

namespace sgc::ir {
namespace {

bool isBf16Cast(const Node* n) { return n->op == Op::Cast && n->getString("to", "") == "bf16"; }

/// How a parameter is read, when every read can take it in bf16: through a Cast to bf16 (`casts`),
/// a Transpose all of whose readers are such Casts (`layouts`), or as a Gather's table (`gathers`).
struct Reads {
  std::vector<Node*> casts, layouts, gathers;
};

bool narrowable(const Value* p, const std::map<const Value*, std::vector<Node*>>& readers, Reads& r) {
  auto of = [&](const Value* v) -> const std::vector<Node*>& {
    static const std::vector<Node*> none;
    auto it = readers.find(v);
    return it == readers.end() ? none : it->second;
  };
  for (Node* n : of(p)) {
    if (isBf16Cast(n)) {
      r.casts.push_back(n);
    } else if (n->op == Op::Transpose && !of(n->outputs[0]).empty() &&
               std::all_of(of(n->outputs[0]).begin(), of(n->outputs[0]).end(), isBf16Cast)) {
      r.layouts.push_back(n);
    } else if (n->op == Op::Gather && n->inputs[0] == p && std::count(n->inputs.begin(), n->inputs.end(), p) == 1) {
      r.gathers.push_back(n);
    } else {
      return false;
    }
  }
  return !r.casts.empty() || !r.layouts.empty(); // a product reads it: else nothing is saved
}

} // namespace

Error narrowParams(Graph& g, int* count) {
  int narrowed = 0;
  for (const auto& u : g.updates)
    if (u.first->kind == ValueKind::Param) return makeError("narrow-params: the graph updates parameter %" + u.first->name);
  std::map<const Value*, std::vector<Node*>> readers;
  for (const auto& n : g.nodes())
    for (const Value* in : n->inputs)
      if (in && (readers[in].empty() || readers[in].back() != n.get())) readers[in].push_back(n.get());
  std::map<const Node*, std::vector<Node*>> widenAfter; // a Gather -> the Cast that widens its rows again
  for (Value* p : g.params) {
    Reads r;
    if (p->type.dtype != DType::F32 || std::count(g.outputs.begin(), g.outputs.end(), p) || !narrowable(p, readers, r)) continue;
    p->data = std::make_shared<const Tensor>(Tensor::fromF64(DType::BF16, p->data->shape, p->data->toF64()));
    p->type = Type::of(DType::BF16, p->data->shape);
    for (Node* c : r.casts) g.replaceAllUses(c->outputs[0], p);
    for (Node* t : r.layouts) // the layout moves bf16 numbers now: its Casts have nothing to round
      for (Node* c : readers[t->outputs[0]]) g.replaceAllUses(c->outputs[0], t->outputs[0]);
    for (Node* gather : r.gathers) { // an embedding tied to a product: its rows gathered in bf16, then widened
      Value* rows = gather->outputs[0];
      Node* widen = g.addNode(Op::Cast, {rows}, 1, gather->name + ".from_bf16", {g.uniqueName(rows->name + ".f32")});
      widen->attrs["to"] = std::string("f32");
      g.replaceAllUses(rows, widen->outputs[0]);
      widen->inputs[0] = rows;
      widenAfter[gather] = {widen};
    }
    ++narrowed;
  }
  if (count) *count = narrowed;
  if (!narrowed) return Error::success();
  g.placeAfter(widenAfter);
  g.removeDeadNodes();
  return inferShapes(g);
}

} // namespace sgc::ir
