// Interpreter kernels of the paged key/value cache (KvCacheWrite,
// PagedAttention), in float64: the reference the generated kernels are
// tested against. Out-of-range sequences, positions or pages are errors.
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {
namespace {

/// The cache's geometry and the page lookup of one token.
struct Pages {
  int64_t blocks, page, heads, dim, seqs, maxBlocks;
  const Tensor &tables, &seq, &pos;

  Pages(const EvalCtx& c, const Tensor& pool, size_t t)
      : blocks(pool.shape[0]), page(pool.shape[2]), heads(pool.shape[3]), dim(pool.shape[4]), seqs(c.in[t]->shape[0]),
        maxBlocks(c.in[t]->shape[1]), tables(*c.in[t]), seq(*c.in[t + 1]), pos(*c.in[t + 2]) {}

  /// Token n's sequence slot (-1: unused), checked.
  Error slot(const EvalCtx& c, int64_t n, int64_t& s) const {
    s = seq.getI(n);
    if (s < -1 || s >= seqs) return c.fail("token " + std::to_string(n) + " names sequence slot " + std::to_string(s) + " of " + std::to_string(seqs));
    int64_t p = pos.getI(n);
    if (s >= 0 && (p < 0 || p >= maxBlocks * page))
      return c.fail("token " + std::to_string(n) + " is at position " + std::to_string(p) + ", outside [0, " + std::to_string(maxBlocks * page) + ")");
    return Error::success();
  }
  /// The flat offset of element (kv, h, 0) of position p of sequence slot s in the pool.
  Error at(const EvalCtx& c, int64_t s, int64_t p, int64_t kv, int64_t h, int64_t& off) const {
    int64_t b = tables.getI(s * maxBlocks + p / page);
    if (b < 0 || b >= blocks) return c.fail("sequence slot " + std::to_string(s) + " maps position " + std::to_string(p) + " to page " + std::to_string(b) + " of " + std::to_string(blocks));
    off = (((b * 2 + kv) * page + p % page) * heads + h) * dim;
    return Error::success();
  }
};

} // namespace

Error evalKvCacheWrite(EvalCtx& c) {
  Pages g(c, *c.in[0], 3);
  c.out[0] = *c.in[0];
  for (int64_t n = 0; n < c.in[1]->shape[0]; ++n) {
    int64_t s, off;
    if (Error e = g.slot(c, n, s)) return e;
    if (s < 0) continue;
    for (int64_t kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < g.heads; ++h) {
        if (Error e = g.at(c, s, g.pos.getI(n), kv, h, off)) return e;
        for (int64_t e = 0; e < g.dim; ++e) copyElement(c.out[0], off + e, *c.in[1 + kv], (n * g.heads + h) * g.dim + e);
      }
  }
  return Error::success();
}

Error evalPagedAttention(EvalCtx& c) {
  Pages g(c, *c.in[1], 2);
  std::vector<double> q = c.in[0]->toF64(), pool = c.in[1]->toF64(), w, o(g.dim);
  double scale = c.node.getFloat("scale", 1.0);
  for (int64_t n = 0; n < c.in[0]->shape[0]; ++n) {
    int64_t s;
    if (Error e = g.slot(c, n, s)) return e;
    if (s < 0) continue; // the result stays zero
    int64_t len = g.pos.getI(n) + 1;
    for (int64_t h = 0; h < g.heads; ++h) {
      const double* qh = &q[(n * g.heads + h) * g.dim];
      w.assign(len, 0.0);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        int64_t off;
        if (Error e = g.at(c, s, j, 0, h, off)) return e;
        for (int64_t e = 0; e < g.dim; ++e) w[j] += qh[e] * pool[off + e];
        mx = std::max(mx, w[j] *= scale);
      }
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < len; ++j) {
        int64_t off;
        if (Error e = g.at(c, s, j, 1, h, off)) return e;
        double p = std::exp(w[j] - mx);
        sum += p;
        for (int64_t e = 0; e < g.dim; ++e) o[e] += p * pool[off + e];
      }
      for (int64_t e = 0; e < g.dim; ++e) c.out[0].setF((n * g.heads + h) * g.dim + e, o[e] / sum);
    }
  }
  return Error::success();
}

} // namespace sgc::ir
