// Interpreter kernels of reductions, softmax, normalizations, dropout and
// losses, accumulating in float64.
#include "ir/interp/Kernels.h"

#include <cmath>
#include <set>

namespace sgc::ir {
namespace {

/// x's shape with the reduced axes set to 1 (the keepdims layout of the result).
std::vector<int64_t> keptShape(const std::vector<int64_t>& shape, const std::set<int64_t>& axes) {
  std::vector<int64_t> s = shape;
  for (int64_t a : axes) s[a] = 1;
  return s;
}

/// For each element of x, the index of its group in the keepdims result.
std::vector<int64_t> groupOf(const std::vector<int64_t>& shape, const std::set<int64_t>& axes) {
  return broadcastOffsets(shape, keptShape(shape, axes));
}

} // namespace

/// ReduceMax (ReduceMin) of nothing on integers and bool: the dtype's lowest (highest) value.
int64_t emptyExtreme(DType t, bool max) {
  if (t == DType::Bool) return max ? 0 : 1;
  int bits = (int)dtypeSize(t) * 8;
  if (isUnsignedInt(t)) return max ? 0 : (bits == 64 ? -1 : (int64_t)((uint64_t(1) << bits) - 1));
  int64_t hi = bits == 64 ? INT64_MAX : (int64_t(1) << (bits - 1)) - 1;
  return max ? -hi - 1 : hi;
}

Error evalReduce(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  Tensor& y = c.out[0];
  std::vector<int64_t> axesIn = c.present(1) ? c.in[1]->toI64() : std::vector<int64_t>{};
  if (axesIn.empty() && c.node.getInt("noop_with_empty_axes", 0)) {
    y.bytes = x.bytes;
    return Error::success();
  }
  std::set<int64_t> axes;
  for (int64_t a : axesIn) axes.insert(a < 0 ? a + x.rank() : a);
  if (axesIn.empty())
    for (int64_t i = 0; i < x.rank(); ++i) axes.insert(i);
  auto group = groupOf(x.shape, axes);
  int64_t n = y.numel();
  Op op = c.node.op;
  std::vector<double> xv = x.toF64(), acc(n), mx(n, -INFINITY);
  std::vector<int64_t> count(n, 0);
  double init = op == Op::ReduceMax ? -INFINITY : op == Op::ReduceMin ? INFINITY : op == Op::ReduceProd ? 1 : 0;
  std::fill(acc.begin(), acc.end(), init);
  if (op == Op::ReduceLogSumExp)
    for (size_t i = 0; i < xv.size(); ++i) mx[group[i]] = std::max(mx[group[i]], xv[i]);
  for (size_t i = 0; i < xv.size(); ++i) {
    double v = xv[i];
    double& a = acc[group[i]];
    ++count[group[i]];
    switch (op) {
    case Op::ReduceMax: a = std::isnan(v) ? v : std::max(a, v); break;
    case Op::ReduceMin: a = std::isnan(v) ? v : std::min(a, v); break;
    case Op::ReduceProd: a *= v; break;
    case Op::ReduceL1: a += std::fabs(v); break;
    case Op::ReduceL2:
    case Op::ReduceSumSquare: a += v * v; break;
    case Op::ReduceLogSumExp: a += std::exp(v - mx[group[i]]); break;
    default: a += v;
    }
  }
  for (int64_t g = 0; g < n; ++g) {
    double r = acc[g];
    if (op == Op::ReduceMean) r /= (double)count[g];
    if (op == Op::ReduceL2) r = std::sqrt(r);
    if (op == Op::ReduceLogSum) r = std::log(r);
    if (op == Op::ReduceLogSumExp) r = std::isinf(mx[g]) ? mx[g] : mx[g] + std::log(r);
    if (isFloat(y.dtype)) y.setF(g, r);
    else if (count[g] == 0 && (op == Op::ReduceMax || op == Op::ReduceMin)) y.setI(g, emptyExtreme(y.dtype, op == Op::ReduceMax));
    else y.setI(g, toInt(r));
  }
  return Error::success();
}

Error evalArgReduce(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < 0) axis += x.rank();
  bool last = c.node.getInt("select_last_index", 0), isMax = c.node.op == Op::ArgMax;
  int64_t d = x.shape[axis], inner = stridesOf(x.shape)[axis], outer = x.numel() / std::max<int64_t>(d * inner, 1);
  if (d == 0) return c.fail("cannot reduce an empty axis");
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      double bv = x.getF(o * d * inner + i);
      for (int64_t k = 1; k < d; ++k) {
        double v = x.getF((o * d + k) * inner + i);
        bool better = isMax ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
        if (better) best = k, bv = v;
      }
      c.out[0].setI(o * inner + i, best);
    }
  return Error::success();
}

