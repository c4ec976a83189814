// Elementwise aten ops and reductions (see Aten.def), under torch's type
// promotion: numbers and 0-d tensors take the dtype of the other operands.
#include "frontend/torchscript/Aten.h"

#include <cmath>

namespace sgc::ts_import {
namespace {

using ir::Op;

/// The two operands of a binary op in their promoted dtype (`floatResult`: at least float32).
Expected<std::pair<ir::Value*, ir::Value*>> operands(Call& c, const std::string& a, const std::string& b, bool floatResult = false) {
  const Val *x = c.arg(0, a), *y = c.arg(1, b);
  if (!x || !y) return c.fail("takes two operands");
  ir::DType t = promote({x, y});
  if (floatResult && !ir::isFloat(t)) t = ir::DType::F32;
  auto l = asTensor(c, *x, t);
  if (!l) return l.takeError();
  auto r = asTensor(c, *y, t);
  if (!r) return r.takeError();
  return std::make_pair(*l, *r);
}

Expected<Val> binary(Call& c, Op op, bool floatResult = false) {
  auto xy = operands(c, "self", "other", floatResult);
  if (!xy) return xy.takeError();
  return wrap(c.c.op(op, {xy->first, xy->second}));
}

/// add/sub with alpha: self op alpha * other.
Expected<Val> addSub(Call& c, Op op, bool reversed) {
  auto xy = operands(c, "self", "other");
  if (!xy) return xy.takeError();
  ir::Value *x = xy->first, *y = xy->second;
  double alpha = c.realOr(2, "alpha", 1);
  if (alpha != 1) {
    auto m = c.c.op(Op::Mul, {y, c.c.scalar(alpha, y->type.dtype)});
    if (!m) return m.takeError();
    y = *m;
  }
  return wrap(reversed ? c.c.op(op, {y, x}) : c.c.op(op, {x, y}));
}

Expected<Val> compare(Call& c, Op op, bool negate = false) {
  auto xy = operands(c, "self", "other");
  if (!xy) return xy.takeError();
  auto r = c.c.op(op, {xy->first, xy->second});
  if (!r || !negate) return wrap(std::move(r));
  return wrap(c.c.op(Op::Not, {*r}));
}

/// A unary op of the input (in float32 at least when `floatOnly`).
Expected<Val> unary(Call& c, Op op, std::map<std::string, ir::Attr> attrs = {}, bool floatOnly = true) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  ir::Value* v = *x;
  if (floatOnly && !ir::isFloat(v->type.dtype)) {
    auto f = castTo(c, v, ir::DType::F32);
    if (!f) return f.takeError();
    v = *f;
  }
  return wrap(c.c.op(op, {v}, std::move(attrs)));
}

/// The reduced axes of a dim argument (an int, a list, or None: all).
Expected<std::vector<int64_t>> reducedAxes(Call& c, size_t i, ir::Value* x) {
  const Val* d = c.arg(i, "dim");
  std::vector<int64_t> axes;
  if (!d || d->k == Val::K::None) {
    for (int64_t a = 0; a < rankOf(x); ++a) axes.push_back(a);
    return axes;
  }
  auto dims = c.ints(i, "dim");
  if (!dims) return dims.takeError();
  if (dims->empty())
    for (int64_t a = 0; a < rankOf(x); ++a) axes.push_back(a);
  for (int64_t a : *dims) {
    auto ax = axisOf(c, a, rankOf(x));
    if (!ax) return ax.takeError();
    axes.push_back(*ax);
  }
  return axes;
}

Expected<Val> reduce(Call& c, Op op, bool floatResult) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto axes = reducedAxes(c, 1, *x);
  if (!axes) return axes.takeError();
  auto dtype = dtypeArg(c, 3, "dtype");
  if (!dtype) return dtype.takeError();
  ir::Value* v = *x;
  ir::DType t = dtype->value_or(floatResult || ir::isFloat(v->type.dtype) ? v->type.dtype : ir::DType::I64);
  if (floatResult && !ir::isFloat(t)) return c.fail("mean of an integer tensor needs a float dtype");
  auto cast = castTo(c, v, t);
  if (!cast) return cast.takeError();
  bool keep = c.flag(2, "keepdim", false);
  return wrap(c.c.op(op, {*cast, c.c.ints(*axes)}, {{"keepdims", int64_t(keep)}}));
}

