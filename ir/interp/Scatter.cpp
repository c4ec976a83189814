// Interpreter kernels of the gradient ops that scatter into a zero tensor of
// the forward input's shape: slice, gather, convolution and pooling grads.
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {

Error evalSliceGrad(EvalCtx& c) {
  const Tensor& dy = *c.in[0];
  Tensor& dx = c.out[0];
  // The forward Slice's view of the inputs: (x, starts, ends, axes, steps).
  InferCtx fwd{c.node, {Type{}}, {nullptr}, {}};
  for (size_t i = 2; i < c.in.size(); ++i) {
    fwd.in.push_back(c.in[i] ? Type::of(c.in[i]->dtype, c.in[i]->shape) : Type{});
    fwd.values.push_back(c.in[i]);
  }
  auto g = sliceGeometry(fwd, dx.shape);
  if (!g) return g.takeError();
  std::vector<int64_t> counts;
  for (const SliceDim& s : *g) counts.push_back(s.count);
  if (counts != dy.shape) return c.fail("dy does not have the slice's shape");
  auto xs = stridesOf(dx.shape);
  int64_t o = 0;
  forEachIndex(dy.shape, [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += ((*g)[i].start + idx[i] * (*g)[i].step) * xs[i];
    dx.setF(off, dx.getF(off) + dy.getF(o++));
  });
  return Error::success();
}

Error evalGatherGrad(EvalCtx& c) {
  const Tensor &dy = *c.in[0], &idx = *c.in[1];
  Tensor& dx = c.out[0];
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < -dx.rank() || axis >= dx.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += dx.rank();
  int64_t d = dx.shape[axis], inner = stridesOf(dx.shape)[axis], outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dx.shape[i];
  if (dy.numel() != outer * idx.numel() * inner) return c.fail("dy does not have the gather's shape");
  std::vector<double> acc(dx.numel(), 0.0);
  int64_t o = 0;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t k = 0; k < idx.numel(); ++k) {
      int64_t j = idx.getI(k);
      if (j < -d || j >= d) return c.fail("index " + std::to_string(j) + " is out of range for dim " + std::to_string(d));
      if (j < 0) j += d;
      for (int64_t i = 0; i < inner; ++i) acc[(a * d + j) * inner + i] += dy.getF(o++);
    }
  for (int64_t i = 0; i < dx.numel(); ++i) dx.setF(i, acc[i]);
  return Error::success();
}

Error evalGatherElementsGrad(EvalCtx& c) {
  const Tensor &dy = *c.in[0], &idx = *c.in[1];
  Tensor& dx = c.out[0];
  int64_t axis = c.node.getInt("axis", 0);
  if (idx.rank() != dx.rank() || dy.shape != idx.shape) return c.fail("dy and indices must match, with the data's rank");
  if (axis < -dx.rank() || axis >= dx.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += dx.rank();
  auto xs = stridesOf(dx.shape);
  std::vector<double> acc(dx.numel(), 0.0);
  int64_t o = 0;
  Error err = Error::success();
  forEachIndex(idx.shape, [&](const std::vector<int64_t>& at) {
    int64_t j = idx.getI(o), d = dx.shape[axis], off = 0;
    if (j < 0) j += d;
    bool ok = j >= 0 && j < d;
    for (size_t i = 0; i < at.size() && ok; ++i) {
      int64_t v = (int64_t)i == axis ? j : at[i];
      ok = v < dx.shape[i];
      off += v * xs[i];
    }
    if (ok) acc[off] += dy.getF(o);
    else if (!err) err = c.fail("index out of range");
    ++o;
  });
  if (err) return err;
  for (int64_t i = 0; i < dx.numel(); ++i) dx.setF(i, acc[i]);
  return Error::success();
}

namespace {

struct ConvDims {
  int64_t N, C, M, group, cPerG, mPerG;
  std::vector<int64_t> in, ks, out;
  Window w;
};

/// Geometry of the forward convolution from x's shape, w's shape and dy.
Expected<ConvDims> convDims(EvalCtx& c, const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                            const std::vector<int64_t>& dys) {
  if (xs.size() < 3 || ws.size() != xs.size() || dys.size() != xs.size()) return c.fail("convolution shapes must share a rank of 3 or more");
  ConvDims d;
  d.N = xs[0], d.C = xs[1], d.M = ws[0], d.group = c.node.getInt("group", 1);
  if (d.group < 1 || d.C % d.group || d.M % d.group || ws[1] * d.group != d.C) return c.fail("channels do not match group");
  d.cPerG = d.C / d.group, d.mPerG = d.M / d.group;
  d.in.assign(xs.begin() + 2, xs.end());
  d.ks.assign(ws.begin() + 2, ws.end());
  d.out.assign(dys.begin() + 2, dys.end());
  auto w = windowGeometry(*c.shapes, d.in, d.ks);
  if (!w) return w.takeError();
  d.w = *w;
  if (dys[0] != d.N || dys[1] != d.M || w->outSize != d.out) return c.fail("dy does not have the convolution's output shape");
  return d;
}

/// Calls fn(xOffset, wOffset, dyOffset) for every multiply of the convolution.
template <typename F>
void forConv(const ConvDims& d, F fn) {
  int64_t inPlane = checkedNumel(d.in).value(), kPlane = checkedNumel(d.ks).value(), outPlane = checkedNumel(d.out).value();
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t m = 0; m < d.M; ++m) {
      int64_t g = m / d.mPerG, o = 0;
      forEachIndex(d.out, [&](const std::vector<int64_t>& op) {
        int64_t dyOff = (n * d.M + m) * outPlane + o++;
        forWindow(d.w, d.in, op, [&](int64_t xOff, const std::vector<int64_t>& k) {
          int64_t kOff = 0;
          for (size_t i = 0; i < k.size(); ++i) kOff = kOff * d.ks[i] + k[i];
          for (int64_t ci = 0; ci < d.cPerG; ++ci)
            fn((n * d.C + g * d.cPerG + ci) * inPlane + xOff, (m * d.cPerG + ci) * kPlane + kOff, dyOff);
        });
      });
    }
}

} // namespace