Error evalSoftmax(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t axis = c.node.getInt("axis", -1);
  if (x.rank() == 0) return c.fail("input must have rank 1 or more");
  if (axis < -x.rank() || axis >= x.rank()) return c.fail("axis out of range");
  if (axis < 0) axis += x.rank();
  int64_t d = x.shape[axis], inner = stridesOf(x.shape)[axis], outer = d ? x.numel() / (d * inner) : 0;
  Op op = c.node.op;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * d + k) * inner + i; };
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t k = 0; k < d; ++k)
        if (x.getF(at(k)) > mx) mx = x.getF(at(k)), arg = k;
      double sum = 0;
      for (int64_t k = 0; k < d; ++k) sum += std::exp(x.getF(at(k)) - mx);
      for (int64_t k = 0; k < d; ++k) {
        double v = x.getF(at(k)) - mx;
        c.out[0].setF(at(k), op == Op::Hardmax ? (k == arg) : op == Op::LogSoftmax ? v - std::log(sum) : std::exp(v) / sum);
      }
    }
  return Error::success();
}

Error evalLayerNorm(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t axis = c.node.getInt("axis", -1);
  if (axis < 0) axis += x.rank();
  double eps = c.node.getFloat("epsilon", 1e-5);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  int64_t inner = checkedNumel(normShape).value(), outer = inner ? x.numel() / inner : 0;
  auto offScale = broadcastOffsets(normShape, c.in[1]->shape);
  std::vector<int64_t> offBias;
  if (c.present(2)) offBias = broadcastOffsets(normShape, c.in[2]->shape);
  for (int64_t o = 0; o < outer; ++o) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += x.getF(o * inner + i);
    mean /= (double)inner;
    for (int64_t i = 0; i < inner; ++i) var += std::pow(x.getF(o * inner + i) - mean, 2);
    double inv = 1 / std::sqrt(var / (double)inner + eps);
    for (int64_t i = 0; i < inner; ++i) {
      double v = (x.getF(o * inner + i) - mean) * inv * c.in[1]->getF(offScale[i]);
      c.out[0].setF(o * inner + i, v + (c.present(2) ? c.in[2]->getF(offBias[i]) : 0.0));
    }
    if (c.out.size() > 1) c.out[1].setF(o, mean);
    if (c.out.size() > 2) c.out[2].setF(o, inv);
  }
  return Error::success();
}

/// RmsNorm: rows of the dims from axis on, x / sqrt(mean(x^2) + epsilon) * scale; the second
/// result (when asked for) is each row's 1 / sqrt(mean(x^2) + epsilon).
Error evalRmsNorm(EvalCtx& c) {
  const Tensor &x = *c.in[0], &scale = *c.in[1];
  int64_t axis = c.node.getInt("axis", -1);
  if (axis < 0) axis += x.rank();
  double eps = c.node.getFloat("epsilon", 1e-5);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  int64_t inner = checkedNumel(normShape).value(), outer = inner ? x.numel() / inner : 0;
  auto offScale = broadcastOffsets(normShape, scale.shape);
  for (int64_t o = 0; o < outer; ++o) {
    double squares = 0;
    for (int64_t i = 0; i < inner; ++i) squares += std::pow(x.getF(o * inner + i), 2);
    double inv = 1 / std::sqrt(squares / (double)inner + eps);
    for (int64_t i = 0; i < inner; ++i) c.out[0].setF(o * inner + i, x.getF(o * inner + i) * inv * scale.getF(offScale[i]));
    if (c.out.size() > 1) c.out[1].setF(o, inv);
  }
  return Error::success();
}

Error evalBatchNorm(EvalCtx& c) {
  const Tensor &x = *c.in[0], &scale = *c.in[1], &bias = *c.in[2], &rmean = *c.in[3], &rvar = *c.in[4];
  int64_t C = x.shape[1], inner = stridesOf(x.shape)[1], N = x.shape[0];
  for (const Tensor* t : {&scale, &bias, &rmean, &rvar})
    if (t->numel() != C) return c.fail("scale, bias, mean and var must have C = " + std::to_string(C) + " elements");
  double eps = c.node.getFloat("epsilon", 1e-5), momentum = c.node.getFloat("momentum", 0.9);
  bool training = c.node.getInt("training_mode", 0);
  for (int64_t ch = 0; ch < C; ++ch) {
    double mean = rmean.getF(ch), var = rvar.getF(ch);
    if (training) {
      double s = 0, s2 = 0, cnt = (double)(N * inner);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) s += x.getF((n * C + ch) * inner + i);
      mean = s / cnt;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) s2 += std::pow(x.getF((n * C + ch) * inner + i) - mean, 2);
      var = s2 / cnt;
      if (c.out.size() > 1) c.out[1].setF(ch, rmean.getF(ch) * momentum + mean * (1 - momentum));
      if (c.out.size() > 2) c.out[2].setF(ch, rvar.getF(ch) * momentum + var * (1 - momentum));
    }
    double inv = 1 / std::sqrt(var + eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = (n * C + ch) * inner + i;
        c.out[0].setF(k, (x.getF(k) - mean) * inv * scale.getF(ch) + bias.getF(ch));
      }
  }
  return Error::success();
}

