// Interpreter kernels of the IR-only gradient ops, in float64.
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {

Error evalUnaryGrad(EvalCtx& c) {
  const Tensor &x = *c.in[0], &dy = *c.in[1];
  if (x.shape != dy.shape) return c.fail("x and dy must have one shape");
  std::string of = c.node.getString("of", "");
  auto op = opFromName(of);
  auto d = op ? unaryDerivative(c.node, *op) : nullptr;
  if (!d) return c.fail("no derivative for '" + of + "'");
  for (int64_t i = 0; i < x.numel(); ++i) c.out[0].setF(i, d(x.getF(i)) * dy.getF(i));
  return Error::success();
}

Error evalSoftmaxGrad(EvalCtx& c) {
  const Tensor &y = *c.in[0], &dy = *c.in[1];
  if (y.shape != dy.shape || y.rank() == 0) return c.fail("y and dy must have one shape of rank 1 or more");
  int64_t axis = c.node.getInt("axis", -1);
  if (axis < -y.rank() || axis >= y.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += y.rank();
  bool log = c.node.getInt("log", 0);
  int64_t d = y.shape[axis], inner = stridesOf(y.shape)[axis], outer = d ? y.numel() / (d * inner) : 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * d + k) * inner + i; };
      double s = 0;
      for (int64_t k = 0; k < d; ++k) s += log ? dy.getF(at(k)) : dy.getF(at(k)) * y.getF(at(k));
      for (int64_t k = 0; k < d; ++k) {
        double yk = y.getF(at(k)), g = dy.getF(at(k));
        c.out[0].setF(at(k), log ? g - std::exp(yk) * s : yk * (g - s));
      }
    }
  return Error::success();
}

Error evalSumTo(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  Tensor& y = c.out[0];
  auto off = broadcastOffsets(x.shape, y.shape);
  std::vector<double> acc(y.numel(), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) acc[off[i]] += x.getF(i);
  for (int64_t i = 0; i < y.numel(); ++i) y.setF(i, acc[i]);
  return Error::success();
}

/// Normalizes rows of `inner` elements (LayerNorm) or channels (BatchNorm)
/// and writes dx, dscale, dbias from the standard formulas:
/// dx = inv / M * (M * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat)).
Error evalLayerNormGrad(EvalCtx& c) {
  const Tensor &x = *c.in[0], &scale = *c.in[1], &dy = *c.in[2];
  int64_t axis = c.node.getInt("axis", -1);
  if (axis < -x.rank() || axis >= x.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += x.rank();
  double eps = c.node.getFloat("epsilon", 1e-5);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  int64_t M = checkedNumel(normShape).value(), rows = M ? x.numel() / M : 0;
  auto offScale = broadcastOffsets(normShape, scale.shape);
  std::vector<double> dscale(scale.numel(), 0.0), dbias(scale.numel(), 0.0), xhat(M), dxhat(M);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0, s1 = 0, s2 = 0;
    for (int64_t i = 0; i < M; ++i) mean += x.getF(r * M + i);
    mean /= (double)M;
    for (int64_t i = 0; i < M; ++i) var += std::pow(x.getF(r * M + i) - mean, 2);
    double inv = 1 / std::sqrt(var / (double)M + eps);
    for (int64_t i = 0; i < M; ++i) {
      double g = dy.getF(r * M + i);
      xhat[i] = (x.getF(r * M + i) - mean) * inv;
      dxhat[i] = g * scale.getF(offScale[i]);
      dscale[offScale[i]] += g * xhat[i];
      dbias[offScale[i]] += g;
      s1 += dxhat[i];
      s2 += dxhat[i] * xhat[i];
    }
    for (int64_t i = 0; i < M; ++i) c.out[0].setF(r * M + i, inv / (double)M * ((double)M * dxhat[i] - s1 - xhat[i] * s2));
  }
  for (int64_t i = 0; i < scale.numel(); ++i) {
    c.out[1].setF(i, dscale[i]);
    c.out[2].setF(i, dbias[i]);
  }
  return Error::success();
}

