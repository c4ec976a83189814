// Shape rules of data-movement and shape-computing ops.
#include "ir/shapes/Shapes.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace sgc::ir {

static constexpr int64_t kMaxElements = int64_t(1) << 40; ///< larger results are refused

static Error checkSize(const InferCtx& c, const std::vector<Dim>& dims) {
  std::vector<int64_t> s;
  for (const Dim& d : dims)
    if (d.isStatic()) s.push_back(d.value);
  if (!checkedNumel(s, kMaxElements)) return c.fail("result is too large (over 2^40 elements)");
  return Error::success();
}

Error inferReshape(InferCtx& c) {
  const Type& x = c.in[0];
  auto shape = c.ints(1);
  c.out[0] = Type::unranked(x.dtype);
  if (shape && (int64_t)shape->size() > kMaxRank) return c.fail("shape has more than " + std::to_string(kMaxRank) + " dims");
  if (!shape) {
    if (c.in[1].ranked && c.in[1].rank() == 1 && c.in[1].dims[0].isStatic() && c.in[1].dims[0].value <= kMaxRank)
      c.out[0] = Type::ranked_(x.dtype, std::vector<Dim>(c.in[1].dims[0].value, Dim::unknown()));
    return Error::success();
  }
  bool allowZero = c.node.getInt("allowzero", 0);
  std::vector<Dim> dims;
  int64_t inferred = -1;
  for (size_t i = 0; i < shape->size(); ++i) {
    int64_t s = (*shape)[i];
    if (s == -1) {
      if (inferred >= 0) return c.fail("shape has more than one -1");
      inferred = (int64_t)i;
      dims.push_back(Dim::unknown());
    } else if (s == 0 && !allowZero) {
      if (!x.ranked || (int64_t)i >= x.rank()) return c.fail("shape copies dim " + std::to_string(i) + " that the input lacks");
      dims.push_back(x.dims[i]);
    } else if (s < 0) {
      return c.fail("shape has negative dim " + std::to_string(s));
    } else {
      dims.push_back(Dim::of(s));
    }
  }
  auto total = x.staticNumel();
  if (x.isStatic() && !total) return c.fail("input is too large");
  if (total) {
    Dim known = dimProduct(dims, 0, (int64_t)dims.size());
    if (inferred >= 0) {
      dims[inferred] = Dim::of(1);
      Dim rest = dimProduct(dims, 0, (int64_t)dims.size());
      if (rest.isStatic()) {
        if (rest.value == 0 || *total % rest.value) return c.fail("cannot reshape " + toString(x) + " with a -1 dim");
        dims[inferred] = Dim::of(*total / rest.value);
      } else {
        dims[inferred] = Dim::unknown();
      }
    } else if (known.isStatic() && known.value != *total) {
      return c.fail("cannot reshape " + toString(x) + " to " + toString(Type::ranked_(x.dtype, dims)));
    }
  }
  if (Error e = checkSize(c, dims)) return e;
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferFlatten(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  if (!x.ranked) return Error::success();
  int64_t axis = c.node.getInt("axis", 1);
  if (axis < -x.rank() || axis > x.rank()) return c.fail("axis " + std::to_string(axis) + " is out of range");
  if (axis < 0) axis += x.rank();
  c.out[0] = Type::ranked_(x.dtype, {dimProduct(x.dims, 0, axis), dimProduct(x.dims, axis, x.rank())});
  return Error::success();
}

Error inferSqueeze(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  if (!x.ranked) return Error::success();
  std::set<int64_t> axes;
  if (c.present(1)) {
    auto v = c.ints(1);
    if (!v) return Error::success();
    for (int64_t a : *v) {
      auto n = normalizeAxis(c, a, x.rank());
      if (!n) return n.takeError();
      if (x.dims[*n].isStatic() && x.dims[*n].value != 1) return c.fail("cannot squeeze dim " + std::to_string(a) + " of " + toString(x));
      axes.insert(*n);
    }
  } else {
    for (int64_t i = 0; i < x.rank(); ++i) {
      if (!x.dims[i].isStatic()) return Error::success();
      if (x.dims[i].value == 1) axes.insert(i);
    }
  }
  std::vector<Dim> dims;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (!axes.count(i)) dims.push_back(x.dims[i]);
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferUnsqueeze(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  auto v = c.ints(1);
  if (!x.ranked || !v) return Error::success();
  int64_t r = x.rank() + (int64_t)v->size();
  if (r > kMaxRank) return c.fail("result rank exceeds " + std::to_string(kMaxRank));
  std::set<int64_t> axes;
  for (int64_t a : *v) {
    auto n = normalizeAxis(c, a, r);
    if (!n) return n.takeError();
    if (!axes.insert(*n).second) return c.fail("axis " + std::to_string(a) + " appears twice");
  }
  std::vector<Dim> dims;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) dims.push_back(axes.count(i) ? Dim::of(1) : x.dims[j++]);
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferTranspose(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = x;
  if (!x.ranked) return Error::success();
  std::vector<int64_t> perm = c.node.getInts("perm");
  if (perm.empty())
    for (int64_t i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  if ((int64_t)perm.size() != x.rank()) return c.fail("perm must have one entry per dim");
  std::set<int64_t> seen;
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= x.rank() || !seen.insert(perm[i]).second) return c.fail("perm is not a permutation");
    c.out[0].dims[i] = x.dims[perm[i]];
  }
  return Error::success();
}

Error inferConcat(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  for (const Type& t : c.in) {
    if (t.dtype != x.dtype) return c.fail("inputs have different dtypes");
    if (!t.ranked) return Error::success();
  }
  auto axis = normalizeAxis(c, c.node.getInt("axis", 0), x.rank());
  if (!axis) return axis.takeError();
  std::vector<Dim> dims = x.dims;
  int64_t total = 0;
  for (const Type& t : c.in) {
    if (t.rank() != x.rank()) return c.fail("inputs have different ranks");
    for (int64_t i = 0; i < x.rank(); ++i)
      if (i != *axis && t.dims[i].isStatic() && dims[i].isStatic() && t.dims[i].value != dims[i].value)
        return c.fail("inputs differ in dim " + std::to_string(i));
    total = (total < 0 || !t.dims[*axis].isStatic()) ? -1 : total + t.dims[*axis].value;
  }
  dims[*axis] = total < 0 ? Dim::unknown() : Dim::of(total);
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferSplit(InferCtx& c) {
  const Type& x = c.in[0];
  c.setAll(Type::unranked(x.dtype));
  if (!x.ranked) return Error::success();
  auto axis = normalizeAxis(c, c.node.getInt("axis", 0), x.rank());
  if (!axis) return axis.takeError();
  int64_t n = (int64_t)c.out.size();
  std::vector<Dim> dims = x.dims;
  std::vector<int64_t> sizes;
  if (c.present(1)) {
    auto v = c.ints(1);
    if (!v) return Error::success();
    sizes = *v;
  }
  Dim d = x.dims[*axis];
  if (sizes.empty()) {
    if (!d.isStatic()) {
      dims[*axis] = Dim::unknown();
      c.setAll(Type::ranked_(x.dtype, dims));
      return Error::success();
    }
    int64_t chunk = (d.value + n - 1) / n; // the last chunk may be smaller (opset 18)
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, d.value - i * chunk)));
  }
  if ((int64_t)sizes.size() != n) return c.fail("split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(n) + " outputs");
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s < 0) return c.fail("split sizes must be non-negative");
    sum += s;
  }
  if (d.isStatic() && sum != d.value) return c.fail("split sizes do not add up to dim " + std::to_string(d.value));
  for (int64_t i = 0; i < n; ++i) {
    dims[*axis] = Dim::of(sizes[i]);
    c.out[i] = Type::ranked_(x.dtype, dims);
  }
  return Error::success();
}

