// The fuse-gelu pass (see FuseGelu.h).
#include "ir/passes/FuseGelu.h"

#include "ir/passes/Rewrite.h"

#include <cmath>
#include <map>
#include <optional>

namespace sgc::ir {
namespace {

bool isScalar(const Value* v, double want) {
  if (!v || v->kind != ValueKind::Const || !isFloat(v->type.dtype) || v->data->numel() != 1) return false;
  return std::fabs(v->data->getF(0) - want) <= 1e-6 * std::fabs(want);
}

struct Matcher {
  std::map<const Value*, int> uses;

  Node* only(const Value* v, Op op) const { return producerReadOnce(v, op, uses); }

  /// x when `v` is x / sqrt(2) or x * (1 / sqrt(2)) read once.
  Value* scaledInput(const Value* v) {
    if (Node* d = only(v, Op::Div)) return isScalar(d->inputs[1], M_SQRT2) ? d->inputs[0] : nullptr;
    if (Node* m = only(v, Op::Mul)) {
      if (isScalar(m->inputs[1], M_SQRT1_2)) return m->inputs[0];
      if (isScalar(m->inputs[0], M_SQRT1_2)) return m->inputs[1];
    }
    return nullptr;
  }

  /// x when `v` is 1 + erf(x / sqrt(2)) read once.
  Value* onePlusErf(const Value* v) {
    Node* a = only(v, Op::Add);
    if (!a) return nullptr;
    int e = isScalar(a->inputs[0], 1) ? 1 : isScalar(a->inputs[1], 1) ? 0 : -1;
    Node* erf = e < 0 ? nullptr : only(a->inputs[e], Op::Erf);
    return erf ? scaledInput(erf->inputs[0]) : nullptr;
  }

  /// For p * q: x when {p, q} is {x, 1 + erf(x / sqrt(2))}.
  Value* timesOnePlusErf(Value* p, Value* q) {
    for (auto [u, w] : {std::pair{p, q}, std::pair{q, p}})
      if (Value* x = onePlusErf(w); x && x == u) return x;
    return nullptr;
  }

  /// x when `out` (a Mul) is 0.5 * x * (1 + erf(x / sqrt(2))) in one of its orders.
  Value* match(const Node& out) {
    Value *p = out.inputs[0], *q = out.inputs[1];
    for (auto [half, rest] : {std::pair{p, q}, std::pair{q, p}}) {
      // (x * (1 + erf)) * 0.5
      if (isScalar(half, 0.5))
        if (Node* m = only(rest, Op::Mul))
          if (Value* x = timesOnePlusErf(m->inputs[0], m->inputs[1])) return x;
      // (0.5 * x) * (1 + erf)
      if (Node* m = only(half, Op::Mul))
        for (auto [h, x] : {std::pair{m->inputs[0], m->inputs[1]}, std::pair{m->inputs[1], m->inputs[0]}})
          if (isScalar(h, 0.5) && onePlusErf(rest) == x) return x;
    }
    return nullptr;
  }
};

} // namespace

Error fuseGelu(Graph& g, int* count) {
  Matcher m{countUses(g)};
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    Value* x = n.op == Op::Mul ? m.match(n) : nullptr;
    if (!x || x->type != n.outputs[0]->type) return std::nullopt;
    Node* gelu = g.addNode(Op::Gelu, {x}, 1, n.name + ".gelu", {g.uniqueName(n.outputs[0]->name + ".gelu")});
    g.replaceAllUses(n.outputs[0], gelu->outputs[0]);
    return std::vector<Node*>{gelu};
  };
  return rewriteInOrder(g, rewrite, true, count);
}

} // namespace sgc::ir
