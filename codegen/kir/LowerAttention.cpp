// Lowering of FusedAttention and its gradient: one parallel iteration per row
// (a query, or in the gradient also a key), which keeps its row of q, k or v
// and its running sums in locals (registers on a GPU) and walks the other
// side's rows, so that no [Tq, Tk] scores are ever stored. The forward pass
// is the online softmax of flash attention (a running maximum rescales the
// running sums); the gradient recomputes each probability from the row's
// log-sum-exp. A causal mask shortens the walk to the visible triangle.
// The same kernels serve the CPU (rows spread over threads) and the GPU (a
// thread per row; the threads of a warp read the same key rows).
#include "codegen/kir/AttentionGeometry.h"
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <cmath>
#include <functional>

namespace sgc::kir {
namespace {
using B = Builder;

/// An attention node's geometry and compute type, and its row arithmetic.
struct Attention : AttentionGeometry {
  Scalar t;

  explicit Attention(const ir::Node& node) : AttentionGeometry(node), t(computeType(node.input(0)->type.dtype)) {}
  ExprRef c(double v) const { return B::c(v, t); }
  /// The problem and the position of flat row r (of a tensor seen as [rows, width]) of `len`
  /// positions, its heads after its positions or before, and back.
  ExprRef problem(const ExprRef& r, int64_t len, bool headsAfter) const {
    if (!headsAfter) return binary(KOp::IDiv, r, B::i(len));
    return B::add(B::mul(binary(KOp::IDiv, r, B::i(len * h)), B::i(h)), binary(KOp::IMod, r, B::i(h)));
  }
  ExprRef position(const ExprRef& r, int64_t len, bool headsAfter) const {
    return headsAfter ? binary(KOp::IMod, binary(KOp::IDiv, r, B::i(h)), B::i(len)) : binary(KOp::IMod, r, B::i(len));
  }
  ExprRef row(const ExprRef& p, const ExprRef& i, int64_t len, bool headsAfter) const {
    if (!headsAfter) return B::add(B::mul(p, B::i(len)), i);
    return B::add(B::mul(B::add(B::mul(binary(KOp::IDiv, p, B::i(h)), B::i(len)), i), B::i(h)), binary(KOp::IMod, p, B::i(h)));
  }
  /// The result's row (its gradient's, the row statistics') of problem p's query i.
  ExprRef resultRow(const ExprRef& p, const ExprRef& i) const { return row(p, i, tq, resultBthd); }
  /// The row of operand `which` (0 q, 1 k, 2 v) of problem p's position i: packed, or for grouped
  /// keys and values problem p / group's.
  ExprRef operand(int which, const ExprRef& p, const ExprRef& i, int64_t len) const {
    if (which > 0 && group > 1) return B::add(B::mul(binary(KOp::IDiv, p, B::i(group)), B::i(len)), i);
    if (!packed) return row(p, i, len, bthd);
    ExprRef position = B::add(B::mul(binary(KOp::IDiv, p, B::i(h)), B::i(len)), i); // [..., T, 3, H, D]
    return B::add(B::mul(B::add(B::mul(position, B::i(3)), B::i(which)), B::i(h)), binary(KOp::IMod, p, B::i(h)));
  }
  /// The row of operand `which`'s gradient (per query head when grouped).
  ExprRef gradient(int which, const ExprRef& p, const ExprRef& i, int64_t len) const {
    return group > 1 ? row(p, i, len, false) : operand(which, p, i, len);
  }
};

/// Element e of row `row` in a row-major matrix `width` elements wide.
ExprRef at(ExprRef row, int64_t width, int64_t e) { return B::add(B::mul(std::move(row), B::i(width)), B::i(e)); }

/// sum over e of local(row[e]) * load(e).
ExprRef dot(const Attention& a, const std::vector<int>& row, const std::function<ExprRef(int64_t)>& load) {
  std::vector<ExprRef> terms;
  for (size_t e = 0; e < row.size(); ++e) terms.push_back(B::mul(local(row[e], a.t), load((int64_t)e)));
  return sumTree(std::move(terms));
}

/// Forward: for query row r (head h, position i), the online softmax over keys j < bound.
Kernel forward(const std::string& name, const Attention& a) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *y = a.n.outputs[0], *lse = a.n.outputs[1];
  B b(name);
  int r = b.newLoopVar(), j = b.newLoopVar();
  ExprRef h = a.problem(loopVar(r), a.tq, a.resultBthd), i = a.position(loopVar(r), a.tq, a.resultBthd);
  ExprRef krow = a.operand(1, h, loopVar(j), a.tk), vrow = a.operand(2, h, loopVar(j), a.tk);
  std::vector<StmtRef> body;
  auto qs = locals(b, a.d, body, [&](int64_t e) { return B::mul(b.ld(q, at(a.operand(0, h, i, a.tq), a.d, e)), a.c(a.scale)); });
  auto os = locals(b, a.dv, body, [&](int64_t) { return a.c(0); });
  int m = b.newLocal(), l = b.newLocal(), s = b.newLocal(), mn = b.newLocal(), corr = b.newLocal(), p = b.newLocal();
  body.push_back(let(m, a.c(-INFINITY)));
  body.push_back(let(l, a.c(0)));
  std::vector<StmtRef> step{
      let(s, dot(a, qs, [&](int64_t e) { return b.ld(k, at(krow, a.d, e)); })),
      let(mn, binary(KOp::Max, local(m, a.t), local(s, a.t))),
      let(corr, unary(KOp::Exp, B::sub(local(m, a.t), local(mn, a.t)))),
      let(p, unary(KOp::Exp, B::sub(local(s, a.t), local(mn, a.t)))),
      set(l, B::add(B::mul(local(l, a.t), local(corr, a.t)), local(p, a.t))),
  };
  for (int64_t e = 0; e < a.dv; ++e)
    step.push_back(set(os[e], B::add(B::mul(local(os[e], a.t), local(corr, a.t)),
                                     B::mul(local(p, a.t), b.ld(v, at(vrow, a.dv, e))))));
  step.push_back(set(m, local(mn, a.t)));
  body.push_back(a.causal ? loopUpTo(j, a.tk, B::add(i, B::i(1)), std::move(step)) : loop(j, a.tk, false, std::move(step)));
  for (int64_t e = 0; e < a.dv; ++e) body.push_back(b.st(y, at(loopVar(r), a.dv, e), B::div(local(os[e], a.t), local(l, a.t))));
  body.push_back(b.st(lse, loopVar(r), B::add(local(m, a.t), unary(KOp::Log, local(l, a.t)))));
  return b.finish(loop(r, a.heads * a.tq, true, std::move(body)));
}

/// dq and delta, for query row r: delta = dy . y; dq = scale * sum over j of p (dy . v_j - delta) k_j.
Kernel gradQueries(const std::string& name, const Attention& a) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *y = a.n.input(3), *lse = a.n.input(4), *dy = a.n.input(5);
  const ir::Value *dq = a.gradOf(0), *delta = a.n.outputs[3];
  B b(name);
  int r = b.newLoopVar(), j = b.newLoopVar();
  ExprRef h = a.problem(loopVar(r), a.tq, a.resultBthd), i = a.position(loopVar(r), a.tq, a.resultBthd);
  ExprRef krow = a.operand(1, h, loopVar(j), a.tk), vrow = a.operand(2, h, loopVar(j), a.tk), qrow = a.operand(0, h, i, a.tq);
  std::vector<StmtRef> body;
  auto dys = locals(b, a.dv, body, [&](int64_t e) { return b.ld(dy, at(loopVar(r), a.dv, e)); });
  auto qs = locals(b, a.d, body, [&](int64_t e) { return b.ld(q, at(qrow, a.d, e)); });
  auto dqs = locals(b, a.d, body, [&](int64_t) { return a.c(0); });
  int dl = b.newLocal(), lr = b.newLocal(), p = b.newLocal(), ds = b.newLocal();
  body.push_back(let(dl, dot(a, dys, [&](int64_t e) { return b.ld(y, at(loopVar(r), a.dv, e)); })));
  body.push_back(b.st(delta, loopVar(r), local(dl, a.t)));
  body.push_back(let(lr, b.ld(lse, loopVar(r))));
  std::vector<StmtRef> step{
      let(p, unary(KOp::Exp, B::sub(B::mul(a.c(a.scale), dot(a, qs, [&](int64_t e) { return b.ld(k, at(krow, a.d, e)); })), local(lr, a.t)))),
      let(ds, B::mul(local(p, a.t), B::sub(dot(a, dys, [&](int64_t e) { return b.ld(v, at(vrow, a.dv, e)); }), local(dl, a.t)))),
  };
  for (int64_t e = 0; e < a.d; ++e) step.push_back(set(dqs[e], B::add(local(dqs[e], a.t), B::mul(local(ds, a.t), b.ld(k, at(krow, a.d, e))))));
  body.push_back(a.causal ? loopUpTo(j, a.tk, B::add(i, B::i(1)), std::move(step)) : loop(j, a.tk, false, std::move(step)));
  for (int64_t e = 0; e < a.d; ++e) body.push_back(b.st(dq, at(qrow, a.d, e), B::mul(local(dqs[e], a.t), a.c(a.scale))));
  return b.finish(loop(r, a.heads * a.tq, true, std::move(body)));
}