/// min/max: of all elements; along a dim, (values, indices); or of two tensors.
Expected<Val> minMax(Call& c, Op reduceOp, Op argOp, Op pairOp) {
  const Val* other = c.arg(1, "other");
  if (other && other->k == Val::K::Tensor) return binary(c, pairOp);
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  if (!other) return wrap(c.c.op(reduceOp, {*x, c.c.ints({})}, {{"keepdims", int64_t(0)}}));
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto ax = axisOf(c, *dim, rankOf(*x));
  if (!ax) return ax.takeError();
  bool keep = c.flag(2, "keepdim", false);
  auto values = c.c.op(reduceOp, {*x, c.c.ints({*ax})}, {{"keepdims", int64_t(keep)}});
  if (!values) return values.takeError();
  auto indices = c.c.op(argOp, {*x}, {{"axis", *ax}, {"keepdims", int64_t(keep)}});
  if (!indices) return indices.takeError();
  return Val::list({tensorVal(*values), tensorVal(*indices)}, true);
}

Expected<Val> softmaxLike(Call& c, Op op) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto ax = axisOf(c, *dim, rankOf(*x));
  if (!ax) return ax.takeError();
  auto dtype = dtypeArg(c, 2, "dtype");
  if (!dtype) return dtype.takeError();
  auto v = castTo(c, *x, dtype->value_or(ir::isFloat((*x)->type.dtype) ? (*x)->type.dtype : ir::DType::F32));
  if (!v) return v.takeError();
  return wrap(c.c.op(op, {*v}, {{"axis", *ax}}));
}

} // namespace

