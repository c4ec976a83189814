// Aten ops of sizes, dtypes and creation (see Aten.def): sizes are numbers
// known at import, created tensors constants.
#include "frontend/torchscript/Aten.h"

#include <cmath>

namespace sgc::ts_import {
namespace {

/// A constant of `shape` filled with `value`, in dtype `t`.
Val filled(Call& c, const std::vector<int64_t>& shape, double value, ir::DType t) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  ir::Tensor data = ir::isFloat(t) ? ir::Tensor::fromF64(t, shape, std::vector<double>(n, value))
                                   : ir::Tensor::fromI64(t, shape, std::vector<int64_t>(n, (int64_t)value));
  return tensorVal(c.c.constant(std::move(data), "full"));
}

Expected<Val> fullOf(Call& c, std::vector<int64_t> shape, size_t valueArg, double def, size_t dtypeIndex, ir::DType fallback, bool valueGivesType) {
  const Val* v = valueArg == size_t(-1) ? nullptr : c.arg(valueArg, "fill_value");
  double value = def;
  if (v) {
    auto r = c.real(valueArg, "fill_value");
    if (!r) return r.takeError();
    value = *r;
  }
  auto dtype = dtypeArg(c, dtypeIndex, "dtype");
  if (!dtype) return dtype.takeError();
  ir::DType t = dtype->value_or(valueGivesType && v && v->k == Val::K::Int ? ir::DType::I64 : valueGivesType && v && v->k == Val::K::Bool ? ir::DType::Bool : fallback);
  for (int64_t d : shape)
    if (d < 0) return c.fail("a negative size");
  return filled(c, shape, value, t);
}

} // namespace

Expected<Val> atenSize(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  std::vector<int64_t> s = shapeOf(*x);
  if (!c.arg(1, "dim")) {
    std::vector<Val> dims;
    for (int64_t d : s) dims.push_back(Val::integer(d));
    return Val::list(dims);
  }
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto ax = axisOf(c, *dim, (int64_t)s.size());
  if (!ax) return ax.takeError();
  return Val::integer(s[*ax]);
}
Expected<Val> atenDim(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return Val::integer(rankOf(*x));
}
Expected<Val> atenNumel(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return Val::integer((*x)->type.staticNumel().value_or(0));
}
Expected<Val> primNumToTensor(Call& c) {
  const Val* v = c.arg(0, "a");
  if (!v || !v->isNumber()) return c.fail("takes a number");
  if (v->k == Val::K::Float) return tensorVal(c.c.constant(ir::Tensor::fromF64(ir::DType::F64, {}, {v->f}), "number"));
  return tensorVal(c.c.constant(ir::Tensor::scalarI64(v->i), "number"));
}
Expected<Val> primDtype(Call& c) {
  auto x = c.tensor(0, "a");
  if (!x) return x.takeError();
  for (int64_t code = 0; code < 32; ++code)
    if (dtypeOfScalarType(code) == (*x)->type.dtype) return Val::integer(code);
  return c.fail("the tensor's dtype has no torch code");
}
Expected<Val> atenScalarTensor(Call& c) {
  auto v = c.real(0, "s");
  if (!v) return v.takeError();
  auto dtype = dtypeArg(c, 1, "dtype");
  if (!dtype) return dtype.takeError();
  return filled(c, {}, *v, dtype->value_or(ir::DType::F32));
}
Expected<Val> atenTo(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  // to(dtype, ...), to(device, dtype, ...), to(other, ...) or to(dtype=..., device=...).
  std::optional<ir::DType> t;
  const Val* a1 = c.arg(1, "");
  if (a1 && a1->k == Val::K::Tensor) t = a1->t->v->type.dtype;
  else {
    size_t i = a1 && a1->k == Val::K::Device ? 2 : 1;
    auto d = dtypeArg(c, i, "dtype");
    if (!d) return d.takeError();
    t = *d;
  }
  if (!t || *t == (*x)->type.dtype) return c.args[0];
  return wrap(castTo(c, *x, *t));
}
Expected<Val> atenTypeAs(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto o = c.tensor(1, "other");
  if (!o) return o.takeError();
  return wrap(castTo(c, *x, (*o)->type.dtype));
}
Expected<Val> atenAlias(Call& c) {
  if (c.args.empty() || c.args[0].k != Val::K::Tensor) return c.fail("takes a tensor");
  return c.args[0];
}
Expected<Val> atenClone(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return tensorVal(*x); // a new box: writes into the clone leave the original alone
}

