// The fuse-rms-norm pass (see FuseRmsNorm.h).
#include "ir/passes/FuseRmsNorm.h"

#include "ir/passes/Rewrite.h"

#include <cmath>
#include <map>
#include <optional>

namespace sgc::ir {
namespace {

bool isScalar(const Value* v, double want) {
  auto s = constantScalar(v);
  return s && *s == want;
}

struct Matcher {
  std::map<const Value*, int> uses;

  Node* only(const Value* v, Op op) const { return producerReadOnce(v, op, uses); }

  /// `v` itself, or what a Cast read once that keeps the dtype reads.
  const Value* throughCast(const Value* v) const {
    Node* c = only(v, Op::Cast);
    return c && c->inputs[0]->type.dtype == v->type.dtype ? c->inputs[0] : v;
  }

  /// Whether `v`, read once, is x^2: Pow(x, 2) or x * x.
  bool isSquareOf(const Value* v, const Value* x) const {
    if (Node* p = only(v, Op::Pow)) return p->inputs[0] == x && isScalar(p->inputs[1], 2);
    Node* m = only(v, Op::Mul);
    return m && m->inputs[0] == x && m->inputs[1] == x;
  }

  /// Whether `v`, read once, is mean(x^2) over x's dims from `axis` on (kept as dims of 1).
  bool isMeanSquareOf(const Value* v, const Value* x, int64_t axis) const {
    Node* r = only(v, Op::ReduceMean);
    if (!r || r->getInt("keepdims", 1) != 1 || r->inputs.size() < 2 || !r->inputs[1] || r->inputs[1]->kind != ValueKind::Const) return false;
    const Tensor& axes = *r->inputs[1]->data;
    int64_t rank = x->type.rank();
    if (axes.numel() != rank - axis) return false;
    for (int64_t i = 0; i < axes.numel(); ++i) {
      int64_t a = axes.getI(i) < 0 ? axes.getI(i) + rank : axes.getI(i);
      if (a != axis + i) return false;
    }
    return isSquareOf(r->inputs[0], x);
  }

  /// epsilon when `v`, read once, is sqrt(mean(x^2) + epsilon) over x's dims from `axis` on.
  std::optional<double> rmsOf(const Value* v, const Value* x, int64_t axis) const {
    Node* s = only(v, Op::Sqrt);
    Node* a = s ? only(s->inputs[0], Op::Add) : nullptr;
    for (int i = 0; a && i < 2; ++i)
      if (auto eps = constantScalar(a->inputs[1 - i]); eps && *eps > 0 && isMeanSquareOf(a->inputs[i], x, axis)) return eps;
    return std::nullopt;
  }

  /// epsilon when `v`, read once, is 1 / sqrt(mean(x^2) + epsilon) (Reciprocal or Div).
  std::optional<double> inverseRmsOf(const Value* v, const Value* x, int64_t axis) const {
    if (Node* r = only(v, Op::Reciprocal)) return rmsOf(r->inputs[0], x, axis);
    if (Node* d = only(v, Op::Div); d && isScalar(d->inputs[0], 1)) return rmsOf(d->inputs[1], x, axis);
    return std::nullopt;
  }

  struct Match {
    Value* x;
    double epsilon;
  };

  /// x and epsilon when `v`, read once, is x / sqrt(mean(x^2) + epsilon) over x's dims from
  /// `axis` on: x * (1 / rms) in either order, or x / rms.
  std::optional<Match> normalized(const Value* v, int64_t axis) const {
    v = throughCast(v);
    if (Node* d = only(v, Op::Div))
      if (auto eps = rmsOf(d->inputs[1], d->inputs[0], axis)) return Match{d->inputs[0], *eps};
    Node* m = only(v, Op::Mul);
    for (int i = 0; m && i < 2; ++i)
      if (auto eps = inverseRmsOf(m->inputs[1 - i], m->inputs[i], axis)) return Match{m->inputs[i], *eps};
    return std::nullopt;
  }
};

} // namespace

Error fuseRmsNorm(Graph& g, int* count) {
  Matcher m{countUses(g)};
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    const Type& t = n.outputs[0]->type;
    if (n.op != Op::Mul || !t.ranked || t.rank() < 1 || !isFloat(t.dtype)) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      Value* scale = n.inputs[1 - i];
      if (!scale->type.ranked || scale->type.rank() != 1 || !(scale->type.dims[0] == t.dims.back()) || scale->type.dtype != t.dtype) continue;
      auto found = m.normalized(n.inputs[i], t.rank() - 1);
      if (!found || found->x->type != t) continue;
      Node* rms = g.addNode(Op::RmsNorm, {found->x, scale}, 1, n.name + ".rms_norm", {g.uniqueName(n.outputs[0]->name + ".rms_norm")});
      rms->attrs["axis"] = int64_t(-1);
      rms->attrs["epsilon"] = found->epsilon;
      g.replaceAllUses(n.outputs[0], rms->outputs[0]);
      return std::vector<Node*>{rms};
    }
    return std::nullopt;
  };
  return rewriteInOrder(g, rewrite, true, count);
}

} // namespace sgc::ir
