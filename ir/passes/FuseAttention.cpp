// The fuse-attention pass (see FuseAttention.h).
#include "ir/passes/FuseAttention.h"

#include "ir/passes/Rewrite.h"

#include <cmath>
#include <map>
#include <optional>

namespace sgc::ir {
namespace {

/// Scores at or below this count as masked out: exp of them is 0 next to any real score.
constexpr double kMasked = -1e9;

/// Whether `mask` (a constant [..., Tq, Tk]) says, through `visible(element)`, that query i sees
/// exactly keys j <= i, in each of its [Tq, Tk] slices (Hugging Face's masks have the batch's rows:
/// [B, 1, Tq, Tk], the same causal triangle in each).
template <typename F>
bool isCausal(const Value* mask, int64_t tq, int64_t tk, F visible) {
  if (!mask || mask->kind != ValueKind::Const) return false;
  const Tensor& m = *mask->data;
  if (m.rank() < 2 || m.shape[m.rank() - 2] != tq || m.shape.back() != tk || tq * tk == 0 || m.numel() % (tq * tk)) return false;
  for (int64_t at = 0; at < m.numel(); at += tq * tk)
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j)
        if (visible(m, at + i * tk + j) != (j <= i)) return false;
  return true;
}

/// Dims equal for certain: both static and equal, or both the same symbol.
bool sameDim(const Dim& a, const Dim& b) { return a.isStatic() ? a == b : a.isSymbolic() && a == b; }

struct Matcher {
  Graph& g;
  std::map<const Value*, int> uses; ///< readers of each value (graph outputs count)

  Node* inner(const Value* v, Op op) const { return producerReadOnce(v, op, uses); }

  /// (x, c) when `v` is a read-once Mul of x (of v's type) by a scalar constant c, either way round.
  std::optional<std::pair<Value*, double>> scaled(const Value* v) const {
    Node* m = inner(v, Op::Mul);
    if (!m) return std::nullopt;
    int s = constantScalar(m->inputs[1]) ? 0 : 1;
    auto c = constantScalar(m->inputs[1 - s]);
    if (!c || m->inputs[s]->type != v->type) return std::nullopt;
    return std::pair{m->inputs[s], *c};
  }

  /// x when `t` is Reshape(Transpose(Reshape(x))) that swaps x's last two dims through a flattened
  /// batch, as the dynamo exporter writes k^T: x [..., T, D] -> [P, T, D] -> [P, D, T] -> [..., D, T].
  Value* swappedThroughReshapes(const Value* t) const {
    Node* outer = inner(t, Op::Reshape);
    Node* tr = outer ? inner(outer->inputs[0], Op::Transpose) : nullptr;
    Node* in = tr ? inner(tr->inputs[0], Op::Reshape) : nullptr;
    if (!in || !tr->has("perm") || tr->getInts("perm") != std::vector<int64_t>{0, 2, 1}) return nullptr;
    Value* x = in->inputs[0];
    const Type &xt = x->type, &flat = in->outputs[0]->type;
    if (!xt.isStatic() || !t->type.isStatic() || xt.rank() < 2 || xt.rank() != t->type.rank() || flat.rank() != 3) return nullptr;
    int64_t r = xt.rank(), rows = 1;
    for (int64_t d = 0; d + 2 < r; ++d) rows *= xt.dims[d].value;
    if (flat.dims[0].value != rows || flat.dims[1] != xt.dims[r - 2] || flat.dims[2] != xt.dims[r - 1]) return nullptr;
    for (int64_t d = 0; d + 2 < r; ++d)
      if (t->type.dims[d] != xt.dims[d]) return nullptr;
    return t->type.dims[r - 2] == xt.dims[r - 1] && t->type.dims[r - 1] == xt.dims[r - 2] ? x : nullptr;
  }

  /// The softmax under SDPA's guard of rows with no visible key, Where(IsNaN(p), 0, p), as both
  /// exporters write `scaled_dot_product_attention`: p's producer when `probs` is that guard
  /// (read once, p read by it alone), else null. The fused node never makes such a row's NaN
  /// (its masks are causal: every row sees its own key), so the guard goes with the pattern.
  Node* guardedSoftmax(const Value* probs) const {
    Node* w = inner(probs, Op::Where);
    if (!w || w->inputs.size() != 3) return nullptr;
    Node* isNan = inner(w->inputs[0], Op::IsNaN);
    auto zero = constantScalar(w->inputs[1]);
    Value* p = w->inputs[2];
    auto readers = uses.find(p);
    if (!isNan || !zero || *zero != 0 || isNan->inputs[0] != p || readers == uses.end() || readers->second != 2) return nullptr;
    return p->producer && p->producer->op == Op::Softmax ? p->producer : nullptr;
  }

