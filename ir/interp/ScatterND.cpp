// Interpreter kernels of GatherND, ScatterND, ScatterElements and
// GatherNDGrad: index tuples that pick slices of the data (GatherND), or
// positions the updates go to, applied in order (the scatters, whose
// reduction combines an update with what is there).
#include "ir/interp/Kernels.h"

#include <algorithm>

namespace sgc::ir {
namespace {

/// How index tuples address a tensor of shape `data`: `batch` leading dims shared with the
/// indices, then `k` indexed dims, then slices of `inner` elements.
struct NdIndexing {
  std::vector<int64_t> data;
  int64_t batchDims = 0, k = 0, batches = 1, tuples = 0, inner = 1; ///< tuples: per batch

  /// The offset of the slice that tuple t (its k values at idx[t * k..]) of batch `bi` picks.
  Expected<int64_t> sliceAt(const EvalCtx& c, const Tensor& idx, int64_t bi, int64_t t) const {
    int64_t off = bi;
    for (int64_t j = 0; j < k; ++j) {
      int64_t d = data[batchDims + j], v = idx.getI((bi * tuples + t) * k + j);
      if (v < -d || v >= d) return c.fail("index " + std::to_string(v) + " is out of range for dim " + std::to_string(d));
      off = off * d + (v < 0 ? v + d : v);
    }
    return off * inner;
  }
};

Expected<NdIndexing> ndIndexing(const EvalCtx& c, const std::vector<int64_t>& data, const Tensor& idx, int64_t batchDims) {
  NdIndexing g;
  g.data = data, g.batchDims = batchDims;
  if (idx.rank() < 1 || idx.rank() <= batchDims) return c.fail("indices need a rank above batch_dims");
  g.k = idx.shape.back();
  if (g.k < 1 || batchDims + g.k > (int64_t)data.size()) return c.fail("the indices' last dim is out of range");
  for (int64_t i = 0; i < batchDims; ++i) {
    if (idx.shape[i] != data[i]) return c.fail("the batch dims of data and indices differ");
    g.batches *= data[i];
  }
  for (size_t i = batchDims + g.k; i < data.size(); ++i) g.inner *= data[i];
  g.tuples = idx.numel() / g.k / g.batches;
  return g;
}

/// `old` combined with `update` under a scatter's reduction.
double combine(const std::string& red, double old, double update) {
  if (red == "add") return old + update;
  if (red == "mul") return old * update;
  if (red == "max") return std::max(old, update);
  if (red == "min") return std::min(old, update);
  return update;
}

void scatterElement(Tensor& out, int64_t at, const Tensor& upd, int64_t from, const std::string& red) {
  if (isFloat(out.dtype)) out.setF(at, combine(red, out.getF(at), upd.getF(from)));
  else if (red == "none") copyElement(out, at, upd, from);
  else out.setI(at, (int64_t)combine(red, (double)out.getI(at), (double)upd.getI(from)));
}

} // namespace

Error evalGatherND(EvalCtx& c) {
  const Tensor &x = *c.in[0], &idx = *c.in[1];
  auto g = ndIndexing(c, x.shape, idx, c.node.getInt("batch_dims", 0));
  if (!g) return g.takeError();
  int64_t o = 0;
  for (int64_t bi = 0; bi < g->batches; ++bi)
    for (int64_t t = 0; t < g->tuples; ++t) {
      auto at = g->sliceAt(c, idx, bi, t);
      if (!at) return at.takeError();
      for (int64_t e = 0; e < g->inner; ++e) copyElement(c.out[0], o++, x, *at + e);
    }
  return Error::success();
}

Error evalGatherNDGrad(EvalCtx& c) {
  const Tensor &dy = *c.in[0], &idx = *c.in[1];
  Tensor& dx = c.out[0];
  auto g = ndIndexing(c, dx.shape, idx, c.node.getInt("batch_dims", 0));
  if (!g) return g.takeError();
  if (dy.numel() != g->batches * g->tuples * g->inner) return c.fail("dy does not have the gather's shape");
  int64_t o = 0;
  for (int64_t bi = 0; bi < g->batches; ++bi)
    for (int64_t t = 0; t < g->tuples; ++t) {
      auto at = g->sliceAt(c, idx, bi, t);
      if (!at) return at.takeError();
      for (int64_t e = 0; e < g->inner; ++e, ++o) dx.setF(*at + e, dx.getF(*at + e) + dy.getF(o));
    }
  return Error::success();
}

Error evalScatterND(EvalCtx& c) {
  const Tensor &x = *c.in[0], &idx = *c.in[1], &upd = *c.in[2];
  Tensor& y = c.out[0];
  y.bytes = x.bytes;
  auto g = ndIndexing(c, x.shape, idx, 0);
  if (!g) return g.takeError();
  if (upd.numel() != g->tuples * g->inner) return c.fail("updates must have the shape indices.shape[:-1] + data.shape[k:]");
  std::string red = c.node.getString("reduction", "none");
  for (int64_t t = 0; t < g->tuples; ++t) {
    auto at = g->sliceAt(c, idx, 0, t);
    if (!at) return at.takeError();
    for (int64_t e = 0; e < g->inner; ++e) scatterElement(y, *at + e, upd, t * g->inner + e, red);
  }
  return Error::success();
}

Error evalScatterElements(EvalCtx& c) {
  const Tensor &x = *c.in[0], &idx = *c.in[1], &upd = *c.in[2];
  Tensor& y = c.out[0];
  y.bytes = x.bytes;
  if (idx.shape != upd.shape || idx.rank() != x.rank()) return c.fail("indices and updates must have one shape, of the data's rank");
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < -x.rank() || axis >= x.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += x.rank();
  std::string red = c.node.getString("reduction", "none");
  auto xs = stridesOf(x.shape);
  int64_t o = 0;
  Error err = Error::success();
  forEachIndex(idx.shape, [&](const std::vector<int64_t>& at) {
    int64_t j = idx.getI(o), d = x.shape[axis], off = 0;
    bool ok = j >= -d && j < d;
    if (j < 0) j += d;
    for (size_t i = 0; i < at.size() && ok; ++i) {
      int64_t v = (int64_t)i == axis ? j : at[i];
      ok = v < x.shape[i];
      off += v * xs[i];
    }
    if (ok) scatterElement(y, off, upd, o, red);
    else if (!err) err = c.fail("index " + std::to_string(idx.getI(o)) + " is out of range");
    ++o;
  });
  return err;
}

} // namespace sgc::ir