/// A counter-based uniform number in [0, 1) from (seed, index): splitmix64.
static double uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

Error evalDropout(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  double ratio = c.present(1) ? c.in[1]->getF(0) : 0.5;
  bool training = c.present(2) && c.in[2]->getI(0);
  if (ratio < 0 || ratio >= 1) return c.fail("ratio must be in [0, 1)");
  if (!training) ratio = 0;
  // The step (input 3, in training graphs) selects a fresh stream per step.
  uint64_t seed = (uint64_t)c.node.getInt("seed", 0);
  if (c.present(3)) seed = seed * 0x100000001b3ull ^ (uint64_t)c.in[3]->getI(0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    bool keep = ratio == 0 || uniform(seed, (uint64_t)i) >= ratio;
    c.out[0].setF(i, keep ? x.getF(i) / (1 - ratio) : 0.0);
    if (c.out.size() > 1) c.out[1].setI(i, keep);
  }
  return Error::success();
}

namespace {

/// Shared body of the two losses: `logp(n, cls, rest)` gives the log probability; writes the
/// loss (reduced or not) to `out`, with the class weights `w` (null: none).
template <typename LogP>
Error lossBody(EvalCtx& c, const std::vector<int64_t>& scoreShape, const Tensor* w, Tensor& out, LogP logp) {
  const Tensor& target = *c.in[1];
  int64_t N = scoreShape[0], C = scoreShape[1], inner = target.numel() / std::max<int64_t>(N, 1);
  if (target.numel() * C != checkedNumel(scoreShape).value() || (target.rank() > 0 && target.shape[0] != N))
    return c.fail("target shape does not match the scores [N, C, ...] without C");
  if (w && w->numel() != C) return c.fail("weights must have C = " + std::to_string(C) + " elements");
  bool hasIgnore = c.node.has("ignore_index");
  int64_t ignore = c.node.getInt("ignore_index", 0);
  std::string red = c.node.getString("reduction", "mean");
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t t = target.getI(n * inner + i);
      double loss = 0, wt = 0;
      if (!(hasIgnore && t == ignore)) {
        if (t < 0 || t >= C) return c.fail("target " + std::to_string(t) + " is out of range [0, " + std::to_string(C) + ")");
        wt = w ? w->getF(t) : 1.0;
        loss = -logp(n, t, i) * wt;
      }
      if (red == "none") out.setF(n * inner + i, loss);
      sum += loss;
      wsum += wt;
    }
  if (red == "sum") out.setF(0, sum);
  if (red == "mean") out.setF(0, sum / wsum);
  return Error::success();
}

} // namespace

Error sceLoss(EvalCtx& c, const Tensor* w, Tensor& out, Tensor* logProb) {
  const Tensor& x = *c.in[0];
  int64_t N = x.shape[0], C = x.shape[1], inner = x.numel() / std::max<int64_t>(N * C, 1);
  std::vector<double> lp(x.numel());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < C; ++k) mx = std::max(mx, x.getF((n * C + k) * inner + i));
      for (int64_t k = 0; k < C; ++k) s += std::exp(x.getF((n * C + k) * inner + i) - mx);
      for (int64_t k = 0; k < C; ++k) lp[(n * C + k) * inner + i] = x.getF((n * C + k) * inner + i) - mx - std::log(s);
    }
  if (logProb)
    for (int64_t i = 0; i < x.numel(); ++i) logProb->setF(i, lp[i]);
  return lossBody(c, x.shape, w, out, [&](int64_t n, int64_t t, int64_t i) { return lp[(n * C + t) * inner + i]; });
}

Error evalSceLoss(EvalCtx& c) { return sceLoss(c, c.present(2) ? c.in[2] : nullptr, c.out[0], c.out.size() > 1 ? &c.out[1] : nullptr); }

Error evalNllLoss(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t N = x.shape[0], C = x.shape[1], inner = x.numel() / std::max<int64_t>(N * C, 1);
  return lossBody(c, x.shape, c.present(2) ? c.in[2] : nullptr, c.out[0], [&](int64_t n, int64_t t, int64_t i) { return x.getF((n * C + t) * inner + i); });
}

} // namespace sgc::ir
