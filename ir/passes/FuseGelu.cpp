// The fuse-gelu pass (see FuseGelu.h).
#include "ir/passes/FuseGelu.h"

#include "ir/passes/Rewrite.h"

#include <cmath>
#include <map>
#include <optional>

namespace sgc::ir {
namespace {

bool isScalar(const Value* v, double want) {
  auto s = constantScalar(v);
  return s && std::fabs(*s - want) <= 1e-6 * std::fabs(want);
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

  /// x when `v` is x * x * x (in either grouping) or Pow(x, 3), read once.
  Value* cube(const Value* v) {
    if (Node* p = only(v, Op::Pow)) return isScalar(p->inputs[1], 3) ? p->inputs[0] : nullptr;
    Node* m = only(v, Op::Mul);
    if (!m) return nullptr;
    for (auto [x, sq] : {std::pair{m->inputs[0], m->inputs[1]}, std::pair{m->inputs[1], m->inputs[0]}})
      if (Node* s = only(sq, Op::Mul); s && s->inputs[0] == x && s->inputs[1] == x) return x;
    return nullptr;
  }

  /// x when `v` is sqrt(2 / pi) * (x + 0.044715 * x^3) read once (factors in either order).
  Value* tanhArgument(const Value* v) {
    Node* m = only(v, Op::Mul);
    if (!m) return nullptr;
    for (auto [k, sum] : {std::pair{m->inputs[0], m->inputs[1]}, std::pair{m->inputs[1], m->inputs[0]}}) {
      Node* a = isScalar(k, std::sqrt(2 / M_PI)) ? only(sum, Op::Add) : nullptr;
      for (int i = 0; a && i < 2; ++i) {
        Value* x = a->inputs[i];
        Node* c = only(a->inputs[1 - i], Op::Mul);
        for (int j = 0; c && j < 2; ++j)
          if (isScalar(c->inputs[j], 0.044715) && cube(c->inputs[1 - j]) == x) return x;
      }
    }
    return nullptr;
  }

  bool tanh = false; ///< whether the last form matched is the tanh approximation

  /// x when `v` is 1 + erf(x / sqrt(2)) or 1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)), read once.
  Value* onePlusErf(const Value* v) {
    Node* a = only(v, Op::Add);
    if (!a) return nullptr;
    int e = isScalar(a->inputs[0], 1) ? 1 : isScalar(a->inputs[1], 1) ? 0 : -1;
    if (e < 0) return nullptr;
    if (Node* erf = only(a->inputs[e], Op::Erf))
      if (Value* x = scaledInput(erf->inputs[0])) return tanh = false, x;
    if (Node* th = only(a->inputs[e], Op::Tanh))
      if (Value* x = tanhArgument(th->inputs[0])) return tanh = true, x;
    return nullptr;
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
    if (m.tanh) gelu->attrs["approximate"] = std::string("tanh");
    g.replaceAllUses(n.outputs[0], gelu->outputs[0]);
    return std::vector<Node*>{gelu};
  };
  return rewriteInOrder(g, rewrite, true, count);
}

} // namespace sgc::ir
