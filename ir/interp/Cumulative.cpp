// Interpreter kernels of CumSum and CumProd (running sums and products along
// an axis, inclusive or exclusive, forward or reversed) and of CumProd's
// gradient, computed without dividing by x (exact where x holds zeros).
#include "ir/interp/Kernels.h"

namespace sgc::ir {
namespace {

/// Rows of a cumulative op: `outer` x `inner` of them, `n` elements apart by `inner`; position
/// t of the scan order (reversed when `reverse`) is element at(row, t).
struct Scan {
  int64_t outer = 1, n = 1, inner = 1;
  bool reverse = false, exclusive = false;
  int64_t at(int64_t row, int64_t t) const {
    int64_t p = reverse ? n - 1 - t : t;
    return (row / inner * n + p) * inner + row % inner;
  }
};

Expected<Scan> scanOf(const EvalCtx& c, const std::vector<int64_t>& shape, const Tensor& axisT) {
  if (axisT.numel() != 1) return c.fail("axis must be a scalar");
  int64_t r = (int64_t)shape.size(), axis = axisT.getI(0);
  if (axis < -r || axis >= r) return c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  Scan s;
  for (int64_t d = 0; d < r; ++d) (d < axis ? s.outer : d == axis ? s.n : s.inner) *= shape[d];
  s.reverse = c.node.getInt("reverse", 0), s.exclusive = c.node.getInt("exclusive", 0);
  return s;
}

} // namespace

Error evalCumulative(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  auto s = scanOf(c, x.shape, *c.in[1]);
  if (!s) return s.takeError();
  bool prod = c.node.op == Op::CumProd, fl = isFloat(x.dtype);
  for (int64_t row = 0; row < s->outer * s->inner; ++row) {
    double accF = prod ? 1 : 0;
    int64_t accI = prod ? 1 : 0;
    for (int64_t t = 0; t < s->n; ++t) {
      int64_t i = s->at(row, t);
      double vf = fl ? x.getF(i) : 0;
      int64_t vi = fl ? 0 : x.getI(i);
      if (!s->exclusive) prod ? (accF *= vf, accI *= vi) : (accF += vf, accI += vi);
      fl ? c.out[0].setF(i, accF) : c.out[0].setI(i, accI);
      if (s->exclusive) prod ? (accF *= vf, accI *= vi) : (accF += vf, accI += vi);
    }
  }
  return Error::success();
}

/// dx at scan position s: the sum over the outputs t whose product includes x_s of dy_t times
/// the product of its other factors.
Error evalCumProdGrad(EvalCtx& c) {
  const Tensor &x = *c.in[0], &dy = *c.in[1];
  if (x.shape != dy.shape) return c.fail("x and dy must have one shape");
  auto sc = scanOf(c, x.shape, *c.in[2]);
  if (!sc) return sc.takeError();
  for (int64_t row = 0; row < sc->outer * sc->inner; ++row)
    for (int64_t s = 0; s < sc->n; ++s) {
      double p = 1, acc = 0;
      for (int64_t u = 0; u < s; ++u) p *= x.getF(sc->at(row, u));
      for (int64_t t = sc->exclusive ? s + 1 : s; t < sc->n; ++t) {
        acc += dy.getF(sc->at(row, t)) * p;
        int64_t next = sc->exclusive ? t : t + 1;
        if (next < sc->n) p *= x.getF(sc->at(row, next));
      }
      c.out[0].setF(sc->at(row, s), acc);
    }
  return Error::success();
}

} // namespace sgc::ir