Expected<std::vector<SliceDim>> sliceGeometry(const InferCtx& c, const std::vector<int64_t>& shape) {
  auto starts = c.ints(1), ends = c.ints(2);
  if (!starts || !ends) return c.fail("starts and ends must be known");
  int64_t r = (int64_t)shape.size();
  std::vector<int64_t> axes, steps;
  if (c.present(3)) {
    auto a = c.ints(3);
    if (!a) return c.fail("axes must be known");
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i) axes.push_back((int64_t)i);
  }
  if (c.present(4)) {
    auto s = c.ints(4);
    if (!s) return c.fail("steps must be known");
    steps = *s;
  } else {
    steps.assign(starts->size(), 1);
  }
  if (ends->size() != starts->size() || axes.size() != starts->size() || steps.size() != starts->size())
    return c.fail("starts, ends, axes and steps must have the same length");
  std::vector<SliceDim> out(r);
  for (int64_t i = 0; i < r; ++i) out[i] = {0, 1, shape[i]};
  std::set<int64_t> seen;
  for (size_t i = 0; i < starts->size(); ++i) {
    auto ax = normalizeAxis(c, axes[i], r);
    if (!ax) return ax.takeError();
    if (!seen.insert(*ax).second) return c.fail("axis " + std::to_string(axes[i]) + " appears twice");
    int64_t d = shape[*ax], step = steps[i], s = (*starts)[i], e = (*ends)[i];
    if (step == 0) return c.fail("steps must be non-zero");
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
    }
    // Counts in unsigned arithmetic: |e - s| fits, |step| may be INT64_MIN.
    uint64_t span = step > 0 ? (e > s ? (uint64_t)(e - s) : 0) : (s > e ? (uint64_t)(s - e) : 0);
    uint64_t st = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
    int64_t n = (int64_t)((span + st - 1) / st);
    out[*ax] = {s, step, n};
  }
  return out;
}

