// Aten ops of views and data movement (see Aten.def). Slices and selects are
// views: an in-place write into one writes through to its base
// (assignInPlace).
#include "frontend/torchscript/Aten.h"

#include <numeric>

namespace sgc::ts_import {
namespace {

using ir::Op;

Expected<Val> reshape(Call& c, ir::Value* x, const std::vector<int64_t>& shape) {
  return wrap(c.c.op(Op::Reshape, {x, c.c.ints(shape)}));
}

Expected<Val> slice(Call& c, const Val& self, int64_t dim, int64_t start, int64_t end, int64_t step) {
  ir::Value* x = self.t->v;
  auto ax = axisOf(c, dim, rankOf(x));
  if (!ax) return ax.takeError();
  if (step <= 0) return c.fail("a slice's step must be positive");
  int64_t n = shapeOf(x)[*ax];
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); };
  start = clamp(start), end = std::max(clamp(end), start);
  auto r = start == 0 && end == n && step == 1 ? Expected<ir::Value*>(x)
                                                : c.c.op(Op::Slice, {x, c.c.ints({start}), c.c.ints({end}), c.c.ints({*ax}), c.c.ints({step})});
  if (!r) return r.takeError();
  Val v = tensorVal(*r);
  v.t->base = self.t, v.t->view = TensorBox::View::Slice, v.t->axis = *ax, v.t->start = start, v.t->end = end, v.t->step = step;
  return v;
}

Expected<std::vector<Val>> splitInto(Call& c, ir::Value* x, const std::vector<int64_t>& sizes, int64_t axis) {
  if (sizes.size() == 1) return std::vector<Val>{tensorVal(x)};
  auto parts = c.c.ops(Op::Split, {x, c.c.ints(sizes)}, (int)sizes.size(), {{"axis", axis}});
  if (!parts) return parts.takeError();
  std::vector<Val> out;
  for (ir::Value* p : *parts) out.push_back(tensorVal(p));
  return out;
}

/// (self, dim, index) -> Gather (index_select) or GatherElements (gather) along dim.
Expected<Val> gatherAlong(Call& c, Op op) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto idx = c.tensor(2, "index");
  if (!idx) return idx.takeError();
  auto ax = axisOf(c, *dim, rankOf(*x));
  if (!ax) return ax.takeError();
  return wrap(c.c.op(op, {*x, *idx}, {{"axis", *ax}}));
}

/// triu / tril: the elements on and above (below) the diagonal-th diagonal.
Expected<Val> trilu(Call& c, bool upper) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  ir::Value* k = c.c.constant(ir::Tensor::scalarI64(c.integerOr(1, "diagonal", 0)), "diagonal");
  return wrap(c.c.op(Op::Trilu, {*x, k}, {{"upper", int64_t(upper)}}));
}

} // namespace

