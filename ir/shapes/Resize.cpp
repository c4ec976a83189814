// Resize's geometry (ONNX Resize-19): the output size of each axis from
// scales or sizes (with axes and keep_aspect_ratio_policy), and for each
// output position of each axis the input positions it reads and their
// weights, by the coordinate transformation and the interpolation mode
// (nearest, linear, cubic, with antialias and exclude_outside). Resize is
// separable, so the interpreter applies the axes' weights one axis at a time;
// the shape rule uses the sizes alone.
#include "ir/shapes/Shapes.h"

#include <algorithm>
#include <cmath>

namespace sgc::ir {
namespace {

std::vector<double> nearestCoeffs(double ratio, const std::string& mode) {
  if (ratio == std::floor(ratio)) return {0, 1};
  if (mode == "round_prefer_ceil") return {double(ratio < 0.5), double(ratio >= 0.5)};
  if (mode == "floor") return {1, 0};
  if (mode == "ceil") return {0, 1};
  return {double(ratio <= 0.5), double(ratio > 0.5)}; // round_prefer_floor
}

std::vector<double> linearCoeffs(double ratio, double scale, bool antialias) {
  if (!antialias) return {1 - ratio, ratio};
  scale = std::min(scale, 1.0);
  int64_t start = (int64_t)std::floor(-1 / scale) + 1, n = 2 - 2 * start;
  std::vector<double> c(n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += c[i] = std::clamp(1 - std::fabs((start + i - ratio) * scale), 0.0, 1.0);
  for (double& v : c) v /= sum;
  return c;
}

double cubicAt(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

std::vector<double> cubicCoeffs(double ratio, double scale, double A, bool antialias) {
  if (!antialias) return {cubicAt(ratio + 1, A), cubicAt(ratio, A), cubicAt(1 - ratio, A), cubicAt(2 - ratio, A)};
  scale = std::min(scale, 1.0);
  int64_t start = (int64_t)std::floor(-2 / scale) + 1, end = 2 - start;
  std::vector<double> c;
  double sum = 0;
  for (int64_t i = start; i < end; ++i) sum += c.emplace_back(cubicAt(scale * (i - ratio), A));
  for (double& v : c) v /= sum;
  return c;
}

/// Where output position y of an axis reads from, in input coordinates.
double sourceOf(const std::string& mode, double y, double scale, int64_t in, int64_t out, double roiStart, double roiEnd, bool& outside) {
  double outF = scale * (double)in;
  if (mode == "align_corners") return outF == 1 ? 0 : y * (double)(in - 1) / (outF - 1);
  if (mode == "asymmetric") return y / scale;
  if (mode == "tf_crop_and_resize") {
    double x = outF == 1 ? (roiEnd - roiStart) * (double)(in - 1) / 2 : y * (roiEnd - roiStart) * (double)(in - 1) / (outF - 1);
    x += roiStart * (double)(in - 1);
    outside = x < 0 || x > (double)(in - 1);
    return x;
  }
  if (mode == "pytorch_half_pixel") return outF == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (mode == "half_pixel_symmetric") {
    double offset = (double)in / 2 * (1 - (double)out / outF);
    return offset + (y + 0.5) / scale - 0.5;
  }
  return (y + 0.5) / scale - 0.5; // half_pixel
}

} // namespace

Expected<ResizeGeometry> resizeGeometry(const InferCtx& c, const std::vector<int64_t>& in, const Tensor* roi, const Tensor* scales,
                                        const Tensor* sizes) {
  const Node& n = c.node;
  int64_t r = (int64_t)in.size();
  std::vector<int64_t> axes = n.getInts("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (int64_t& a : axes) {
    if (a < -r || a >= r) return c.fail("axis " + std::to_string(a) + " is out of range");
    if (a < 0) a += r;
  }
  ResizeGeometry g;
  g.scale.assign(r, 1.0);
  g.out = in;
  g.roiStart.assign(r, 0.0);
  g.roiEnd.assign(r, 1.0);
  bool haveSizes = sizes && sizes->numel() > 0, haveScales = scales && scales->numel() > 0;
  if (haveSizes == haveScales) return c.fail("exactly one of scales and sizes must be given");
  const Tensor* given = haveSizes ? sizes : scales;
  if (given->numel() != (int64_t)axes.size()) return c.fail("scales or sizes must give every resized axis");
  if (roi && roi->numel() == 2 * (int64_t)axes.size())
    for (size_t i = 0; i < axes.size(); ++i) g.roiStart[axes[i]] = roi->getF(i), g.roiEnd[axes[i]] = roi->getF(axes.size() + i);
  if (haveScales) {
    for (size_t i = 0; i < axes.size(); ++i) {
      double s = scales->getF(i);
      if (!(s > 0)) return c.fail("scales must be positive");
      g.scale[axes[i]] = s;
      g.out[axes[i]] = (int64_t)std::floor(s * (double)in[axes[i]]);
    }
    return g;
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t s = sizes->getI(i);
    if (s < 0 || in[axes[i]] == 0) return c.fail("sizes must be non-negative, over non-empty axes");
    g.out[axes[i]] = s;
    g.scale[axes[i]] = (double)s / (double)in[axes[i]];
  }
  std::string policy = n.getString("keep_aspect_ratio_policy", "stretch");
  if (policy == "stretch") return g;
  if (policy != "not_larger" && policy != "not_smaller") return c.fail("unknown keep_aspect_ratio_policy '" + policy + "'");
  double s = g.scale[axes[0]];
  for (int64_t a : axes) s = policy == "not_larger" ? std::min(s, g.scale[a]) : std::max(s, g.scale[a]);
  for (int64_t a : axes) g.scale[a] = s, g.out[a] = (int64_t)(s * (double)in[a] + 0.5);
  return g;
}

Expected<std::vector<ResizeTap>> resizeTaps(const InferCtx& c, const ResizeGeometry& g, int64_t axis, int64_t in) {
  const Node& n = c.node;
  std::string mode = n.getString("mode", "nearest"), ctm = n.getString("coordinate_transformation_mode", "half_pixel");
  bool antialias = n.getInt("antialias", 0), exclude = n.getInt("exclude_outside", 0);
  if (mode != "nearest" && mode != "linear" && mode != "cubic") return c.fail("unknown mode '" + mode + "'");
  if (mode == "nearest" && antialias) return c.fail("antialias does not apply to nearest");
  double scale = g.scale[axis], A = n.getFloat("cubic_coeff_a", -0.75);
  std::vector<ResizeTap> taps(g.out[axis]);
  for (int64_t y = 0; y < g.out[axis]; ++y) {
    ResizeTap& tap = taps[y];
    double x = sourceOf(ctm, (double)y, scale, in, g.out[axis], g.roiStart[axis], g.roiEnd[axis], tap.outside);
    double ratio = x == std::floor(x) ? 1 : x - std::floor(x); // in (0, 1]: the left neighbour is preferred
    std::vector<double> w = mode == "nearest" ? nearestCoeffs(ratio, n.getString("nearest_mode", "round_prefer_floor"))
                            : mode == "linear" ? linearCoeffs(ratio, scale, antialias)
                                               : cubicCoeffs(ratio, scale, A, antialias);
    int64_t count = (int64_t)w.size(), pad = (count + 1) / 2;
    double xp = x + (double)pad, p = std::floor(xp), frac = xp - p;
    int64_t first = count % 2 == 0 ? (int64_t)p + (frac == 0 ? -(count / 2) : -(count / 2) + 1)
                                   : (int64_t)p - (count - 1) / 2 + (frac <= 0.5 ? 0 : 1);
    double sum = 0;
    for (int64_t k = 0; k < count; ++k) {
      int64_t idx = first + k - pad;
      if (exclude && (idx < 0 || idx >= in)) w[k] = 0;
      sum += w[k];
      tap.index.push_back(std::clamp<int64_t>(idx, 0, in - 1));
    }
    if (exclude && sum != 0)
      for (double& v : w) v /= sum;
    tap.weight = w;
  }
  return taps;
}

Error inferResize(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  if (!x.isStatic()) return Error::success();
  const Tensor *roi = c.values.size() > 1 ? c.values[1] : nullptr, *scales = c.values.size() > 2 ? c.values[2] : nullptr,
               *sizes = c.values.size() > 3 ? c.values[3] : nullptr;
  if ((c.present(2) && !scales) || (c.present(3) && !sizes)) {
    c.out[0] = Type::ranked_(x.dtype, std::vector<Dim>(x.rank(), Dim::unknown()));
    return Error::success(); // known when they are
  }
  auto g = resizeGeometry(c, x.shape(), roi, scales, sizes);
  if (!g) return g.takeError();
  c.out[0] = Type::of(x.dtype, g->out);
  return Error::success();
}

} // namespace sgc::ir