  /// Nodes that give `kT` with its last two dims swapped: nothing when it is a transpose that
  /// undoes it; else one Transpose (of kT's source when kT is itself a transpose).
  Value* keys(Value* kT, std::vector<Node*>& added) {
    int64_t r = kT->type.rank();
    std::vector<int64_t> perm(r);
    for (int64_t i = 0; i < r; ++i) perm[i] = i;
    std::swap(perm[r - 1], perm[r - 2]);
    if (Value* x = swappedThroughReshapes(kT)) return x;
    Value* src = kT;
    if (kT->producer && kT->producer->op == Op::Transpose && kT->producer->has("perm")) {
      std::vector<int64_t> p = kT->producer->getInts("perm"), composed(r);
      if ((int64_t)p.size() == r) {
        for (int64_t i = 0; i < r; ++i) composed[i] = p[perm[i]];
        src = kT->producer->inputs[0];
        perm = composed;
      }
    }
    bool identity = true;
    for (int64_t i = 0; i < r; ++i) identity &= perm[i] == i;
    if (identity) return src;
    Node* t = g.addNode(Op::Transpose, {src}, 1, kT->name + ".keys", {g.uniqueName(kT->name + ".keys")});
    t->attrs["perm"] = perm;
    added.push_back(t);
    return t->outputs[0];
  }

  /// Grouped-query attention's shared keys or values: when `kv` [..., H, T, D] is a read-once
  /// Reshape(Expand(Unsqueeze(x))) that repeats each of x's heads [..., H / g, T, D] g times (query
  /// head h reads x's head h / g), x and g; else kv and 1.
  std::pair<Value*, int64_t> ungroup(Value* kv) {
    const Type& t = kv->type;
    Node* reshape = inner(kv, Op::Reshape);
    Node* expand = reshape ? inner(reshape->inputs[0], Op::Expand) : nullptr;
    Node* unsqueeze = expand ? inner(expand->inputs[0], Op::Unsqueeze) : nullptr;
    if (!unsqueeze || !t.isStatic() || t.rank() < 3) return {kv, 1};
    Value* x = unsqueeze->inputs[0];
    const Type &u = expand->inputs[0]->type, &e = reshape->inputs[0]->type;
    int64_t r = t.rank();
    if (!x->type.isStatic() || x->type.rank() != r || !u.isStatic() || !e.isStatic() || u.rank() != r + 1 || e.rank() != r + 1) return {kv, 1};
    int64_t kvHeads = x->type.dims[r - 3].value, heads = t.dims[r - 3].value;
    if (kvHeads <= 0 || heads % kvHeads || heads == kvHeads) return {kv, 1};
    // x [..., Hkv, T, D] -> [..., Hkv, 1, T, D] -> [..., Hkv, g, T, D] -> [..., Hkv g, T, D]
    for (int64_t d = 0; d <= r; ++d) {
      int64_t xd = d < r - 2 ? x->type.dims[d].value : d == r - 2 ? 1 : x->type.dims[d - 1].value;
      int64_t ed = d == r - 2 ? heads / kvHeads : xd;
      if (u.dims[d].value != xd || e.dims[d].value != ed) return {kv, 1};
    }
    for (int64_t d = 0; d < r; ++d)
      if (d != r - 3 && t.dims[d] != x->type.dims[d]) return {kv, 1};
    return {x, heads / kvHeads};
  }