Expected<Val> atenView(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto s = c.ints(1, "size");
  if (!s) return s.takeError();
  return reshape(c, *x, *s);
}
Expected<Val> atenViewAs(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto o = c.tensor(1, "other");
  if (!o) return o.takeError();
  return reshape(c, *x, shapeOf(*o));
}
Expected<Val> atenFlatten(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  std::vector<int64_t> s = shapeOf(*x);
  if (s.empty()) return reshape(c, *x, {1});
  auto a = axisOf(c, c.integerOr(1, "start_dim", 0), (int64_t)s.size());
  if (!a) return a.takeError();
  auto b = axisOf(c, c.integerOr(2, "end_dim", -1), (int64_t)s.size());
  if (!b) return b.takeError();
  std::vector<int64_t> out(s.begin(), s.begin() + *a);
  int64_t n = 1;
  for (int64_t i = *a; i <= *b; ++i) n *= s[i];
  out.push_back(n);
  out.insert(out.end(), s.begin() + *b + 1, s.end());
  return reshape(c, *x, out);
}
Expected<Val> atenPermute(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dims = c.ints(1, "dims");
  if (!dims) return dims.takeError();
  std::vector<int64_t> perm;
  for (int64_t d : *dims) {
    auto a = axisOf(c, d, rankOf(*x));
    if (!a) return a.takeError();
    perm.push_back(*a);
  }
  return wrap(c.c.op(Op::Transpose, {*x}, {{"perm", perm}}));
}
Expected<Val> atenTranspose(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  int64_t r = rankOf(*x);
  auto d0 = c.integer(1, "dim0");
  if (!d0) return d0.takeError();
  auto d1 = c.integer(2, "dim1");
  if (!d1) return d1.takeError();
  auto a = axisOf(c, *d0, r), b = axisOf(c, *d1, r);
  if (!a) return a.takeError();
  if (!b) return b.takeError();
  if (r < 2) return tensorVal(*x);
  std::vector<int64_t> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[*a], perm[*b]);
  return wrap(c.c.op(Op::Transpose, {*x}, {{"perm", perm}}));
}
Expected<Val> atenT(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  if (rankOf(*x) < 2) return tensorVal(*x);
  return wrap(c.c.op(Op::Transpose, {*x}, {{"perm", std::vector<int64_t>{1, 0}}}));
}
Expected<Val> atenUnsqueeze(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto a = axisOf(c, *dim, rankOf(*x) + 1);
  if (!a) return a.takeError();
  return wrap(c.c.op(Op::Unsqueeze, {*x, c.c.ints({*a})}));
}
Expected<Val> atenSqueeze(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  std::vector<int64_t> s = shapeOf(*x), axes;
  if (c.arg(1, "dim")) {
    auto dims = c.ints(1, "dim");
    if (!dims) return dims.takeError();
    for (int64_t d : *dims) {
      auto a = axisOf(c, d, (int64_t)s.size());
      if (!a) return a.takeError();
      if (s[*a] == 1) axes.push_back(*a);
    }
  } else {
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == 1) axes.push_back((int64_t)i);
  }
  if (axes.empty()) return tensorVal(*x);
  return wrap(c.c.op(Op::Squeeze, {*x, c.c.ints(axes)}));
}
Expected<Val> atenExpand(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto size = c.ints(1, "size");
  if (!size) return size.takeError();
  std::vector<int64_t> s = shapeOf(*x), out = *size;
  if (out.size() < s.size()) return c.fail("expands rank " + std::to_string(s.size()) + " to rank " + std::to_string(out.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    size_t from = i + s.size() - out.size();
    if (out[i] == -1) {
      if (i < out.size() - s.size()) return c.fail("-1 for a new leading dim");
      out[i] = s[from];
    }
  }
  if (out == s) return tensorVal(*x);
  return wrap(c.c.op(Op::Expand, {*x, c.c.ints(out)}));
}
Expected<Val> atenExpandAs(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto o = c.tensor(1, "other");
  if (!o) return o.takeError();
  return wrap(c.c.op(Op::Expand, {*x, c.c.ints(shapeOf(*o))}));
}
Expected<Val> atenRepeat(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto reps = c.ints(1, "repeats");
  if (!reps) return reps.takeError();
  std::vector<int64_t> s = shapeOf(*x);
  if (reps->size() < s.size()) return c.fail("fewer repeats than dims");
  ir::Value* v = *x;
  if (reps->size() > s.size()) {
    std::vector<int64_t> padded(reps->size() - s.size(), 1);
    padded.insert(padded.end(), s.begin(), s.end());
    auto r = c.c.op(Op::Reshape, {v, c.c.ints(padded)});
    if (!r) return r.takeError();
    v = *r;
  }
  return wrap(c.c.op(Op::Tile, {v, c.c.ints(*reps)}));
}
Expected<Val> atenSlice(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  return slice(c, c.args[0], c.integerOr(1, "dim", 0), c.integerOr(2, "start", 0), c.integerOr(3, "end", INT64_MAX), c.integerOr(4, "step", 1));
}
Expected<Val> atenNarrow(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dim = c.integer(1, "dim"), start = c.integer(2, "start"), length = c.integer(3, "length");
  if (!dim) return dim.takeError();
  if (!start) return start.takeError();
  if (!length) return length.takeError();
  return slice(c, c.args[0], *dim, *start, *start + *length, 1);
}
Expected<Val> atenSelect(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto dim = c.integer(1, "dim");
  if (!dim) return dim.takeError();
  auto index = c.integer(2, "index");
  if (!index) return index.takeError();
  auto ax = axisOf(c, *dim, rankOf(*x));
  if (!ax) return ax.takeError();
  int64_t n = shapeOf(*x)[*ax], i = *index < 0 ? *index + n : *index;
  if (i < 0 || i >= n) return c.fail("index " + std::to_string(*index) + " is out of range for size " + std::to_string(n));
  auto s = c.c.op(Op::Slice, {*x, c.c.ints({i}), c.c.ints({i + 1}), c.c.ints({*ax}), c.c.ints({1})});
  if (!s) return s.takeError();
  auto r = c.c.op(Op::Squeeze, {*s, c.c.ints({*ax})});
  if (!r) return r.takeError();
  Val v = tensorVal(*r);
  v.t->base = c.args[0].t, v.t->view = TensorBox::View::Select, v.t->axis = *ax, v.t->start = i;
  return v;
}
Expected<Val> atenCat(Call& c) {
  const Val* list = c.arg(0, "tensors");
  if (!list || (list->k != Val::K::List && list->k != Val::K::Tuple)) return c.fail("takes a list of tensors");
  std::vector<const Val*> parts;
  for (const Val& t : list->items) {
    if (t.k != Val::K::Tensor) return c.fail("the list holds " + describe(t));
    if (t.t->v->type.staticNumel() == 0 && t.t->v->type.rank() == 1) continue; // torch skips empty 1-d tensors
    parts.push_back(&t);
  }
  ir::DType type = promote(parts);
  std::vector<ir::Value*> ins;
  int64_t rank = 0;
  for (const Val* t : parts) {
    if (t->t->v->type.staticNumel() == 0) continue; // empty parts add nothing (a cache of length 0)
    auto v = castTo(c, t->t->v, type);
    if (!v) return v.takeError();
    ins.push_back(*v);
    rank = rankOf(*v);
  }
  if (ins.empty()) return parts.empty() ? c.fail("of no tensors") : Expected<Val>(*parts[0]);
  auto ax = axisOf(c, c.integerOr(1, "dim", 0), rank);
  if (!ax) return ax.takeError();
  if (ins.size() == 1) return tensorVal(ins[0]);
  return wrap(c.c.op(Op::Concat, ins, {{"axis", *ax}}));
}
Expected<Val> atenStack(Call& c) {
  const Val* list = c.arg(0, "tensors");
  if (!list || list->k != Val::K::List || list->items.empty()) return c.fail("takes a list of tensors");
  int64_t dim = c.integerOr(1, "dim", 0);
  std::vector<Val> parts;
  for (const Val& t : list->items) {
    if (t.k != Val::K::Tensor) return c.fail("the list holds " + describe(t));
    auto a = axisOf(c, dim, rankOf(t.t->v) + 1);
    if (!a) return a.takeError();
    auto u = c.c.op(Op::Unsqueeze, {t.t->v, c.c.ints({*a})});
    if (!u) return u.takeError();
    parts.push_back(tensorVal(*u));
  }
  Call cat{c.c, "cat", {Val::list(parts), Val::integer(dim)}, {}, c.where};
  return atenCat(cat);
}
Expected<Val> atenSplit(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto ax = axisOf(c, c.integerOr(2, "dim", 0), rankOf(*x));
  if (!ax) return ax.takeError();
  int64_t n = shapeOf(*x)[*ax];
  const Val* s = c.arg(1, "split_size");
  std::vector<int64_t> sizes;
  if (s && (s->k == Val::K::List || s->k == Val::K::Tuple)) {
    auto v = c.ints(1, "split_size");
    if (!v) return v.takeError();
    sizes = *v;
  } else {
    auto each = c.integer(1, "split_size");
    if (!each) return each.takeError();
    if (*each <= 0) return c.fail("split_size must be positive");
    for (int64_t at = 0; at < n; at += *each) sizes.push_back(std::min(*each, n - at));
  }
  auto parts = splitInto(c, *x, sizes, *ax);
  if (!parts) return parts.takeError();
  return Val::list(*parts);
}
Expected<Val> atenChunk(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto chunks = c.integer(1, "chunks");
  if (!chunks) return chunks.takeError();
  if (*chunks <= 0) return c.fail("chunks must be positive");
  auto ax = axisOf(c, c.integerOr(2, "dim", 0), rankOf(*x));
  if (!ax) return ax.takeError();
  int64_t n = shapeOf(*x)[*ax], each = (n + *chunks - 1) / *chunks;
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += each) sizes.push_back(std::min(each, n - at));
  auto parts = splitInto(c, *x, sizes, *ax);
  if (!parts) return parts.takeError();
  return Val::list(*parts);
}
Expected<Val> atenUnbind(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto ax = axisOf(c, c.integerOr(1, "dim", 0), rankOf(*x));
  if (!ax) return ax.takeError();
  int64_t n = shapeOf(*x)[*ax];
  auto parts = splitInto(c, *x, std::vector<int64_t>(n, 1), *ax);
  if (!parts) return parts.takeError();
  std::vector<Val> out;
  for (const Val& p : *parts) {
    auto s = c.c.op(Op::Squeeze, {p.t->v, c.c.ints({*ax})});
    if (!s) return s.takeError();
    out.push_back(tensorVal(*s));
  }
  return Val::list(out, true);
}
Expected<Val> atenPad(Call& c) {
  auto x = c.tensor(0, "input");
  if (!x) return x.takeError();
  auto pad = c.ints(1, "pad");
  if (!pad) return pad.takeError();
  std::string mode = c.strOr(2, "mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "replicate") return c.fail("mode '" + mode + "' is not supported");
  int64_t r = rankOf(*x);
  if (pad->size() % 2 || (int64_t)pad->size() > 2 * r) return c.fail("pad has " + std::to_string(pad->size()) + " numbers for rank " + std::to_string(r));
  // torch lists (before, after) pairs from the last dim; the IR lists all befores, then all afters.
  std::vector<int64_t> pads(2 * r, 0);
  for (size_t i = 0; i < pad->size() / 2; ++i) {
    int64_t d = r - 1 - (int64_t)i;
    pads[d] = (*pad)[2 * i], pads[r + d] = (*pad)[2 * i + 1];
  }
  ir::Value* value = c.c.scalar(c.realOr(3, "value", 0), (*x)->type.dtype);
  return wrap(c.c.op(Op::Pad, {*x, c.c.ints(pads), value}, {{"mode", mode == "replicate" ? std::string("edge") : mode}}));
}
Expected<Val> atenConstantPadNd(Call& c) {
  Call pad{c.c, "pad", {c.args.size() > 0 ? c.args[0] : Val::none(), c.args.size() > 1 ? c.args[1] : Val::none(), Val::str("constant"),
                        c.args.size() > 2 ? c.args[2] : Val::real(0)}, {}, c.where};
  return atenPad(pad);
}
Expected<Val> atenIndex(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  const Val* list = c.arg(1, "indices");
  if (!list || list->k != Val::K::List) return c.fail("takes a list of indices");
  std::vector<ir::Value*> idx;
  for (size_t i = 0; i < list->items.size(); ++i) {
    const Val& v = list->items[i];
    if (v.k == Val::K::None && idx.empty() && i + 1 < list->items.size()) return c.fail("indexing with None before the index tensors is not supported");
    if (v.k == Val::K::None) continue;
    if (v.k != Val::K::Tensor || idx.size() != i) return c.fail("index tensors must be the leading indices");
    if (v.t->v->type.dtype == ir::DType::Bool) return c.fail("indexing by a boolean mask is not supported: its size depends on the data");
    idx.push_back(v.t->v);
  }
  if (idx.empty()) return tensorVal(*x);
  if (idx.size() == 1) return wrap(c.c.op(Op::Gather, {*x, idx[0]}, {{"axis", int64_t(0)}}));
  // Several index tensors broadcast together and pick elements of the leading dims: GatherND
  // of their values stacked along a new last dim.
  std::vector<int64_t> shape;
  for (ir::Value* i : idx) {
    std::vector<int64_t> s = shapeOf(i);
    if (s.size() > shape.size()) shape.insert(shape.begin(), s.size() - shape.size(), 1);
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = shape[shape.size() - s.size() + d];
      if (o != s[d] && o != 1 && s[d] != 1) return c.fail("index tensors of shapes that do not broadcast");
      o = std::max(o, s[d]);
    }
  }
  std::vector<ir::Value*> parts;
  for (ir::Value* i : idx) {
    auto i64 = castTo(c, i, ir::DType::I64);
    auto e = i64 ? c.c.op(Op::Expand, {*i64, c.c.ints(shape)}) : Expected<ir::Value*>(i64.takeError());
    auto u = e ? c.c.op(Op::Unsqueeze, {*e, c.c.ints({(int64_t)shape.size()})}) : Expected<ir::Value*>(e.takeError());
    if (!u) return u.takeError();
    parts.push_back(*u);
  }
  auto stacked = c.c.op(Op::Concat, parts, {{"axis", int64_t(-1)}});
  if (!stacked) return stacked.takeError();
  return wrap(c.c.op(Op::GatherND, {*x, *stacked}));
}
Expected<Val> atenIndexSelect(Call& c) { return gatherAlong(c, Op::Gather); }
Expected<Val> atenGather(Call& c) { return gatherAlong(c, Op::GatherElements); }
Expected<Val> atenEmbedding(Call& c) {
  auto w = c.tensor(0, "weight");
  if (!w) return w.takeError();
  auto idx = c.tensor(1, "indices");
  if (!idx) return idx.takeError();
  return wrap(c.c.op(Op::Gather, {*w, *idx}, {{"axis", int64_t(0)}}));
}
Expected<Val> atenTriu(Call& c) { return trilu(c, true); }
Expected<Val> atenTril(Call& c) { return trilu(c, false); }
Expected<Val> atenCopy_(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto src = c.tensor(1, "src");
  if (!src) return src.takeError();
  if (Error e = assignInPlace(c.c, c.args[0].t, *src)) return e;
  return c.args[0];
}
Expected<Val> atenFill_(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  const Val* value = c.arg(1, "value");
  if (!value) return c.fail("takes a value");
  auto v = asTensor(c, *value, (*x)->type.dtype);
  if (!v) return v.takeError();
  if (Error e = assignInPlace(c.c, c.args[0].t, *v)) return e;
  return c.args[0];
}

} // namespace sgc::ts_import
