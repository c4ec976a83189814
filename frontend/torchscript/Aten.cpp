// The aten op table (Aten.def) and what its handlers share: argument access,
// torch's type promotion, and in-place assignment through views.
#include "frontend/torchscript/Aten.h"

#include <cstring>

namespace sgc::ts_import {

namespace {
struct Row {
  const char* name;
  AtenFn fn;
};
const Row kRows[] = {
#define ATEN(name, fn) {#name, fn},
#include "frontend/torchscript/Aten.def"
};
} // namespace

AtenFn atenHandler(const std::string& name) {
  for (const Row& r : kRows)
    if (name == r.name) return r.fn;
  return nullptr;
}

const Val* Call::arg(size_t i, const std::string& name) const {
  if (i < args.size()) return &args[i];
  auto it = kwargs.find(name);
  return it == kwargs.end() ? nullptr : &it->second;
}

Error Call::fail(const std::string& msg) const { return makeError(where + ": aten::" + op + ": " + msg); }

Expected<ir::Value*> Call::tensor(size_t i, const std::string& name) const {
  const Val* v = arg(i, name);
  if (!v || v->k != Val::K::Tensor) return fail("argument '" + name + "' is " + (v ? describe(*v) : "missing") + ", expected a tensor");
  return v->t->v;
}

Expected<ir::Value*> Call::tensorOr(size_t i, const std::string& name) const {
  const Val* v = arg(i, name);
  if (!v || v->k == Val::K::None) return nullptr;
  return tensor(i, name);
}

Expected<int64_t> Call::integer(size_t i, const std::string& name) const {
  const Val* v = arg(i, name);
  if (v && v->k == Val::K::Tensor) {
    const ir::Tensor* t = Ctx::known(v->t->v);
    if (t && t->numel() == 1 && !ir::isFloat(t->dtype)) return t->getI(0);
  }
  if (!v || (v->k != Val::K::Int && v->k != Val::K::Bool)) return fail("argument '" + name + "' is " + (v ? describe(*v) : "missing") + ", expected an int");
  return v->i;
}

int64_t Call::integerOr(size_t i, const std::string& name, int64_t def) const {
  const Val* v = arg(i, name);
  if (!v || v->k == Val::K::None) return def;
  auto r = integer(i, name);
  if (!r) {
    consumeError(r.takeError());
    return def;
  }
  return *r;
}

Expected<double> Call::real(size_t i, const std::string& name) const {
  const Val* v = arg(i, name);
  if (v && v->k == Val::K::Tensor) {
    const ir::Tensor* t = Ctx::known(v->t->v);
    if (t && t->numel() == 1) return t->getF(0);
  }
  if (!v || !v->isNumber()) return fail("argument '" + name + "' is " + (v ? describe(*v) : "missing") + ", expected a number");
  return v->k == Val::K::Float ? v->f : (double)v->i;
}

double Call::realOr(size_t i, const std::string& name, double def) const {
  const Val* v = arg(i, name);
  if (!v || v->k == Val::K::None) return def;
  auto r = real(i, name);
  if (!r) {
    consumeError(r.takeError());
    return def;
  }
  return *r;
}

bool Call::flag(size_t i, const std::string& name, bool def) const {
  const Val* v = arg(i, name);
  return v && v->isNumber() ? (v->k == Val::K::Float ? v->f != 0 : v->i != 0) : def;
}

Expected<std::vector<int64_t>> Call::ints(size_t i, const std::string& name) const {
  const Val* v = arg(i, name);
  if (v && (v->k == Val::K::Int || v->k == Val::K::Bool)) return std::vector<int64_t>{v->i};
  if (!v || (v->k != Val::K::List && v->k != Val::K::Tuple)) return fail("argument '" + name + "' is " + (v ? describe(*v) : "missing") + ", expected a list of ints");
  std::vector<int64_t> r;
  for (const Val& x : v->items) {
    if (x.k == Val::K::Tensor) {
      const ir::Tensor* t = Ctx::known(x.t->v);
      if (t && t->numel() == 1 && !ir::isFloat(t->dtype)) {
        r.push_back(t->getI(0));
        continue;
      }
    }
    if (x.k != Val::K::Int) return fail("argument '" + name + "' holds " + describe(x) + ", expected ints");
    r.push_back(x.i);
  }
  return r;
}

std::string Call::strOr(size_t i, const std::string& name, const std::string& def) const {
  const Val* v = arg(i, name);
  return v && v->k == Val::K::Str ? v->s : def;
}

Val tensorVal(ir::Value* v) { return Val::tensor(v); }

std::vector<int64_t> shapeOf(const ir::Value* v) { return v->type.isStatic() ? v->type.shape() : std::vector<int64_t>{}; }
int64_t rankOf(const ir::Value* v) { return v->type.rank(); }

Expected<int64_t> axisOf(const Call& c, int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) return c.fail("dim " + std::to_string(dim) + " is out of range for rank " + std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

namespace {

int category(ir::DType t) { return t == ir::DType::Bool ? 0 : ir::isFloat(t) ? 2 : 1; }

std::optional<ir::DType> widen(std::optional<ir::DType> a, ir::DType b) {
  if (!a) return b;
  if (category(*a) != category(b)) return category(*a) > category(b) ? *a : b;
  if (*a == b) return b;
  if ((*a == ir::DType::F16 && b == ir::DType::BF16) || (*a == ir::DType::BF16 && b == ir::DType::F16)) return ir::DType::F32;
  return ir::dtypeSize(*a) >= ir::dtypeSize(b) ? *a : b;
}

} // namespace

ir::DType promote(const std::vector<const Val*>& operands) {
  std::optional<ir::DType> dims, zero, scalar;
  for (const Val* v : operands) {
    if (!v) continue;
    if (v->k == Val::K::Tensor) {
      ir::Value* t = v->t->v;
      (t->type.rank() > 0 ? dims : zero) = widen(t->type.rank() > 0 ? dims : zero, t->type.dtype);
    } else if (v->k == Val::K::Float) {
      scalar = widen(scalar, ir::DType::F32);
    } else if (v->k == Val::K::Int) {
      scalar = widen(scalar, ir::DType::I64);
    } else if (v->k == Val::K::Bool) {
      scalar = widen(scalar, ir::DType::Bool);
    }
  }
  std::optional<ir::DType> r = dims;
  if (zero && (!r || category(*zero) > category(*r))) r = zero;
  if (scalar && (!r || category(*scalar) > category(*r))) r = category(*scalar) == 2 ? ir::DType::F32 : *scalar;
  return r.value_or(ir::DType::F32);
}

Expected<ir::Value*> castTo(Call& c, ir::Value* v, ir::DType t) {
  if (v->type.dtype == t) return v;
  return c.c.op(ir::Op::Cast, {v}, {{"to", std::string(ir::dtypeName(t))}});
}

Expected<ir::Value*> asTensor(Call& c, const Val& v, ir::DType t) {
  if (v.k == Val::K::Tensor) return castTo(c, v.t->v, t);
  if (v.k == Val::K::Float) return c.c.scalar(v.f, t);
  if (v.k == Val::K::Int || v.k == Val::K::Bool) return ir::isFloat(t) ? c.c.scalar((double)v.i, t) : c.c.constant(ir::Tensor::fromI64(t, {}, {v.i}), "scalar");
  return c.fail("an operand is " + describe(v) + ", expected a tensor or a number");
}

Expected<std::optional<ir::DType>> dtypeArg(const Call& c, size_t i, const std::string& name) {
  const Val* v = c.arg(i, name);
  if (!v || v->k == Val::K::None) return std::optional<ir::DType>{};
  if (v->k != Val::K::Int) return c.fail("argument '" + name + "' is " + describe(*v) + ", expected a dtype");
  auto d = dtypeOfScalarType(v->i);
  if (!d) return c.fail("dtype code " + std::to_string(v->i) + " is not one sgc supports");
  return d;
}

Error assignInPlace(Ctx& c, const Box& box, ir::Value* v) {
  if (v->type.dtype != box->v->type.dtype) {
    auto cast = c.op(ir::Op::Cast, {v}, {{"to", std::string(ir::dtypeName(box->v->type.dtype))}});
    if (!cast) return cast.takeError();
    v = *cast;
  }
  if (shapeOf(v) != shapeOf(box->v)) {
    auto e = c.op(ir::Op::Expand, {v, c.ints(shapeOf(box->v))});
    if (!e) return e.takeError();
    v = *e;
  }
  box->v = v;
  if (!box->base) return Error::success();
  // The base with the view's elements replaced: [before, v, after] along the view's axis.
  ir::Value* base = box->base->v;
  std::vector<int64_t> bs = shapeOf(base);
  int64_t start = box->start, end = box->view == TensorBox::View::Select ? box->start + 1 : box->end;
  if (box->step != 1) return makeError(c.where + ": an in-place write into a strided slice is not supported");
  ir::Value* mid = v;
  if (box->view == TensorBox::View::Select) {
    auto u = c.op(ir::Op::Unsqueeze, {v, c.ints({box->axis})});
    if (!u) return u.takeError();
    mid = *u;
  }
  std::vector<ir::Value*> parts;
  auto part = [&](int64_t s, int64_t e) -> Error {
    if (s >= e) return Error::success();
    auto p = c.op(ir::Op::Slice, {base, c.ints({s}), c.ints({e}), c.ints({box->axis}), c.ints({1})});
    if (!p) return p.takeError();
    parts.push_back(*p);
    return Error::success();
  };
  if (Error e = part(0, start)) return e;
  parts.push_back(mid);
  if (Error e = part(end, bs[box->axis])) return e;
  ir::Value* whole = mid;
  if (parts.size() > 1) {
    auto cat = c.op(ir::Op::Concat, parts, {{"axis", box->axis}});
    if (!cat) return cat.takeError();
    whole = *cat;
  }
  return assignInPlace(c, box->base, whole);
}

} // namespace sgc::ts_import
