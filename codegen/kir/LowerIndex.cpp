// Lowerings of ops whose results come from positions or shapes: ArgMax and
// ArgMin, Hardmax, Tile, Trilu, and the shape ops (Shape, Size,
// ConstantOfShape, Range) that constant folding leaves when an operand is
// only known at run time.
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

namespace sgc::kir {
namespace {

using B = Builder;

/// The first (or with select_last_index the last) position of the row's maximum (minimum) in a
/// serial pass: local `best` holds the value, `arg` its position.
std::vector<StmtRef> bestOfRow(B& b, const ir::Value* x, const AxisRows& r, int row, bool isMax, bool last, int best, int arg, Scalar t) {
  int k = b.newLoopVar();
  ExprRef v = b.ld(x, r.at(loopVar(row), loopVar(k)));
  ExprRef better = isMax ? (last ? ge(v, local(best, t)) : gt(v, local(best, t))) : (last ? le(v, local(best, t)) : lt(v, local(best, t)));
  better = binary(KOp::Or, better, eq(loopVar(k), 0.0));
  return {let(best, constant(0, t)), let(arg, B::i(0)),
          loop(k, r.d, false, {set(arg, select(better, loopVar(k), local(arg, Scalar::I64))), set(best, select(better, v, local(best, t)))})};
}

} // namespace

Expected<std::vector<Kernel>> lowerArgReduce(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  AxisRows r(shapeOf(x), axisOf(n, x->type.rank(), 0));
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int row = b.newLoopVar(), best = b.newLocal(), arg = b.newLocal();
  auto body = bestOfRow(b, x, r, row, n.op == ir::Op::ArgMax, n.getInt("select_last_index", 0), best, arg, t);
  body.push_back(b.st(y, loopVar(row), local(arg, Scalar::I64)));
  return std::vector<Kernel>{b.finish(loop(row, r.outer * r.inner, true, body))};
}

/// Hardmax: 1 at the row's first maximum, 0 elsewhere.
Expected<std::vector<Kernel>> lowerHardmax(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  AxisRows r(shapeOf(x), axisOf(n, x->type.rank(), -1));
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int row = b.newLoopVar(), best = b.newLocal(), arg = b.newLocal();
  auto body = bestOfRow(b, x, r, row, true, false, best, arg, t);
  int k = b.newLoopVar();
  body.push_back(loop(k, r.d, false, {b.st(y, r.at(loopVar(row), loopVar(k)), cast(eq(loopVar(k), local(arg, Scalar::I64)), t))}));
  return std::vector<Kernel>{b.finish(loop(row, r.outer * r.inner, true, body))};
}

Expected<std::vector<Kernel>> lowerTile(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(x);
  return std::vector<Kernel>{pointwise(name, y, [&](B& b, const std::vector<ExprRef>& c) {
    std::vector<ExprRef> in;
    for (size_t d = 0; d < c.size(); ++d) in.push_back(binary(KOp::IMod, c[d], B::i(xs[d])));
    return b.ld(x, B::offset(in, xs));
  })};
}

/// Trilu: x where (upper ? col - row >= k : col - row <= k), else 0.
Expected<std::vector<Kernel>> lowerTrilu(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *kv = n.input(1), *y = n.outputs[0];
  bool upper = n.getInt("upper", 1);
  Scalar t = computeType(x->type.dtype);
  return std::vector<Kernel>{pointwise(name, y, [&](B& b, const std::vector<ExprRef>& c) {
    ExprRef k = kv ? cast(b.ld(kv, B::i(0)), Scalar::I64) : B::i(0), diff = c[c.size() - 1] - c[c.size() - 2];
    return select(upper ? ge(diff, k) : le(diff, k), b.ld(x, loopVar(0)), constant(0, t));
  })};
}

/// Shape and Size of a static operand (folding leaves them when their result is used as data).
Expected<std::vector<Kernel>> lowerShapeOf(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  std::vector<int64_t> s = shapeOf(x), dims;
  if (n.op == ir::Op::Size) {
    dims.push_back(numel(x));
  } else {
    int64_t r = (int64_t)s.size(), start = n.getInt("start", 0), end = n.getInt("end", r);
    start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r), end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    dims.assign(s.begin() + start, s.begin() + std::max(start, end));
  }
  return std::vector<Kernel>{pointwise(name, y, [&](B&, const std::vector<ExprRef>&) {
    ExprRef v = B::i(dims.empty() ? 0 : dims.back());
    for (size_t i = dims.size(); i-- > 1;) v = select(eq(loopVar(0), (double)(i - 1)), B::i(dims[i - 1]), v);
    return v;
  })};
}

Expected<std::vector<Kernel>> lowerConstantOfShape(const std::string& name, const ir::Node& n) {
  const ir::Value* y = n.outputs[0];
  const ir::Tensor* value = n.getTensor("value");
  double v = value && value->numel() ? (ir::isFloat(value->dtype) ? value->getF(0) : (double)value->getI(0)) : 0;
  Scalar t = computeType(y->type.dtype);
  return std::vector<Kernel>{pointwise(name, y, [&](B&, const std::vector<ExprRef>&) { return constant(v, t); })};
}

/// Range: start + i * delta.
Expected<std::vector<Kernel>> lowerRange(const std::string& name, const ir::Node& n) {
  const ir::Value *start = n.input(0), *delta = n.input(2), *y = n.outputs[0];
  Scalar t = computeType(y->type.dtype);
  return std::vector<Kernel>{pointwise(name, y, [&](B& b, const std::vector<ExprRef>&) {
    return b.ld(start, B::i(0)) + cast(loopVar(0), t) * b.ld(delta, B::i(0));
  })};
}

} // namespace sgc::kir
