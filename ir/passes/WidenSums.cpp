// The widen-sums pass (see WidenSums.h).
#include "ir/passes/WidenSums.h"

#include "ir/passes/Rewrite.h"

namespace sgc::ir {

namespace {

bool narrow(DType t) { return t == DType::BF16 || t == DType::F16; }

/// Cast<f32>(SumTo(x)) -> SumTo(x) {to = f32}, rewritten at the cast.
bool widenNarrowSum(Node& n, std::map<const Value*, int>& uses) {
  if (n.op != Op::Cast || n.getString("to", "") != "f32") return false;
  const Value* sum = n.inputs[0];
  const Node* s = sum->producer;
  if (!s || s->op != Op::SumTo || s->attrs.count("to") || uses[sum] != 1) return false;
  Value* x = s->inputs[0];
  if (!narrow(x->type.dtype) || x->type.dims == sum->type.dims) return false; // (a copy)
  // The cast becomes the sum, reading the narrow values and summing in f32 (its result, which
  // later nodes may already hold, stays the same value); the narrow sum is left unread, for
  // dead-code elimination.
  n.op = Op::SumTo;
  n.inputs = {x, s->inputs[1]};
  n.attrs = s->attrs;
  n.attrs["to"] = std::string("f32");
  return true;
}

/// SumTo(Reshape...(Cast<f32>(x))) -> SumTo(Reshape...(x)) {to = f32}, rewritten at the sum; the
/// new reshapes are returned, to be placed before it.
std::optional<std::vector<Node*>> sumNarrowValues(Graph& g, Node& n, std::map<const Value*, int>& uses) {
  if (n.op != Op::SumTo || n.attrs.count("to") || n.outputs[0]->type.dtype != DType::F32) return std::nullopt;
  std::vector<const Node*> reshapes; // from the sum up
  const Value* v = n.inputs[0];
  while (v->producer && v->producer->op == Op::Reshape && uses[v] == 1) {
    reshapes.push_back(v->producer);
    v = v->producer->inputs[0];
  }
  const Node* cast = v->producer;
  if (!cast || cast->op != Op::Cast || cast->getString("to", "") != "f32" || uses[v] != 1) return std::nullopt;
  Value* x = cast->inputs[0];
  if (!narrow(x->type.dtype)) return std::nullopt;
  std::vector<Node*> added;
  for (auto r = reshapes.rbegin(); r != reshapes.rend(); ++r) {
    const Value* wide = (*r)->outputs[0];
    Node* m = g.addNode(Op::Reshape, {x, (*r)->inputs[1]}, 1, (*r)->name + ".narrow", {g.uniqueName(wide->name + ".narrow")});
    m->attrs = (*r)->attrs;
    m->outputs[0]->type = wide->type;
    m->outputs[0]->type.dtype = x->type.dtype;
    added.push_back(m);
    x = m->outputs[0];
  }
  n.inputs[0] = x;
  n.attrs["to"] = std::string("f32");
  return added;
}

} // namespace

Error widenSums(Graph& g, int* count) {
  std::map<const Value*, int> uses = countUses(g);
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (widenNarrowSum(n, uses)) return std::vector<Node*>{};
    return sumNarrowValues(g, n, uses);
  };
  return rewriteInOrder(g, rewrite, false, count);
}

} // namespace sgc::ir
