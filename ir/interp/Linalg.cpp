// Interpreter kernels of MatMul, Gemm, convolution and pooling, with float64
// accumulation.
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {

Error evalMatMul(EvalCtx& c) {
  const Tensor &a = *c.in[0], &b = *c.in[1];
  Tensor& y = c.out[0];
  if (!isFloat(a.dtype) && !isInteger(a.dtype)) return c.fail("operands must be numbers");
  std::vector<int64_t> sa = a.shape, sb = b.shape;
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  std::vector<int64_t> batch(y.shape.begin(), y.shape.end() - (a.rank() > 1) - (b.rank() > 1));
  std::vector<int64_t> batchA(sa.begin(), sa.end() - 2), batchB(sb.begin(), sb.end() - 2);
  std::vector<double> av = a.toF64(), bv = b.toF64(), acc(m * n);
  int64_t outBase = 0;
  auto body = [&](const std::vector<int64_t>& bi) {
    int64_t offA = broadcastOffset(bi, batchA) * m * k, offB = broadcastOffset(bi, batchB) * k * n;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        double x = av[offA + i * k + p];
        const double* row = &bv[offB + p * n];
        for (int64_t j = 0; j < n; ++j) acc[i * n + j] += x * row[j];
      }
    for (int64_t i = 0; i < m * n; ++i) y.setF(outBase + i, acc[i]);
    outBase += m * n;
  };
  if (batch.empty()) body({});
  else forEachIndex(batch, body);
  return Error::success();
}

Error evalGemm(EvalCtx& c) {
  const Tensor &a = *c.in[0], &b = *c.in[1];
  Tensor& y = c.out[0];
  bool ta = c.node.getInt("transA", 0), tb = c.node.getInt("transB", 0);
  double alpha = c.node.getFloat("alpha", 1), beta = c.node.getFloat("beta", 1);
  int64_t m = y.shape[0], n = y.shape[1], k = ta ? a.shape[0] : a.shape[1];
  std::vector<double> av = a.toF64(), bv = b.toF64();
  std::vector<int64_t> offC;
  if (c.present(2)) offC = broadcastOffsets(y.shape, c.in[2]->shape);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += av[ta ? p * m + i : i * k + p] * bv[tb ? j * k + p : p * n + j];
      double r = alpha * s + (c.present(2) ? beta * c.in[2]->getF(offC[i * n + j]) : 0.0);
      y.setF(i * n + j, r);
    }
  return Error::success();
}

namespace {
/// Spatial sizes (dims 2..) of a static shape.
std::vector<int64_t> spatial(const std::vector<int64_t>& s) { return {s.begin() + 2, s.end()}; }

} // namespace

Error evalConv(EvalCtx& c) {
  const Tensor &x = *c.in[0], &wt = *c.in[1];
  Tensor& y = c.out[0];
  int64_t N = x.shape[0], C = x.shape[1], M = wt.shape[0], group = c.node.getInt("group", 1);
  int64_t cPerG = C / group, mPerG = M / group;
  std::vector<int64_t> in = spatial(x.shape), ks = spatial(wt.shape), outS = spatial(y.shape);
  auto w = windowGeometry(*c.shapes, in, ks);
  if (!w) return w.takeError();
  int64_t inPlane = checkedNumel(in).value(), kPlane = checkedNumel(ks).value(), outPlane = checkedNumel(outS).value();
  std::vector<double> xv = x.toF64(), wv = wt.toF64();
  int64_t oi = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      int64_t g = m / mPerG;
      double bias = c.present(2) ? c.in[2]->getF(m) : 0.0;
      forEachIndex(outS, [&](const std::vector<int64_t>& o) {
        double s = bias;
        for (int64_t ci = 0; ci < cPerG; ++ci) {
          int64_t xBase = (n * C + g * cPerG + ci) * inPlane, wBase = (m * cPerG + ci) * kPlane;
          forWindow(*w, in, o, [&](int64_t off, const std::vector<int64_t>& k) {
            int64_t kOff = 0;
            for (size_t d = 0; d < k.size(); ++d) kOff = kOff * ks[d] + k[d];
            s += xv[xBase + off] * wv[wBase + kOff];
          });
        }
        y.setF(oi++, s);
      });
    }
  (void)outPlane;
  return Error::success();
}

int64_t paddedWindowCount(const Window& w, const std::vector<int64_t>& in, const std::vector<int64_t>& o) {
  // Padded positions count; positions beyond the padding (ceil_mode) do not.
  int64_t count = 1;
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t start = o[d] * w.strides[d] - w.padBegin[d];
    int64_t end = std::min(start + (w.kernel[d] - 1) * w.dilations[d] + 1, in[d] + w.padEnd[d]);
    count *= (end - start + w.dilations[d] - 1) / w.dilations[d];
  }
  return count;
}

Error evalPool(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  Tensor& y = c.out[0];
  bool isMax = c.node.op == Op::MaxPool;
  std::vector<int64_t> in = spatial(x.shape), outS = spatial(y.shape);
  auto w = windowGeometry(*c.shapes, in, c.node.getInts("kernel_shape"));
  if (!w) return w.takeError();
  bool countPad = c.node.getInt("count_include_pad", 0);
  bool colMajor = c.node.getInt("storage_order", 0);
  int64_t planes = x.shape[0] * x.shape[1], inPlane = checkedNumel(in).value();
  std::vector<double> xv = x.toF64();
  int64_t oi = 0;
  for (int64_t p = 0; p < planes; ++p)
    forEachIndex(outS, [&](const std::vector<int64_t>& o) {
      double best = -INFINITY, sum = 0;
      int64_t count = 0, bestOff = -1;
      forWindow(*w, in, o, [&](int64_t off, const std::vector<int64_t>&) {
        double v = xv[p * inPlane + off];
        if (v > best || bestOff < 0) best = v, bestOff = off;
        sum += v;
        ++count;
      });
      if (!isMax && countPad) count = paddedWindowCount(*w, in, o);
      y.setF(oi, isMax ? best : (count ? sum / (double)count : 0.0));
      if (c.out.size() > 1) {
        int64_t idx = bestOff;
        if (colMajor && bestOff >= 0) { // index in column-major order of the spatial dims
          int64_t rem = bestOff, colIdx = 0, mul = 1;
          std::vector<int64_t> pos(in.size());
          for (size_t d = in.size(); d-- > 0;) pos[d] = rem % in[d], rem /= in[d];
          for (size_t d = 0; d < in.size(); ++d) colIdx += pos[d] * mul, mul *= in[d];
          idx = colIdx;
        }
        c.out[1].setI(oi, p * inPlane + idx);
      }
      ++oi;
    });
  return Error::success();
}

Error evalGlobalPool(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t planes = x.shape[0] * x.shape[1], plane = x.numel() / std::max<int64_t>(planes, 1);
  bool isMax = c.node.op == Op::GlobalMaxPool;
  for (int64_t p = 0; p < planes; ++p) {
    double acc = isMax ? -INFINITY : 0;
    for (int64_t i = 0; i < plane; ++i) {
      double v = x.getF(p * plane + i);
      acc = isMax ? std::max(acc, v) : acc + v;
    }
    c.out[0].setF(p, isMax ? acc : acc / (double)plane);
  }
  return Error::success();
}

} // namespace sgc::ir