  /// Fuses the pattern ending in `out` (a MatMul of probabilities and values), returning the
  /// nodes to place before it, or nothing when the pattern does not hold.
  std::optional<std::vector<Node*>> match(Node& out) {
    Node* softmax = inner(out.inputs[0], Op::Softmax);
    if (!softmax) softmax = guardedSoftmax(out.inputs[0]);
    if (!softmax) return std::nullopt;
    Value *x = softmax->inputs[0], *v = out.inputs[1];
    if (!x->type.isStatic() || x->type.rank() < 2) return std::nullopt;
    int64_t r = x->type.rank(), axis = softmax->getInt("axis", -1);
    if (axis != -1 && axis != r - 1) return std::nullopt;
    int64_t tq = x->type.dims[r - 2].value, tk = x->type.dims[r - 1].value;
    // The mask.
    bool causal = false;
    if (Node* w = inner(x, Op::Where)) {
      int s = constantScalar(w->inputs[1]) ? 2 : 1; // the branch that holds the scores
      auto fill = constantScalar(w->inputs[3 - s]);
      if (!fill || *fill > kMasked || w->inputs[s]->type != x->type) return std::nullopt;
      if (!isCausal(w->inputs[0], tq, tk, [&](const Tensor& m, int64_t e) { return (m.getF(e) != 0) == (s == 1); })) return std::nullopt;
      x = w->inputs[s], causal = true;
    } else if (Node* a = inner(x, Op::Add)) {
      int s = a->inputs[0]->kind == ValueKind::Const ? 1 : 0;
      if (a->inputs[s]->type != x->type) return std::nullopt;
      auto visible = [](const Tensor& m, int64_t e) { return m.getF(e) > kMasked; };
      bool zeros = true; // visible entries must add nothing
      if (const Value* m = a->inputs[1 - s]; m->kind == ValueKind::Const)
        for (int64_t e = 0; e < m->data->numel(); ++e) zeros &= !visible(*m->data, e) || m->data->getF(e) == 0;
      if (!zeros || !isCausal(a->inputs[1 - s], tq, tk, visible)) return std::nullopt;
      x = a->inputs[s], causal = true;
    }
    // The scale.
    double scale = 1;
    if (auto sc = scaled(x)) {
      x = sc->first, scale = sc->second;
    } else if (inner(x, Op::Mul)) {
      return std::nullopt; // a product with something else than a scalar
    } else if (Node* d = inner(x, Op::Div)) {
      auto c = constantScalar(d->inputs[1]);
      if (!c || *c == 0 || d->inputs[0]->type != x->type) return std::nullopt;
      x = d->inputs[0], scale = 1 / *c;
    }
    Node* scores = inner(x, Op::MatMul);
    if (!scores) return std::nullopt;
    Value *q = scores->inputs[0], *kT = scores->inputs[1];
    // The scale split over both operands, each times sqrt(scale), as SDPA's decompositions write it.
    for (Value** side : {&q, &kT})
      if (auto sc = scaled(*side)) *side = sc->first, scale *= sc->second;
    // One rank and the same leading dims everywhere: no broadcasting inside the fused node, but
    // for multi-query attention's one key and value head, which the products broadcast over the
    // query heads [..., H, T, D] (Falcon): the grouped node with one group of all H.
    for (const Value* t : {q, kT, v})
      if (!t->type.ranked || t->type.rank() != r || t->type.dtype != x->type.dtype) return std::nullopt;
    auto oneHead = [&](const Value* t, int64_t d) { return d + 3 == r && t->type.dims[d] == Dim::of(1) && q->type.dims[d].isStatic(); };
    for (int64_t d = 0; d + 2 < r; ++d) {
      bool shared = oneHead(kT, d) && oneHead(v, d);
      if (!(shared || (sameDim(q->type.dims[d], kT->type.dims[d]) && sameDim(q->type.dims[d], v->type.dims[d]))) ||
          !sameDim(q->type.dims[d], x->type.dims[d]))
        return std::nullopt;
    }
    std::vector<Node*> added;
    Value* k = keys(kT, added);
    // Keys and values repeated for groups of query heads: read once per group instead.
    if (auto [kg, gk] = ungroup(k); gk > 1)
      if (auto [vg, gv] = ungroup(v); gv == gk) k = kg, v = vg;
    Node* fused = g.addNode(Op::FusedAttention, {q, k, v}, 2, softmax->name + ".attention",
                            {g.uniqueName(out.outputs[0]->name + ".attention"), g.uniqueName(softmax->outputs[0]->name + ".lse")});
    fused->attrs["scale"] = scale;
    fused->attrs["causal"] = int64_t(causal);
    added.push_back(fused);
    g.replaceAllUses(out.outputs[0], fused->outputs[0]);
    return added;
  }
};

} // namespace

Error fuseAttention(Graph& g, int* count) {
  Matcher m{g, countUses(g)};
  return rewriteInOrder(g, [&](Node& n) { return n.op == Op::MatMul ? m.match(n) : std::nullopt; }, true, count);
}

} // namespace sgc::ir
