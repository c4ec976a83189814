// Lowerings of CumSum and CumProd (a parallel iteration per row, the scan
// serial along the axis, in the order the op runs it) and of CumProd's
// gradient (a parallel iteration per element: the product of the other
// factors of each output that includes it, without division).
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

namespace sgc::kir {
namespace {

using B = Builder;

/// The rows of a cumulative op over its (constant) axis input.
struct ScanGeometry {
  AxisRows rows;
  int64_t outer, n, inner;
  bool reverse, exclusive;
  /// Element t of row `row` in scan order.
  ExprRef at(const ExprRef& row, const ExprRef& t) const { return rows.at(row, reverse ? (double)(n - 1) - t : t); }
};

Expected<ScanGeometry> scanGeometry(const ir::Node& n, const ir::Value* x, const ir::Value* axisV) {
  if (axisV->kind != ir::ValueKind::Const || axisV->data->numel() != 1) return makeError(ir::describe(n) + ": the axis must be a constant scalar");
  std::vector<int64_t> s = x->type.shape();
  int64_t r = (int64_t)s.size(), axis = axisV->data->getI(0);
  if (axis < -r || axis >= r) return makeError(ir::describe(n) + ": axis out of range");
  if (axis < 0) axis += r;
  AxisRows rows(s, axis);
  return ScanGeometry{rows, rows.outer, rows.d, rows.inner, (bool)n.getInt("reverse", 0), (bool)n.getInt("exclusive", 0)};
}

} // namespace

Expected<std::vector<Kernel>> lowerCumulative(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  auto g = scanGeometry(n, x, n.input(1));
  if (!g) return g.takeError();
  bool prod = n.op == ir::Op::CumProd;
  Scalar t = computeType(x->type.dtype), a = accumulatorType(t);
  B b(name);
  int row = b.newLoopVar(), k = b.newLoopVar(), acc = b.newLocal();
  ExprRef at = g->at(loopVar(row), loopVar(k)), v = cast(b.ld(x, at), a);
  StmtRef step = set(acc, prod ? local(acc, a) * v : local(acc, a) + v);
  std::vector<StmtRef> body = g->exclusive ? std::vector<StmtRef>{b.st(y, at, local(acc, a)), step}
                                           : std::vector<StmtRef>{step, b.st(y, at, local(acc, a))};
  return std::vector<Kernel>{b.finish(loop(row, g->outer * g->inner, true, {let(acc, constant(prod ? 1 : 0, a)), loop(k, g->n, false, body)}))};
}

/// dx at scan position s = sum over outputs t that include x_s of dy_t times their other
/// factors: p starts as the product before s and takes each next factor as t moves on.
Expected<std::vector<Kernel>> lowerCumProdGrad(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *dy = n.input(1), *dx = n.outputs[0];
  auto g = scanGeometry(n, x, n.input(2));
  if (!g) return g.takeError();
  Scalar t = computeType(x->type.dtype), a = accumulatorType(t);
  B b(name);
  int e = b.newLoopVar(), u = b.newLoopVar(), d = b.newLoopVar(), p = b.newLocal(), acc = b.newLocal();
  ExprRef row = binary(KOp::IDiv, loopVar(e), B::i(g->n)), s = binary(KOp::IMod, loopVar(e), B::i(g->n));
  ExprRef first = g->exclusive ? s + 1.0 : s, tpos = first + loopVar(d); // the outputs t = first, first + 1, ...
  ExprRef next = g->exclusive ? tpos : tpos + 1.0;
  auto xa = [&](const ExprRef& q) { return cast(b.ld(x, g->at(row, B::clamp(q, g->n))), a); };
  StmtRef take = when(b, lt(next, (double)g->n), {set(p, local(p, a) * xa(next))});
  std::vector<StmtRef> body{let(p, constant(1, a)), loopUpTo(u, g->n, s, {set(p, local(p, a) * xa(loopVar(u)))}), let(acc, constant(0, a)),
                            loopUpTo(d, g->n, (double)g->n - first, {set(acc, local(acc, a) + cast(b.ld(dy, g->at(row, B::clamp(tpos, g->n))), a) * local(p, a)), take}),
                            b.st(dx, g->at(row, s), local(acc, a))};
  // Parallel iterations enumerate (row, s) pairs row-major: e = row * n + s.
  return std::vector<Kernel>{b.finish(loop(e, g->outer * g->inner * g->n, true, body))};
}

} // namespace sgc::kir