/// dk (keys = true) or dv, for key row c (head h, position j), over the queries that see it:
/// dk = scale * sum over i of p (dy_i . v - delta_i) q_i; dv = sum over i of p dy_i.
Kernel gradKeysOrValues(const std::string& name, const Attention& a, bool keys) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *lse = a.n.input(4), *dy = a.n.input(5);
  const ir::Value *out = a.gradOf(keys ? 1 : 2), *delta = a.n.outputs[3];
  B b(name);
  int c = b.newLoopVar(), t = b.newLoopVar(); // c: a key of a (query) head, in the operands' layout
  ExprRef h = a.problem(loopVar(c), a.tk, a.bthd), j = a.position(loopVar(c), a.tk, a.bthd);
  // Causal: queries i >= j see key j. The walk starts at the first query of j's group of 32
  // keys (a GPU warp), so that all lanes read the same query row at once; the lanes whose key
  // that query does not see yet add zero.
  ExprRef first = a.causal ? B::mul(binary(KOp::IDiv, j, B::i(32)), B::i(32)) : B::i(0), query = B::add(first, loopVar(t));
  ExprRef row = a.resultRow(h, query), qrow = a.operand(0, h, query, a.tq);
  std::vector<StmtRef> body;
  auto ks = locals(b, a.d, body, [&](int64_t e) { return b.ld(k, at(a.operand(1, h, j, a.tk), a.d, e)); });
  std::vector<int> vs;
  if (keys) vs = locals(b, a.dv, body, [&](int64_t e) { return b.ld(v, at(a.operand(2, h, j, a.tk), a.dv, e)); });
  int64_t width = keys ? a.d : a.dv;
  auto acc = locals(b, width, body, [&](int64_t) { return a.c(0); });
  int p = b.newLocal(), ds = keys ? b.newLocal() : -1;
  std::vector<StmtRef> step{
      let(p, unary(KOp::Exp, B::sub(B::mul(a.c(a.scale), dot(a, ks, [&](int64_t e) { return b.ld(q, at(qrow, a.d, e)); })), b.ld(lse, row)))),
  };
  if (a.causal) step.push_back(set(p, select(binary(KOp::Ge, query, j), local(p, a.t), a.c(0))));
  if (keys) {
    step.push_back(let(ds, B::mul(local(p, a.t), B::sub(dot(a, vs, [&](int64_t e) { return b.ld(dy, at(row, a.dv, e)); }), b.ld(delta, row)))));
    for (int64_t e = 0; e < a.d; ++e) step.push_back(set(acc[e], B::add(local(acc[e], a.t), B::mul(local(ds, a.t), b.ld(q, at(qrow, a.d, e))))));
  } else {
    for (int64_t e = 0; e < a.dv; ++e) step.push_back(set(acc[e], B::add(local(acc[e], a.t), B::mul(local(p, a.t), b.ld(dy, at(row, a.dv, e))))));
  }
  body.push_back(a.causal ? loopUpTo(t, a.tq, B::sub(B::i(a.tq), first), std::move(step)) : loop(t, a.tq, false, std::move(step)));
  for (int64_t e = 0; e < width; ++e)
    body.push_back(b.st(out, at(a.gradient(keys ? 1 : 2, h, j, a.tk), width, e), keys ? B::mul(local(acc[e], a.t), a.c(a.scale)) : local(acc[e], a.t)));
  return b.finish(loop(c, a.heads * a.tk, true, std::move(body)));
}

} // namespace

Expected<std::vector<Kernel>> lowerAttention(const std::string& name, const ir::Node& n) {
  Attention a(n);
  if (n.op == ir::Op::FusedAttention) return std::vector<Kernel>{forward(name, a)};
  // delta is written by the first kernel and read by the second.
  return std::vector<Kernel>{gradQueries(name + "_dq", a), gradKeysOrValues(name + "_dk", a, true), gradKeysOrValues(name + "_dv", a, false)};
}

} // namespace sgc::kir