Expected<Val> atenAdd(Call& c) { return addSub(c, Op::Add, false); }
Expected<Val> atenSub(Call& c) { return addSub(c, Op::Sub, false); }
Expected<Val> atenRsub(Call& c) { return addSub(c, Op::Sub, true); }
Expected<Val> atenMul(Call& c) { return binary(c, Op::Mul); }
Expected<Val> atenDiv(Call& c) {
  std::string mode = c.strOr(2, "rounding_mode", "");
  if (mode.empty()) return binary(c, Op::Div, true);
  if (mode == "floor") return atenFloorDivide(c);
  if (mode != "trunc") return c.fail("rounding_mode '" + mode + "' is not one torch has");
  auto xy = operands(c, "self", "other");
  if (!xy) return xy.takeError();
  auto q = c.c.op(Op::Div, {xy->first, xy->second});
  if (!q || !ir::isFloat(xy->first->type.dtype)) return wrap(std::move(q)); // integer Div truncates
  auto sign = c.c.op(Op::Sign, {*q});
  if (!sign) return sign.takeError();
  auto abs = c.c.op(Op::Abs, {*q});
  if (!abs) return abs.takeError();
  auto mag = c.c.op(Op::Floor, {*abs});
  if (!mag) return mag.takeError();
  return wrap(c.c.op(Op::Mul, {*sign, *mag}));
}
Expected<Val> atenFloorDivide(Call& c) {
  auto xy = operands(c, "self", "other");
  if (!xy) return xy.takeError();
  auto [x, y] = *xy;
  if (ir::isFloat(x->type.dtype)) {
    auto q = c.c.op(Op::Div, {x, y});
    if (!q) return q.takeError();
    return wrap(c.c.op(Op::Floor, {*q}));
  }
  // (x - x mod y) / y is exact, and Mod takes the divisor's sign: floor division.
  auto m = c.c.op(Op::Mod, {x, y});
  if (!m) return m.takeError();
  auto d = c.c.op(Op::Sub, {x, *m});
  if (!d) return d.takeError();
  return wrap(c.c.op(Op::Div, {*d, y}));
}
Expected<Val> atenRemainder(Call& c) { return binary(c, Op::Mod); }
Expected<Val> atenPow(Call& c) {
  const Val *x = c.arg(0, "self"), *y = c.arg(1, "exponent");
  if (!x || !y) return c.fail("takes a base and an exponent");
  ir::DType t = promote({x, y});
  auto b = asTensor(c, *x, t);
  if (!b) return b.takeError();
  auto e = asTensor(c, *y, t);
  if (!e) return e.takeError();
  return wrap(c.c.op(Op::Pow, {*b, *e}));
}
Expected<Val> atenEq(Call& c) { return compare(c, Op::Equal); }
Expected<Val> atenNe(Call& c) { return compare(c, Op::Equal, true); }
Expected<Val> atenLt(Call& c) { return compare(c, Op::Less); }
Expected<Val> atenLe(Call& c) { return compare(c, Op::LessOrEqual); }
Expected<Val> atenGt(Call& c) { return compare(c, Op::Greater); }
Expected<Val> atenGe(Call& c) { return compare(c, Op::GreaterOrEqual); }
Expected<Val> atenAnd(Call& c) {
  auto xy = operands(c, "self", "other");
  if (!xy) return xy.takeError();
  return wrap(c.c.op(xy->first->type.dtype == ir::DType::Bool ? Op::And : Op::BitwiseAnd, {xy->first, xy->second}));
}
Expected<Val> atenOr(Call& c) {
  auto xy = operands(c, "self", "other");
  if (!xy) return xy.takeError();
  return wrap(c.c.op(xy->first->type.dtype == ir::DType::Bool ? Op::Or : Op::BitwiseOr, {xy->first, xy->second}));
}
Expected<Val> atenLogicalNot(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  if ((*x)->type.dtype != ir::DType::Bool) return wrap(c.c.op(Op::BitwiseNot, {*x}));
  return wrap(c.c.op(Op::Not, {*x}));
}
Expected<Val> atenMinimum(Call& c) { return binary(c, Op::Min); }
Expected<Val> atenMaximum(Call& c) { return binary(c, Op::Max); }
Expected<Val> atenWhere(Call& c) {
  auto cond = c.tensor(0, "condition");
  if (!cond) return cond.takeError();
  const Val *x = c.arg(1, "self"), *y = c.arg(2, "other");
  if (!x || !y) return c.fail("where(condition) (the indices of true elements) is not supported: its size depends on the data");
  ir::DType t = promote({x, y});
  auto a = asTensor(c, *x, t);
  if (!a) return a.takeError();
  auto b = asTensor(c, *y, t);
  if (!b) return b.takeError();
  auto m = castTo(c, *cond, ir::DType::Bool);
  if (!m) return m.takeError();
  return wrap(c.c.op(Op::Where, {*m, *a, *b}));
}
Expected<Val> atenMaskedFill(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto mask = c.tensor(1, "mask");
  if (!mask) return mask.takeError();
  const Val* value = c.arg(2, "value");
  if (!value) return c.fail("takes a value");
  auto v = asTensor(c, *value, (*x)->type.dtype);
  if (!v) return v.takeError();
  return wrap(c.c.op(Op::Where, {*mask, *v, *x}));
}
Expected<Val> atenClamp(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  ir::Value* v = *x;
  for (auto [i, name, op] : {std::tuple{1, "min", Op::Max}, std::tuple{2, "max", Op::Min}}) {
    const Val* b = c.arg(i, name);
    if (!b || b->k == Val::K::None) continue;
    auto bound = asTensor(c, *b, v->type.dtype);
    if (!bound) return bound.takeError();
    auto r = c.c.op(op, {v, *bound});
    if (!r) return r.takeError();
    v = *r;
  }
  return tensorVal(v);
}
Expected<Val> atenNeg(Call& c) { return unary(c, Op::Neg, {}, false); }
Expected<Val> atenAbs(Call& c) { return unary(c, Op::Abs, {}, false); }
Expected<Val> atenExp(Call& c) { return unary(c, Op::Exp); }
Expected<Val> atenLog(Call& c) { return unary(c, Op::Log); }
Expected<Val> atenLog1p(Call& c) {
  auto x = unary(c, Op::Identity);
  if (!x) return x.takeError();
  auto s = c.c.op(Op::Add, {x->t->v, c.c.scalar(1, x->t->v->type.dtype)});
  if (!s) return s.takeError();
  return wrap(c.c.op(Op::Log, {*s}));
}
Expected<Val> atenSqrt(Call& c) { return unary(c, Op::Sqrt); }
Expected<Val> atenRsqrt(Call& c) {
  auto s = unary(c, Op::Sqrt);
  if (!s) return s.takeError();
  return wrap(c.c.op(Op::Reciprocal, {s->t->v}));
}
Expected<Val> atenReciprocal(Call& c) { return unary(c, Op::Reciprocal); }
Expected<Val> atenSin(Call& c) { return unary(c, Op::Sin); }
Expected<Val> atenCos(Call& c) { return unary(c, Op::Cos); }
Expected<Val> atenTanh(Call& c) { return unary(c, Op::Tanh); }
Expected<Val> atenSigmoid(Call& c) { return unary(c, Op::Sigmoid); }
Expected<Val> atenErf(Call& c) { return unary(c, Op::Erf); }
Expected<Val> atenRelu(Call& c) { return unary(c, Op::Relu, {}, false); }
Expected<Val> atenSilu(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto s = c.c.op(Op::Sigmoid, {*x});
  if (!s) return s.takeError();
  return wrap(c.c.op(Op::Mul, {*x, *s}));
}
Expected<Val> atenGelu(Call& c) {
  std::string approx = c.strOr(1, "approximate", "none");
  if (approx != "none" && approx != "tanh") return c.fail("approximate='" + approx + "' is not one torch has");
  return unary(c, Op::Gelu, {{"approximate", approx}});
}
Expected<Val> atenHardsigmoid(Call& c) { return unary(c, Op::HardSigmoid, {{"alpha", 1.0 / 6}, {"beta", 0.5}}); }
Expected<Val> atenHardswish(Call& c) { return unary(c, Op::HardSwish); }
Expected<Val> atenHardtanh(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  ir::DType t = (*x)->type.dtype;
  return wrap(c.c.op(Op::Clip, {*x, c.c.scalar(c.realOr(1, "min_val", -1), t), c.c.scalar(c.realOr(2, "max_val", 1), t)}));
}
Expected<Val> atenDropout(Call& c) {
  auto x = c.tensor(0, "input");
  if (!x) return x.takeError();
  double p = c.realOr(1, "p", 0.5);
  bool train = c.flag(2, "train", true);
  if (p == 0 || !train) return tensorVal(*x);
  ir::Value* ratio = c.c.scalar(p, ir::DType::F32);
  ir::Value* mode = c.c.constant(ir::Tensor::fromI64(ir::DType::Bool, {}, {1}), "training");
  return wrap(c.c.op(Op::Dropout, {*x, ratio, mode}));
}

Expected<Val> atenMean(Call& c) { return reduce(c, Op::ReduceMean, true); }
Expected<Val> atenSum(Call& c) { return reduce(c, Op::ReduceSum, false); }
Expected<Val> atenMin(Call& c) { return minMax(c, Op::ReduceMin, Op::ArgMin, Op::Min); }
Expected<Val> atenMax(Call& c) { return minMax(c, Op::ReduceMax, Op::ArgMax, Op::Max); }
Expected<Val> atenCumsum(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto dtype = dtypeArg(c, 2, "dtype");
  if (!dtype) return dtype.takeError();
  ir::DType t = dtype->value_or(ir::isFloat((*x)->type.dtype) ? (*x)->type.dtype : ir::DType::I64);
  auto v = castTo(c, *x, t);
  if (!v) return v.takeError();
  ir::Value* axis = c.c.constant(ir::Tensor::scalarI64(*dim), "axis");
  return wrap(c.c.op(Op::CumSum, {*v, axis}));
}
Expected<Val> atenSoftmax(Call& c) { return softmaxLike(c, Op::Softmax); }
Expected<Val> atenLogSoftmax(Call& c) { return softmaxLike(c, Op::LogSoftmax); }

} // namespace sgc::ts_import