/// RmsNormGrad from the forward's 1 / rms of each row: with xhat = x inv and g = dy scale,
/// dx = inv (g - xhat mean(g xhat)), dscale = the sum over rows of dy xhat.
Error evalRmsNormGrad(EvalCtx& c) {
  const Tensor &x = *c.in[0], &scale = *c.in[1], &dy = *c.in[2], &invs = *c.in[3];
  int64_t axis = c.node.getInt("axis", -1);
  if (axis < -x.rank() || axis >= x.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += x.rank();
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  int64_t M = checkedNumel(normShape).value(), rows = M ? x.numel() / M : 0;
  if (invs.numel() != rows) return c.fail("invstd must have one element per row");
  auto offScale = broadcastOffsets(normShape, scale.shape);
  std::vector<double> dscale(scale.numel(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double inv = invs.getF(r), s = 0;
    for (int64_t i = 0; i < M; ++i) {
      double xhat = x.getF(r * M + i) * inv, g = dy.getF(r * M + i);
      s += g * scale.getF(offScale[i]) * xhat;
      dscale[offScale[i]] += g * xhat;
    }
    for (int64_t i = 0; i < M; ++i) {
      double xhat = x.getF(r * M + i) * inv, g = dy.getF(r * M + i) * scale.getF(offScale[i]);
      c.out[0].setF(r * M + i, inv * (g - xhat * s / (double)M));
    }
  }
  for (int64_t i = 0; i < scale.numel(); ++i) c.out[1].setF(i, dscale[i]);
  return Error::success();
}

Error evalBatchNormGrad(EvalCtx& c) {
  const Tensor &x = *c.in[0], &scale = *c.in[1], &dy = *c.in[2];
  int64_t N = x.shape[0], C = x.shape[1], inner = stridesOf(x.shape)[1];
  if (scale.numel() != C) return c.fail("scale must have C elements");
  double eps = c.node.getFloat("epsilon", 1e-5), M = (double)(N * inner);
  for (int64_t ch = 0; ch < C; ++ch) {
    auto at = [&](int64_t n, int64_t i) { return (n * C + ch) * inner + i; };
    double mean = 0, var = 0, s1 = 0, s2 = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) mean += x.getF(at(n, i));
    mean /= M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) var += std::pow(x.getF(at(n, i)) - mean, 2);
    double inv = 1 / std::sqrt(var / M + eps), g = scale.getF(ch), db = 0, ds = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        double d = dy.getF(at(n, i)), xh = (x.getF(at(n, i)) - mean) * inv;
        s1 += d * g;
        s2 += d * g * xh;
        ds += d * xh;
        db += d;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        double xh = (x.getF(at(n, i)) - mean) * inv;
        c.out[0].setF(at(n, i), inv / M * (M * dy.getF(at(n, i)) * g - s1 - xh * s2));
      }
    c.out[1].setF(ch, ds);
    c.out[2].setF(ch, db);
  }
  return Error::success();
}

namespace {
/// Shared body of the loss gradients: `perElement(n, t, i, scale)` writes the
/// gradient of one target position with the upstream factor `scale`.
template <typename F>
Error lossGrad(EvalCtx& c, F perElement) {
  const Tensor &x = *c.in[0], &target = *c.in[1], &dl = *c.in[2];
  const Tensor* w = c.present(3) ? c.in[3] : nullptr;
  int64_t N = x.shape[0], C = x.shape[1], inner = target.numel() / std::max<int64_t>(N, 1);
  if (target.numel() * C != x.numel()) return c.fail("target shape does not match the scores");
  if (w && w->numel() != C) return c.fail("weights must have C elements");
  std::string red = c.node.getString("reduction", "mean");
  bool hasIgnore = c.node.has("ignore_index");
  int64_t ignore = c.node.getInt("ignore_index", 0);
  if ((red == "none" && dl.numel() != target.numel()) || (red != "none" && dl.numel() != 1))
    return c.fail("dloss has the wrong number of elements");
  double wsum = 0;
  for (int64_t k = 0; k < target.numel(); ++k) {
    int64_t t = target.getI(k);
    if (hasIgnore && t == ignore) continue;
    if (t < 0 || t >= C) return c.fail("target " + std::to_string(t) + " is out of range [0, " + std::to_string(C) + ")");
    wsum += w ? w->getF(t) : 1.0;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t k = n * inner + i, t = target.getI(k);
      bool ignored = hasIgnore && t == ignore;
      double wt = ignored ? 0.0 : (w ? w->getF(t) : 1.0);
      double up = red == "none" ? dl.getF(k) : red == "sum" ? dl.getF(0) : dl.getF(0) / wsum;
      perElement(n, ignored ? -1 : t, i, wt * up);
    }
  return Error::success();
}
} // namespace

Error evalSceLossGrad(EvalCtx& c) {
  if (c.out.size() > 1 && c.node.outputs[1])
    if (Error e = sceLoss(c, c.present(3) ? c.in[3] : nullptr, c.out[1], nullptr)) return e;
  const Tensor& x = *c.in[0];
  int64_t N = x.shape[0], C = x.shape[1], inner = x.numel() / std::max<int64_t>(N * C, 1);
  return lossGrad(c, [&](int64_t n, int64_t t, int64_t i, double scale) {
    auto at = [&](int64_t k) { return (n * C + k) * inner + i; };
    double mx = -INFINITY, s = 0;
    for (int64_t k = 0; k < C; ++k) mx = std::max(mx, x.getF(at(k)));
    for (int64_t k = 0; k < C; ++k) s += std::exp(x.getF(at(k)) - mx);
    for (int64_t k = 0; k < C; ++k) {
      double p = std::exp(x.getF(at(k)) - mx) / s;
      c.out[0].setF(at(k), t < 0 ? 0.0 : (p - (k == t)) * scale);
    }
  });
}

Error evalNllLossGrad(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t N = x.shape[0], C = x.shape[1], inner = x.numel() / std::max<int64_t>(N * C, 1);
  return lossGrad(c, [&](int64_t n, int64_t t, int64_t i, double scale) {
    if (t >= 0) c.out[0].setF((n * C + t) * inner + i, -scale);
  });
}

} // namespace sgc::ir
