// Interpreter kernels of FusedAttention and its gradient, in float64: the
// reference the generated kernels are tested against (and which is itself
// tested against the matmul, mask, softmax, matmul decomposition).
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {
namespace {

/// The geometry of one attention node: `heads` independent problems (the product of the
/// leading dims) of tq queries and tk keys of width d, values of width dv; with layout "bthd"
/// the operands are [..., T, H, D] (the H heads of a position side by side) instead of
/// [..., H, T, D]; with "bt3hd" q, k and v are one tensor [..., T, 3, H, D] (operand 0, 1, 2
/// of a position side by side, each of H heads), the result [..., T, H, D]. The result (and the
/// row statistics) are laid out as the operands, or with result_layout "bthd" [..., T, H, D]
/// from "bhtd" operands.
struct Geometry {
  int64_t heads, tq, tk, d, dv, h = 1, group = 1; ///< group: query heads per key/value head (grouped-query attention)
  double scale;
  bool causal, bthd, packed, resultBthd;

  Geometry(const EvalCtx& c) {
    const auto &q = c.in[0]->shape, &v = c.in[2]->shape;
    std::string layout = c.node.getString("layout", "bhtd");
    packed = layout == "bt3hd";
    bthd = packed || layout == "bthd";
    resultBthd = bthd || c.node.getString("result_layout", "") == "bthd";
    size_t t = q.size() - (packed ? 4 : bthd ? 3 : 2);
    tq = q[t], d = q.back(), tk = v[t], dv = v.back();
    if (bthd) h = q[q.size() - 2];
    else if (resultBthd) h = q[q.size() - 3];
    heads = tq > 0 && d > 0 ? c.in[0]->numel() / (tq * d * (packed ? 3 : 1)) : 0;
    int64_t kvHeads = tk > 0 && d > 0 ? c.in[1]->numel() / (tk * d) : 0;
    if (!bthd && kvHeads > 0) group = heads / kvHeads;
    scale = c.node.getFloat("scale", 1.0);
    causal = c.node.getInt("causal", 0) != 0;
  }
  /// The flat row of position i of problem p in a tensor of t positions, heads after positions or before.
  int64_t rowIn(bool headsAfter, int64_t p, int64_t i, int64_t t) const { return headsAfter ? ((p / h) * t + i) * h + p % h : p * t + i; }
  /// The flat row (of the result seen as [rows, width]) of position i of problem p.
  int64_t row(int64_t p, int64_t i, int64_t t) const { return rowIn(resultBthd, p, i, t); }
  /// The row of operand `which` (0 q, 1 k, 2 v) of position i of problem p (keys and values
  /// grouped: the group's).
  int64_t operand(int which, int64_t p, int64_t i, int64_t t) const {
    if (which > 0 && group > 1) return (p / group) * t + i;
    return packed ? (((p / h) * t + i) * 3 + which) * h + p % h : rowIn(bthd, p, i, t);
  }
  /// The row of the gradient of operand `which` (dk and dv are per query head when grouped).
  int64_t gradient(int which, int64_t p, int64_t i, int64_t t) const { return group > 1 ? rowIn(bthd, p, i, t) : operand(which, p, i, t); }
  /// Keys [0, keys(i)) are visible to query i.
  int64_t keys(int64_t i) const { return causal ? std::min(i + 1, tk) : tk; }
};

double dot(const std::vector<double>& a, int64_t ai, const std::vector<double>& b, int64_t bi, int64_t n) {
  double s = 0;
  for (int64_t e = 0; e < n; ++e) s += a[ai + e] * b[bi + e];
  return s;
}

} // namespace

Error evalAttention(EvalCtx& c) {
  Geometry g(c);
  std::vector<double> q = c.in[0]->toF64(), k = c.in[1]->toF64(), v = c.in[2]->toF64(), s(g.tk), o(g.dv);
  for (int64_t h = 0; h < g.heads; ++h)
    for (int64_t i = 0; i < g.tq; ++i) {
      int64_t row = g.row(h, i, g.tq), qrow = g.operand(0, h, i, g.tq), n = g.keys(i);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j] = g.scale * dot(q, qrow * g.d, k, g.operand(1, h, j, g.tk) * g.d, g.d));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < n; ++j) {
        double p = std::exp(s[j] - mx);
        sum += p;
        for (int64_t e = 0; e < g.dv; ++e) o[e] += p * v[g.operand(2, h, j, g.tk) * g.dv + e];
      }
      for (int64_t e = 0; e < g.dv; ++e) c.out[0].setF(row * g.dv + e, n ? o[e] / sum : 0.0);
      c.out[1].setF(row, mx + std::log(sum));
    }
  return Error::success();
}

// With P = softmax(scale q k^T) and dP = dy v^T: dS = P (dP - delta), delta = rowsum(dy y);
// dq = scale dS k, dk = scale dS^T q, dv = P^T dy.
Error evalAttentionGrad(EvalCtx& c) {
  Geometry g(c);
  std::vector<double> q = c.in[0]->toF64(), k = c.in[1]->toF64(), v = c.in[2]->toF64(), y = c.in[3]->toF64(),
                      lse = c.in[4]->toF64(), dy = c.in[5]->toF64();
  std::vector<double> dq(q.size()), dk(k.size() * g.group), dv(v.size() * g.group);
  for (int64_t h = 0; h < g.heads; ++h)
    for (int64_t i = 0; i < g.tq; ++i) {
      int64_t row = g.row(h, i, g.tq), qrow = g.operand(0, h, i, g.tq);
      double delta = dot(dy, row * g.dv, y, row * g.dv, g.dv);
      c.out[3].setF(row, delta);
      for (int64_t j = 0; j < g.keys(i); ++j) {
        int64_t key = g.operand(1, h, j, g.tk), value = g.operand(2, h, j, g.tk);
        int64_t dkey = g.gradient(1, h, j, g.tk), dvalue = g.gradient(2, h, j, g.tk);
        double p = std::exp(g.scale * dot(q, qrow * g.d, k, key * g.d, g.d) - lse[row]);
        double ds = p * (dot(dy, row * g.dv, v, value * g.dv, g.dv) - delta);
        for (int64_t e = 0; e < g.d; ++e) {
          dq[qrow * g.d + e] += g.scale * ds * k[key * g.d + e];
          dk[dkey * g.d + e] += g.scale * ds * q[qrow * g.d + e];
        }
        for (int64_t e = 0; e < g.dv; ++e) dv[dvalue * g.dv + e] += p * dy[row * g.dv + e];
      }
    }
  if (g.packed) { // one result: dq, dk and dv each fill their own third of it
    for (size_t i = 0; i < dq.size(); ++i) c.out[0].setF((int64_t)i, dq[i] + dk[i] + dv[i]);
    return Error::success();
  }
  for (int out = 0; out < 3; ++out) {
    const std::vector<double>& r = out == 0 ? dq : out == 1 ? dk : dv;
    for (size_t i = 0; i < r.size(); ++i) c.out[out].setF((int64_t)i, r[i]);
  }
  return Error::success();
}

} // namespace sgc::ir
