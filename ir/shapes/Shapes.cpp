// Dispatch to the shape rules listed in Ops.def, and the helpers they share.
#include "ir/shapes/Shapes.h"

namespace sgc::ir {

#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) Error infer##Rule(InferCtx&);
#include "ir/Ops.def"

Error inferNode(InferCtx& c) {
  c.out.assign(c.node.outputs.size(), Type{});
  Error e = Error::success();
  switch (c.node.op) {
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) \
  case Op::N: e = infer##Rule(c); break;
#include "ir/Ops.def"
  }
  if (e) return e;
  for (const Type& t : c.out)
    if (t.rank() > kMaxRank) return c.fail("result rank " + std::to_string(t.rank()) + " exceeds " + std::to_string(kMaxRank));
  return Error::success();
}

std::optional<std::vector<int64_t>> InferCtx::ints(size_t i) const {
  if (i >= values.size() || !values[i] || !(isInteger(values[i]->dtype))) return std::nullopt;
  return values[i]->toI64();
}

Expected<int64_t> normalizeAxis(const InferCtx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Expected<std::vector<Dim>> broadcastDims(const InferCtx& c, const std::vector<Dim>& a, const std::vector<Dim>& b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    Dim da = i < r - a.size() ? Dim::of(1) : a[i - (r - a.size())];
    Dim db = i < r - b.size() ? Dim::of(1) : b[i - (r - b.size())];
    if (da == Dim::of(1)) out[i] = db;
    else if (db == Dim::of(1)) out[i] = da;
    else if (da.isStatic() && db.isStatic() && da.value != db.value)
      return c.fail("cannot broadcast dims " + toString(da) + " and " + toString(db));
    else if (da.isStatic()) out[i] = da;
    else if (db.isStatic()) out[i] = db;
    else out[i] = da == db ? da : Dim::unknown();
  }
  return out;
}

std::vector<Dim> staticDims(const std::vector<int64_t>& shape) { return Type::of(DType::F32, shape).dims; }

Dim dimProduct(const std::vector<Dim>& dims, int64_t from, int64_t to) {
  int64_t p = 1;
  for (int64_t i = from; i < to; ++i) {
    if (!dims[i].isStatic()) return Dim::unknown();
    if (dims[i].value != 0 && p > INT64_MAX / dims[i].value) return Dim::unknown();
    p *= dims[i].value;
  }
  return Dim::of(p);
}

} // namespace sgc::ir