Expected<Val> atenArange(Call& c) {
  // arange(end, ...), arange(start, end, ...), arange(start, end, step, ...): the numbers come first.
  std::vector<const Val*> nums;
  for (size_t i = 0; i < c.args.size() && nums.size() < 3; ++i) {
    const Val& a = c.args[i];
    bool number = a.isNumber() || (a.k == Val::K::Tensor && Ctx::known(a.t->v) && a.t->v->type.rank() == 0);
    if (!number) break;
    nums.push_back(&a);
  }
  if (nums.empty()) return c.fail("takes its end (and start and step) as numbers known when the model is read");
  size_t dtypeAt = nums.size() == 3 ? 3 : nums.size() == 2 ? 2 : 1;
  bool real = false;
  std::vector<double> v;
  for (size_t i = 0; i < nums.size(); ++i) {
    auto r = c.real(i, "");
    if (!r) return r.takeError();
    v.push_back(*r);
    const Val* n = nums[i];
    real = real || n->k == Val::K::Float || (n->k == Val::K::Tensor && ir::isFloat(n->t->v->type.dtype));
  }
  double start = v.size() > 1 ? v[0] : 0, end = v.size() > 1 ? v[1] : v[0], step = v.size() > 2 ? v[2] : 1;
  if (step == 0) return c.fail("step is 0");
  auto dtype = dtypeArg(c, dtypeAt, "dtype");
  if (!dtype) return dtype.takeError();
  ir::DType t = dtype->value_or(real ? ir::DType::F32 : ir::DType::I64);
  double count = std::ceil((end - start) / step);
  if (count > double(1 << 26)) return c.fail("more than 2^26 elements");
  int64_t n = std::max<int64_t>(0, (int64_t)count);
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + i * step;
  ir::Tensor data = ir::isFloat(t) ? ir::Tensor::fromF64(t, {n}, values) : ir::Tensor::fromI64(t, {n}, std::vector<int64_t>(values.begin(), values.end()));
  return tensorVal(c.c.constant(std::move(data), "arange"));
}
Expected<Val> atenZeros(Call& c) {
  auto s = c.ints(0, "size");
  if (!s) return s.takeError();
  return fullOf(c, *s, size_t(-1), 0, 1, ir::DType::F32, false);
}
Expected<Val> atenOnes(Call& c) {
  auto s = c.ints(0, "size");
  if (!s) return s.takeError();
  return fullOf(c, *s, size_t(-1), 1, 1, ir::DType::F32, false);
}
Expected<Val> atenFull(Call& c) {
  auto s = c.ints(0, "size");
  if (!s) return s.takeError();
  return fullOf(c, *s, 1, 0, 2, ir::DType::F32, true);
}
Expected<Val> atenNewZeros(Call& c) {
  auto x = c.tensor(0, "self");
  auto s = x ? c.ints(1, "size") : Expected<std::vector<int64_t>>(x.takeError());
  if (!s) return s.takeError();
  return fullOf(c, *s, size_t(-1), 0, 2, (*x)->type.dtype, false);
}
Expected<Val> atenNewOnes(Call& c) {
  auto x = c.tensor(0, "self");
  auto s = x ? c.ints(1, "size") : Expected<std::vector<int64_t>>(x.takeError());
  if (!s) return s.takeError();
  return fullOf(c, *s, size_t(-1), 1, 2, (*x)->type.dtype, false);
}
Expected<Val> atenNewFull(Call& c) {
  auto x = c.tensor(0, "self");
  auto s = x ? c.ints(1, "size") : Expected<std::vector<int64_t>>(x.takeError());
  if (!s) return s.takeError();
  return fullOf(c, *s, 2, 0, 3, (*x)->type.dtype, false);
}
Expected<Val> atenZerosLike(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return fullOf(c, shapeOf(*x), size_t(-1), 0, 1, (*x)->type.dtype, false);
}
Expected<Val> atenOnesLike(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return fullOf(c, shapeOf(*x), size_t(-1), 1, 1, (*x)->type.dtype, false);
}
Expected<Val> atenFullLike(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return fullOf(c, shapeOf(*x), 1, 0, 2, (*x)->type.dtype, false);
}

} // namespace sgc::ts_import