Error inferSlice(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  if (!x.ranked) return Error::success();
  if (!x.isStatic() || !c.ints(1) || !c.ints(2) || (c.present(3) && !c.ints(3)) || (c.present(4) && !c.ints(4))) {
    // Only the sliced axes change; without their values every dim may.
    c.out[0] = Type::ranked_(x.dtype, std::vector<Dim>(x.rank(), Dim::unknown()));
    return Error::success();
  }
  auto g = sliceGeometry(c, x.shape());
  if (!g) return g.takeError();
  std::vector<Dim> dims;
  for (const SliceDim& s : *g) dims.push_back(Dim::of(s.count));
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferGather(InferCtx& c) {
  const Type &x = c.in[0], &idx = c.in[1];
  c.out[0] = Type::unranked(x.dtype);
  if (!isInteger(idx.dtype)) return c.fail("indices must be integers");
  if (!x.ranked || !idx.ranked) return Error::success();
  auto axis = normalizeAxis(c, c.node.getInt("axis", 0), x.rank());
  if (!axis) return axis.takeError();
  std::vector<Dim> dims(x.dims.begin(), x.dims.begin() + *axis);
  dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
  dims.insert(dims.end(), x.dims.begin() + *axis + 1, x.dims.end());
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferGatherElements(InferCtx& c) {
  const Type &x = c.in[0], &idx = c.in[1];
  if (!isInteger(idx.dtype)) return c.fail("indices must be integers");
  if (x.ranked && idx.ranked && x.rank() != idx.rank()) return c.fail("indices must have the data's rank");
  if (x.ranked) {
    auto axis = normalizeAxis(c, c.node.getInt("axis", 0), x.rank());
    if (!axis) return axis.takeError();
  }
  c.out[0] = Type{x.dtype, idx.ranked, idx.dims};
  return Error::success();
}

Error inferExpand(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  auto shape = c.ints(1);
  if (!shape || !x.ranked) return Error::success();
  if ((int64_t)shape->size() > kMaxRank) return c.fail("shape has more than " + std::to_string(kMaxRank) + " dims");
  for (int64_t s : *shape)
    if (s < 0) return c.fail("shape has negative dim " + std::to_string(s));
  auto dims = broadcastDims(c, x.dims, staticDims(*shape));
  if (!dims) return dims.takeError();
  if (Error e = checkSize(c, *dims)) return e;
  c.out[0] = Type::ranked_(x.dtype, *dims);
  return Error::success();
}

Error inferTile(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type{x.dtype, x.ranked, std::vector<Dim>(x.dims.size(), Dim::unknown())};
  auto reps = c.ints(1);
  if (!reps || !x.ranked) return Error::success();
  if ((int64_t)reps->size() != x.rank()) return c.fail("repeats must have one entry per dim");
  for (int64_t i = 0; i < x.rank(); ++i) {
    if ((*reps)[i] < 0) return c.fail("repeats must be non-negative");
    if (x.dims[i].isStatic()) {
      if (x.dims[i].value && (*reps)[i] > kMaxElements / x.dims[i].value) return c.fail("result is too large");
      c.out[0].dims[i] = Dim::of(x.dims[i].value * (*reps)[i]);
    }
  }
  return checkSize(c, c.out[0].dims);
}

/// [start, end) of the Shape op over rank r.
static std::pair<int64_t, int64_t> shapeRange(const Node& n, int64_t r) {
  auto clampDim = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  int64_t s = clampDim(n.getInt("start", 0)), e = clampDim(n.getInt("end", r));
  return {s, std::max(s, e)};
}

Error inferShape(InferCtx& c) {
  const Type& x = c.in[0];
  if (!x.ranked) {
    c.out[0] = Type::ranked_(DType::I64, {Dim::unknown()});
    return Error::success();
  }
  auto [s, e] = shapeRange(c.node, x.rank());
  c.out[0] = Type::of(DType::I64, {e - s});
  return Error::success();
}

Error inferSize(InferCtx& c) {
  c.out[0] = Type::of(DType::I64, {});
  return Error::success();
}

Error inferConstantOfShape(InferCtx& c) {
  const Tensor* v = c.node.getTensor("value");
  if (v && v->numel() != 1) return c.fail("value must hold one element");
  DType t = v ? v->dtype : DType::F32;
  auto shape = c.ints(0);
  if (!shape) {
    bool known = c.in[0].ranked && c.in[0].rank() == 1 && c.in[0].dims[0].isStatic() && c.in[0].dims[0].value <= kMaxRank;
    c.out[0] = known ? Type::ranked_(t, std::vector<Dim>(c.in[0].dims[0].value, Dim::unknown())) : Type::unranked(t);
    return Error::success();
  }
  if ((int64_t)shape->size() > kMaxRank) return c.fail("shape has more than " + std::to_string(kMaxRank) + " dims");
  for (int64_t s : *shape)
    if (s < 0) return c.fail("shape has negative dim " + std::to_string(s));
  if (!checkedNumel(*shape, kMaxElements)) return c.fail("result is too large (over 2^40 elements)");
  c.out[0] = Type::of(t, *shape);
  return Error::success();
}

Error inferRange(InferCtx& c) {
  DType t = c.in[0].dtype;
  if (c.in[1].dtype != t || c.in[2].dtype != t) return c.fail("start, limit and delta must have one dtype");
  c.out[0] = Type::ranked_(t, {Dim::unknown()});
  if (!c.values[0] || !c.values[1] || !c.values[2]) return Error::success();
  for (int i = 0; i < 3; ++i)
    if (c.values[i]->numel() != 1) return c.fail("start, limit and delta must be scalars");
  double start = c.values[0]->getF(0), limit = c.values[1]->getF(0), delta = c.values[2]->getF(0);
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return c.fail("delta must be non-zero and all values finite");
  double n = std::ceil((limit - start) / delta);
  if (n > (double)kMaxElements) return c.fail("result is too large");
  c.out[0] = Type::of(t, {std::max<int64_t>(0, (int64_t)n)});
  return Error::success();
}

} // namespace sgc::ir

namespace sgc::ir {

Expected<PadGeometry> padGeometry(const InferCtx& c, int64_t rank) {
  auto pads = c.ints(1);
  if (!pads) return c.fail("pads must be known");
  std::vector<int64_t> axes;
  if (c.present(3)) {
    auto a = c.ints(3);
    if (!a) return c.fail("axes must be known");
    for (int64_t x : *a) {
      auto n = normalizeAxis(c, x, rank);
      if (!n) return n.takeError();
      axes.push_back(*n);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  if (pads->size() != 2 * axes.size()) return c.fail("pads must have two entries per padded axis");
  PadGeometry g{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 0)};
  for (size_t i = 0; i < axes.size(); ++i) {
    g.begin[axes[i]] = (*pads)[i];
    g.end[axes[i]] = (*pads)[i + axes.size()];
  }
  std::string mode = c.node.getString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") return c.fail("unknown mode '" + mode + "'");
  return g;
}

Error inferPad(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type{x.dtype, x.ranked, std::vector<Dim>(x.dims.size(), Dim::unknown())};
  if (c.present(2) && c.in[2].ranked && c.in[2].staticNumel() != 1) return c.fail("constant_value must be a scalar");
  if (!x.ranked || !c.ints(1) || (c.present(3) && !c.ints(3))) return Error::success();
  auto g = padGeometry(c, x.rank());
  if (!g) return g.takeError();
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (!x.dims[i].isStatic()) continue;
    int64_t d = x.dims[i].value + g->begin[i] + g->end[i];
    if (d < 0) return c.fail("padding makes dim " + std::to_string(i) + " negative");
    c.out[0].dims[i] = Dim::of(d);
  }
  return checkSize(c, c.out[0].dims);
}

} // namespace sgc::ir

namespace sgc::ir {

/// GatherND: indices [..., k] pick slices data[b..., i0..ik-1, :] -> indices.shape[:-1] + data.shape[b+k:].
Error inferGatherND(InferCtx& c) {
  const Type &x = c.in[0], &idx = c.in[1];
  c.out[0] = Type::unranked(x.dtype);
  if (!isInteger(idx.dtype)) return c.fail("indices must be integers");
  if (!x.ranked || !idx.ranked) return Error::success();
  int64_t b = c.node.getInt("batch_dims", 0), q = idx.rank(), r = x.rank();
  if (q < 1 || r < 1) return c.fail("data and indices need a rank of at least 1");
  if (b < 0 || b >= q || b >= r) return c.fail("batch_dims must be below both ranks");
  const Dim& last = idx.dims.back();
  if (!last.isStatic()) return Error::success();
  int64_t k = last.value;
  if (k < 1 || b + k > r) return c.fail("the indices' last dim (" + std::to_string(k) + ") must be 1 to the data's rank less batch_dims");
  std::vector<Dim> dims(idx.dims.begin(), idx.dims.end() - 1);
  dims.insert(dims.end(), x.dims.begin() + b + k, x.dims.end());
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

/// ScatterND and ScatterElements: the data's type; updates of the data's dtype, integer indices.
Error inferScatter(InferCtx& c) {
  const Type &x = c.in[0], &idx = c.in[1], &upd = c.in[2];
  if (!isInteger(idx.dtype)) return c.fail("indices must be integers");
  if (upd.dtype != x.dtype) return c.fail("updates must have the data's dtype");
  std::string red = c.node.getString("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    return c.fail("reduction must be none, add, mul, max or min, not '" + red + "'");
  if (c.node.op == Op::ScatterElements && x.ranked && idx.ranked && (idx.rank() != x.rank() || (upd.ranked && upd.dims != idx.dims)))
    return c.fail("indices and updates must have one shape, of the data's rank");
  c.out[0] = x;
  return Error::success();
}

} // namespace sgc::ir