Error evalConvGradInput(EvalCtx& c) {
  const Tensor &dy = *c.in[0], &w = *c.in[1];
  Tensor& dx = c.out[0];
  auto d = convDims(c, dx.shape, w.shape, dy.shape);
  if (!d) return d.takeError();
  std::vector<double> acc(dx.numel(), 0.0), wv = w.toF64(), dyv = dy.toF64();
  forConv(*d, [&](int64_t xo, int64_t wo, int64_t yo) { acc[xo] += wv[wo] * dyv[yo]; });
  for (int64_t i = 0; i < dx.numel(); ++i) dx.setF(i, acc[i]);
  return Error::success();
}

Error evalConvGradWeight(EvalCtx& c) {
  const Tensor &x = *c.in[0], &dy = *c.in[1];
  Tensor& dw = c.out[0];
  auto d = convDims(c, x.shape, dw.shape, dy.shape);
  if (!d) return d.takeError();
  std::vector<double> acc(dw.numel(), 0.0), xv = x.toF64(), dyv = dy.toF64();
  forConv(*d, [&](int64_t xo, int64_t wo, int64_t yo) { acc[wo] += xv[xo] * dyv[yo]; });
  for (int64_t i = 0; i < dw.numel(); ++i) dw.setF(i, acc[i]);
  return Error::success();
}

Error evalPoolGrad(EvalCtx& c) {
  const Tensor &x = *c.in[0], &dy = *c.in[1];
  Tensor& dx = c.out[0];
  if (x.rank() < 3 || dy.rank() != x.rank()) return c.fail("x and dy must be [N, C, spatial...]");
  bool isMax = c.node.getString("mode", "") == "max", countPad = c.node.getInt("count_include_pad", 0);
  std::vector<int64_t> in(x.shape.begin() + 2, x.shape.end()), out(dy.shape.begin() + 2, dy.shape.end());
  auto w = windowGeometry(*c.shapes, in, c.node.getInts("kernel_shape"));
  if (!w) return w.takeError();
  if (w->outSize != out || dy.shape[0] != x.shape[0] || dy.shape[1] != x.shape[1]) return c.fail("dy does not have the pooling's output shape");
  int64_t planes = x.shape[0] * x.shape[1], inPlane = checkedNumel(in).value();
  std::vector<double> acc(dx.numel(), 0.0), xv = x.toF64();
  int64_t oi = 0;
  for (int64_t p = 0; p < planes; ++p)
    forEachIndex(out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> offs;
      int64_t best = -1;
      forWindow(*w, in, o, [&](int64_t off, const std::vector<int64_t>&) {
        offs.push_back(off);
        if (best < 0 || xv[p * inPlane + off] > xv[p * inPlane + best]) best = off;
      });
      int64_t count = !isMax && countPad ? paddedWindowCount(*w, in, o) : (int64_t)offs.size();
      double g = dy.getF(oi++);
      if (isMax && best >= 0) acc[p * inPlane + best] += g;
      if (!isMax && count > 0)
        for (int64_t off : offs) acc[p * inPlane + off] += g / (double)count;
    });
  for (int64_t i = 0; i < dx.numel(); ++i) dx.setF(i, acc[i]);
  return Error::success();
}

} // namespace sgc::ir
