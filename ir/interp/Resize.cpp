// Interpreter kernels of Resize and its gradient: the separable taps of
// ir/shapes/Resize.cpp applied one axis at a time in float64 (the gradient:
// the same weights scattered back, axes in reverse order), positions outside
// a tf_crop_and_resize box taking extrapolation_value (and no gradient).
#include "ir/interp/Kernels.h"

namespace sgc::ir {
namespace {

struct Resampled {
  std::vector<int64_t> shape;
  std::vector<double> data;
};

/// One axis of `t` resampled by `taps` (forward), or its transpose back to `in` positions.
Resampled alongAxis(const Resampled& t, int64_t axis, const std::vector<ResizeTap>& taps, int64_t in, bool transpose) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= t.shape[d];
  for (size_t d = axis + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
  Resampled r{t.shape, {}};
  int64_t from = t.shape[axis], to = transpose ? in : (int64_t)taps.size();
  r.shape[axis] = to;
  r.data.assign(outer * to * inner, 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (size_t y = 0; y < taps.size(); ++y)
      for (size_t k = 0; k < taps[y].index.size(); ++k) {
        int64_t x = taps[y].index[k];
        double w = taps[y].weight[k];
        for (int64_t e = 0; e < inner; ++e) {
          if (transpose) r.data[(o * to + x) * inner + e] += w * t.data[(o * from + y) * inner + e];
          else r.data[(o * to + y) * inner + e] += w * t.data[(o * from + x) * inner + e];
        }
      }
  return r;
}

struct Plan {
  ResizeGeometry g;
  std::vector<std::vector<ResizeTap>> taps; ///< per axis (empty: the axis is left as it is)
};

Expected<Plan> planOf(EvalCtx& c, const std::vector<int64_t>& in, size_t first) {
  InferCtx ic{c.node, {}, {}, {}};
  auto at = [&](size_t i) { return c.present(i) ? c.in[i] : nullptr; };
  auto g = resizeGeometry(ic, in, at(first), at(first + 1), at(first + 2));
  if (!g) return g.takeError();
  Plan p{*g, {}};
  for (size_t a = 0; a < in.size(); ++a) {
    if (!g->resizes(a, in[a])) {
      p.taps.emplace_back();
      continue;
    }
    auto t = resizeTaps(ic, *g, (int64_t)a, in[a]);
    if (!t) return t.takeError();
    p.taps.push_back(std::move(*t));
  }
  return p;
}

/// Whether output element `i` (of `shape`) lies outside the box along some axis.
bool outside(const Plan& p, const std::vector<int64_t>& shape, int64_t i) {
  for (size_t a = shape.size(); a-- > 0;) {
    int64_t y = i % shape[a];
    i /= shape[a];
    if (!p.taps[a].empty() && p.taps[a][y].outside) return true;
  }
  return false;
}

} // namespace

Error evalResize(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  auto p = planOf(c, x.shape, 1);
  if (!p) return p.takeError();
  Resampled r{x.shape, x.toF64()};
  for (size_t a = 0; a < x.shape.size(); ++a)
    if (!p->taps[a].empty()) r = alongAxis(r, (int64_t)a, p->taps[a], x.shape[a], false);
  double extrapolation = c.node.getFloat("extrapolation_value", 0);
  for (int64_t i = 0; i < c.out[0].numel(); ++i) c.out[0].setF(i, outside(*p, r.shape, i) ? extrapolation : r.data[i]);
  return Error::success();
}

Error evalResizeGrad(EvalCtx& c) {
  const Tensor& dy = *c.in[0];
  std::vector<int64_t> in = c.in[1]->toI64();
  auto p = planOf(c, in, 2);
  if (!p) return p.takeError();
  if (p->g.out != dy.shape) return c.fail("dy does not have the resize's shape");
  Resampled r{dy.shape, dy.toF64()};
  for (int64_t i = 0; i < dy.numel(); ++i)
    if (outside(*p, dy.shape, i)) r.data[i] = 0;
  for (size_t a = in.size(); a-- > 0;)
    if (!p->taps[a].empty()) r = alongAxis(r, (int64_t)a, p->taps[a], in[a], true);
  for (int64_t i = 0; i < c.out[0].numel(); ++i) c.out[0].setF(i, r.data[i]);
  return Error::success();
}

} // namespace sgc::ir
