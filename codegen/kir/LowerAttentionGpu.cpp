// The GPU form of FusedAttention and its gradient in bf16: flash attention on
// the tensor cores (mma.m16n8k16, see kir::mmaBf16). A warp owns 32 query rows
// (forward), 16 (dq) or 16 key rows (dk/dv) and walks the other side in blocks:
//
//   forward  S = Q K^T, online softmax, O += P V           (keeps O, max, sum)
//   dq       S = Q K^T, P from the log-sum-exp, dP = dO V^T,
//            dS = P (dP - delta), dQ += dS K
//   dk, dv   S^T = K Q^T, P^T from the log-sum-exp, dV += P^T dO,
//            dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q
//
// Operand fragments are loaded straight from global memory, 16 bytes a lane
// (Lane::dim and Lane::spread permute the dims so that a lane's elements are
// neighbours; the warps of a block walk the same keys, which stay in L1); a
// product's f32 result fragment is, pair for pair, the next product's bf16
// operand fragment, so P and dS never leave registers. Only the blocks the
// causal diagonal crosses are masked. Nothing of size [T, T] is stored. The
// CPU keeps the scalar kernels of LowerAttention.cpp, which are the reference.
#include "codegen/kir/AttentionGeometry.h"
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <array>
#include <cmath>
#include <functional>

namespace sgc::kir {
namespace {
using B = Builder;
using Frag = std::array<int, 4>; ///< an m16n8 f32 result fragment: four locals
using RowOf = std::function<ExprRef(const ExprRef&)>;

/// One lane's coordinates within its warp's 16-row tile: g = lane / 4 picks rows g and g + 8;
/// t = lane % 4 picks columns 2t, 2t + 1 (and 2t + 8, 2t + 9 of an operand).
struct Lane {
  ExprRef warp, g, t;
  explicit Lane(const ExprRef& iv) {
    ExprRef lane = binary(KOp::IMod, iv, B::i(32));
    warp = binary(KOp::IDiv, iv, B::i(32));
    g = binary(KOp::IDiv, lane, B::i(4));
    t = binary(KOp::IMod, lane, B::i(4));
  }
  /// Row of result element i (0..3) of a fragment: g or g + 8.
  ExprRef row(int i) const { return i < 2 ? g : B::add(g, B::i(8)); }
  /// Column of result element i within its 8 columns: 2t or 2t + 1.
  ExprRef col(int i) const { return B::add(B::mul(t, B::i(2)), B::i(i & 1)); }
  /// Column (of A) or row (of B) of operand element i within its 16: 2t, 2t+1, 2t+8, 2t+9.
  ExprRef k(int i) const { return B::add(B::mul(t, B::i(2)), B::i((i & 1) + (i >= 2 ? 8 : 0))); }

  /// Where a contracted dim's index goes in memory. A product's sum over its k indices may
  /// take them in any order, as long as both operands agree: k-step s's indices 2t, 2t+1, 2t+8,
  /// 2t+9 (`pair` the +1, `high` the +8) map to 4 neighbouring elements, and those of k-steps
  /// s and s+1 to 8, so that a lane reads its operands of two k-steps from one 16-byte load.
  /// `width` is the dim's size (a multiple of 16; 4 elements per lane when not of 32).
  ExprRef dim(int64_t s, int pair, int high, int64_t width) const {
    int64_t per = width % 32 == 0 ? 8 : 4, steps = per / 4; // elements per lane per chunk; k-steps per chunk
    return B::add(B::i((s / steps) * 4 * per + 4 * (s % steps) + pair + 2 * high), B::mul(t, B::i(per)));
  }

  /// The index of column g of n-tile n of a product's result, in a dim of `width` (the other
  /// operand's columns, also in any order): lane g's columns of all n-tiles are neighbours, so
  /// that it reads its B operands of all of them in one load.
  static ExprRef spread(int64_t n, const ExprRef& g, int64_t width) { return B::add(B::mul(g, B::i(width / 8)), B::i(n)); }
};

struct Geometry : AttentionGeometry {
  using AttentionGeometry::AttentionGeometry;

  /// The flat rows (of an operand of `len` positions seen as [rows, width]) of problem p's
  /// positions pos0, pos0 + 1, ...
  RowOf rows(const ExprRef& p, const ExprRef& pos0, int64_t len) const {
    return [this, p, pos0, len](const ExprRef& r) {
      ExprRef pos = B::add(pos0, r);
      if (!bthd) return B::add(B::mul(p, B::i(len)), pos);
      return B::add(B::mul(B::add(B::mul(binary(KOp::IDiv, p, B::i(h)), B::i(len)), pos), B::i(h)), binary(KOp::IMod, p, B::i(h)));
    };
  }

  /// Whether the tensor-core kernels apply: bf16 operands, every size a multiple of 16.
  bool fits() const {
    for (size_t i = 0; i < 3; ++i)
      if (n.input(i)->type.dtype != ir::DType::BF16) return false;
    return heads > 0 && tq % 16 == 0 && tk % 16 == 0 && d % 16 == 0 && dv % 16 == 0 && (!causal || tq == tk);
  }
};

ExprRef f(double v) { return B::c(v, Scalar::F32); }

ExprRef lf(int id) { return local(id, Scalar::F32); }

/// The largest of 64, 32, 16 that divides n.
int64_t blockFor(int64_t n, int64_t most) {
  int64_t b = most;
  while (n % b) b /= 2;
  return b;
}

class Writer {
public:
  Writer(const std::string& name, const Geometry& geo) : b(name), a(geo) {}

  B b;
  const Geometry& a;
  std::vector<StmtRef> body;

  /// `count` result fragments, zeroed.
  std::vector<Frag> zeros(int64_t count, std::vector<StmtRef>& out) {
    std::vector<Frag> fs(count);
    for (Frag& fr : fs)
      for (int& id : fr) {
        id = b.newLocal();
        out.push_back(let(id, f(0)));
      }
    return fs;
  }

  /// The A operand fragments of 16 rows (`row` maps 0..15 to flat rows) of `m` (row-major,
  /// `width` wide, contracted: Lane::dim), one per 16 columns, held in locals.
  std::vector<std::array<int, 8>> operandRows(const Lane& ln, const ir::Value* m, const RowOf& row, int64_t width) {
    std::vector<std::array<int, 8>> fs(width / 16);
    for (int64_t s = 0; s < width / 16; ++s)
      for (int i = 0; i < 8; ++i) {
        ExprRef r = row(i % 4 < 2 ? ln.g : B::add(ln.g, B::i(8)));
        fs[s][i] = b.newLocal();
        body.push_back(let(fs[s][i], b.ld(m, B::add(B::mul(r, B::i(width)), ln.dim(s, i & 1, i >= 4, width)))));
      }
    return fs;
  }

  static std::vector<ExprRef> held(const std::array<int, 8>& a) {
    std::vector<ExprRef> v;
    for (int id : a) v.push_back(lf(id));
    return v;
  }

  /// The A operand for 16 columns made of two neighbouring result fragments (flash attention's
  /// register reuse: P and dS go from one product to the next without leaving the warp).
  static std::vector<ExprRef> fromResults(const Frag& left, const Frag& right) {
    return {lf(left[0]), lf(left[1]), lf(left[2]), lf(left[3]), lf(right[0]), lf(right[1]), lf(right[2]), lf(right[3])};
  }

  /// B[k][n] = m[row(n)][k] for k-step s, n < 8: the transpose of 8 rows of row-major `m`, k
  /// contracted (Lane::dim): K^T in S = Q K^T. `row` maps a row within the tile to its flat row.
  std::vector<ExprRef> contracted(const Lane& ln, const ir::Value* m, const RowOf& row, int64_t s, int64_t width) {
    std::vector<ExprRef> v;
    for (int i = 0; i < 4; ++i) v.push_back(b.ld(m, B::add(B::mul(row(ln.g), B::i(width)), ln.dim(s, i & 1, i >= 2, width))));
    return v;
  }

  /// acc[n] += A M_n^T for every n-tile n of `acc`: A the held fragments (one per 16 of the
  /// contracted `width`), M_n the 8 rows tileRows(n) of `m` (S = Q K^T, dP = dO V^T, ...).
  void timesRowsOf(std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& acc, const std::vector<std::array<int, 8>>& a,
                   const ir::Value* m, int64_t width, const std::function<RowOf(int64_t)>& tileRows) {
    for (size_t n = 0; n < acc.size(); ++n) {
      RowOf rows = tileRows((int64_t)n);
      for (int64_t e = 0; e < width / 16; ++e) step.push_back(mmaBf16({acc[n].begin(), acc[n].end()}, held(a[e]), contracted(ln, m, rows, e, width)));
    }
  }

  /// acc[n] += R M for every n-tile n of `acc`: R the result fragments `r` (P or dS; two of them
  /// per k-step of 16), M the 16 rows stepRows(e) of `m` for k-step e, its columns spread.
  void resultsTimesRows(std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& acc, const std::vector<Frag>& r,
                        const ir::Value* m, int64_t width, const std::function<RowOf(int64_t)>& stepRows) {
    for (size_t e = 0; e < r.size() / 2; ++e) {
      RowOf rows = stepRows((int64_t)e);
      for (size_t n = 0; n < acc.size(); ++n)
        step.push_back(mmaBf16({acc[n].begin(), acc[n].end()}, fromResults(r[2 * e], r[2 * e + 1]), spreadRows(ln, m, rows, (int64_t)n, width)));
    }
  }

  /// B[k][n] = m[row(k)][spread(n-tile, n)], k < 16: 16 rows of row-major `m` as they are, their
  /// columns spread (Lane::spread): V in O = P V.
  std::vector<ExprRef> spreadRows(const Lane& ln, const ir::Value* m, const RowOf& row, int64_t tile, int64_t width) {
    std::vector<ExprRef> v;
    for (int i = 0; i < 4; ++i) v.push_back(b.ld(m, B::add(B::mul(row(ln.k(i)), B::i(width)), Lane::spread(tile, ln.g, width))));
    return v;
  }

  /// Blocks start, start + 1, ... (`count` of them, at most `extent`) of a walk, each one's
  /// statements from step(block).
  StmtRef walk(int64_t extent, const ExprRef& start, const ExprRef& count, const std::function<std::vector<StmtRef>(ExprRef)>& step) {
    int j = b.newLoopVar();
    return loopUpTo(j, extent, count, step(B::add(start, loopVar(j))));
  }

  /// A warp's walk over blocks of kb keys for its `rows` queries from q0: without a causal mask
  /// all of them; with it the blocks wholly below the diagonal, then those the diagonal crosses
  /// (masked), so that only those pay for the mask.
  void causalWalk(const ExprRef& q0, int64_t kb, const std::function<std::vector<StmtRef>(ExprRef, bool)>& block, int64_t rows = 16) {
    int64_t extent = a.tk / kb;
    auto unmasked = [&](ExprRef jb) { return block(std::move(jb), false); };
    if (!a.causal) {
      body.push_back(walk(extent, B::i(0), B::i(extent), unmasked));
      return;
    }
    ExprRef full = binary(KOp::IDiv, B::add(q0, B::i(1)), B::i(kb)), all = binary(KOp::IDiv, B::add(q0, B::i(rows + kb - 1)), B::i(kb));
    body.push_back(walk(extent, B::i(0), full, unmasked));
    body.push_back(walk(extent, full, B::sub(all, full), [&](ExprRef jb) { return block(std::move(jb), true); }));
  }

  /// Blocks of 4 warps, 2 of them on an SM at once (up to 255 registers a thread: 3 blocks at
  /// 168 spilled to local memory, through the L1 the fragment loads are bound by).
  Kernel finish(int iv, int64_t warps) {
    Kernel k = b.finish(loop(iv, warps * 32, true, std::move(body)));
    k.gpuOnly = true;
    k.threads = 128;
    k.minBlocks = 2;
    return k;
  }
};

/// The column of element i of result fragment `tile` (8 columns each), counted from col0.
ExprRef colOf(const Lane& ln, const ExprRef& col0, int64_t tile, int i) { return B::add(col0, B::add(B::i(tile * 8), ln.col(i))); }

/// max or sum of a row's values held by one lane (elements i and i + 1 of every fragment, i = 0
/// or 2), then over the four lanes holding that row.
ExprRef rowReduce(KOp op, const std::vector<Frag>& fs, int i, ExprRef init) {
  ExprRef r = std::move(init);
  for (const Frag& fr : fs) r = binary(op, binary(op, r, lf(fr[i])), lf(fr[i + 1]));
  return warpReduce(op, r, 4);
}

/// Forward: a warp per kForwardTiles x 16 queries, blocks of 32 keys, the online softmax of flash
/// attention. The tiles' products with one key or value fragment are side by side, so that the
/// emitter loads it once for all of them (half the loads per product of one tile a warp).
constexpr int kForwardTiles = 2;

Kernel forward(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *y = a.n.outputs[0], *lse = a.n.outputs[1];
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  const int R = a.tq % (16 * kForwardTiles) == 0 ? kForwardTiles : 1;
  int64_t rowsPerWarp = 16 * R, tiles = a.tq / rowsPerWarp, kb = blockFor(a.tk, 32);
  ExprRef head = binary(KOp::IDiv, ln.warp, B::i(tiles));
  ExprRef q0 = B::mul(B::sub(B::i(tiles - 1), binary(KOp::IMod, ln.warp, B::i(tiles))), B::i(rowsPerWarp)); // the longest walks first
  std::vector<RowOf> qrows;
  std::vector<std::vector<std::array<int, 8>>> qf;
  std::vector<std::vector<Frag>> o;
  std::vector<std::array<int, 2>> m(R), l(R);
  for (int t = 0; t < R; ++t) {
    qrows.push_back(a.rows(head, B::add(q0, B::i(16 * t)), a.tq));
    qf.push_back(w.operandRows(ln, q, qrows[t], a.d));
    o.push_back(w.zeros(a.dv / 8, w.body));
    for (int r = 0; r < 2; ++r) {
      m[t][r] = b.newLocal(), l[t][r] = b.newLocal();
      w.body.push_back(let(m[t][r], f(-INFINITY)));
      w.body.push_back(let(l[t][r], f(0)));
    }
  }
  // One block of kb keys; `masked`: it crosses the causal diagonal.
  auto block = [&](const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<std::vector<Frag>> s;
    for (int t = 0; t < R; ++t) s.push_back(w.zeros(kb / 8, step));
    for (int64_t n = 0; n < kb / 8; ++n) { // S = Q K^T, each key fragment for every tile
      RowOf keys = a.rows(head, B::add(key0, B::i(n * 8)), a.tk);
      for (int64_t e = 0; e < a.d / 16; ++e) {
        std::vector<ExprRef> kfrag = w.contracted(ln, k, keys, e, a.d);
        for (int t = 0; t < R; ++t) step.push_back(mmaBf16({s[t][n].begin(), s[t][n].end()}, Writer::held(qf[t][e]), kfrag));
      }
    }
    for (int t = 0; t < R; ++t) {
      for (int64_t n = 0; n < kb / 8; ++n)
        for (int i = 0; i < 4; ++i) {
          ExprRef scaled = B::mul(lf(s[t][n][i]), f(a.scale));
          if (masked) scaled = select(binary(KOp::Le, colOf(ln, key0, n, i), B::add(B::add(q0, B::i(16 * t)), ln.row(i))), scaled, f(-INFINITY));
          step.push_back(set(s[t][n][i], scaled));
        }
      int mx[2], corr[2];
      for (int r = 0; r < 2; ++r) {
        mx[r] = b.newLocal(), corr[r] = b.newLocal();
        step.push_back(let(mx[r], binary(KOp::Max, lf(m[t][r]), rowReduce(KOp::Max, s[t], 2 * r, f(-INFINITY)))));
        step.push_back(let(corr[r], unary(KOp::Exp, B::sub(lf(m[t][r]), lf(mx[r])))));
      }
      for (int64_t n = 0; n < kb / 8; ++n)
        for (int i = 0; i < 4; ++i) step.push_back(set(s[t][n][i], unary(KOp::Exp, B::sub(lf(s[t][n][i]), lf(mx[i / 2])))));
      for (int r = 0; r < 2; ++r) {
        ExprRef sum = f(0);
        for (const Frag& fr : s[t]) sum = B::add(sum, B::add(lf(fr[2 * r]), lf(fr[2 * r + 1])));
        step.push_back(set(l[t][r], B::add(B::mul(lf(l[t][r]), lf(corr[r])), sum)));
        step.push_back(set(m[t][r], lf(mx[r])));
      }
      for (const Frag& fr : o[t])
        for (int i = 0; i < 4; ++i) step.push_back(set(fr[i], B::mul(lf(fr[i]), lf(corr[i / 2]))));
    }
    for (int64_t e = 0; e < kb / 16; ++e) { // O += P V, each value fragment for every tile
      RowOf values = a.rows(head, B::add(key0, B::i(e * 16)), a.tk);
      for (size_t n = 0; n < o[0].size(); ++n) {
        std::vector<ExprRef> vfrag = w.spreadRows(ln, v, values, (int64_t)n, a.dv);
        for (int t = 0; t < R; ++t)
          step.push_back(mmaBf16({o[t][n].begin(), o[t][n].end()}, Writer::fromResults(s[t][2 * e], s[t][2 * e + 1]), vfrag));
      }
    }
    return step;
  };
  w.causalWalk(q0, kb, block, rowsPerWarp);
  for (int t = 0; t < R; ++t) {
    for (int r = 0; r < 2; ++r) w.body.push_back(set(l[t][r], warpReduce(KOp::Add, lf(l[t][r]), 4)));
    for (int64_t n = 0; n < a.dv / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef row = qrows[t](ln.row(i));
        w.body.push_back(b.st(y, B::add(B::mul(row, B::i(a.dv)), Lane::spread(n, ln.col(i), a.dv)), B::div(lf(o[t][n][i]), lf(l[t][i / 2]))));
      }
    for (int r = 0; r < 2; ++r)
      w.body.push_back(b.st(lse, qrows[t](ln.row(2 * r)), B::add(lf(m[t][r]), unary(KOp::Log, lf(l[t][r])))));
  }
  return w.finish(iv, a.heads * tiles);
}

/// delta = dy . y for every query row: one thread per row.
Kernel delta(const std::string& name, const Geometry& a) {
  const ir::Value *y = a.n.input(3), *dy = a.n.input(5), *out = a.n.outputs[3];
  B b(name);
  int r = b.newLoopVar();
  ExprRef sum = f(0);
  for (int64_t e = 0; e < a.dv; ++e) {
    ExprRef at = B::add(B::mul(loopVar(r), B::i(a.dv)), B::i(e));
    sum = B::add(sum, B::mul(b.ld(dy, at), b.ld(y, at)));
  }
  return b.finish(loop(r, a.heads * a.tq, true, {b.st(out, loopVar(r), sum)}));
}

/// dq: a warp per 16 queries over blocks of kb keys.
Kernel gradQueries(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *lse = a.n.input(4), *dy = a.n.input(5);
  const ir::Value *dq = a.n.outputs[0], *delta = a.n.outputs[3];
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t tiles = a.tq / 16, kb = blockFor(a.tk, 64);
  ExprRef head = binary(KOp::IDiv, ln.warp, B::i(tiles));
  ExprRef q0 = B::mul(B::sub(B::i(tiles - 1), binary(KOp::IMod, ln.warp, B::i(tiles))), B::i(16));
  RowOf qrows = a.rows(head, q0, a.tq);
  auto qf = w.operandRows(ln, q, qrows, a.d);
  auto dyf = w.operandRows(ln, dy, qrows, a.dv);
  int rl[2], rd[2];
  for (int r = 0; r < 2; ++r) {
    rl[r] = b.newLocal(), rd[r] = b.newLocal();
    w.body.push_back(let(rl[r], b.ld(lse, qrows(ln.row(2 * r)))));
    w.body.push_back(let(rd[r], b.ld(delta, qrows(ln.row(2 * r)))));
  }
  auto acc = w.zeros(a.d / 8, w.body);
  auto block = [&](const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    auto keys = [&](int64_t n) { return a.rows(head, B::add(key0, B::i(n * 8)), a.tk); };
    auto s = w.zeros(kb / 8, step);
    auto dp = w.zeros(kb / 8, step);
    w.timesRowsOf(step, ln, s, qf, k, a.d, keys);
    w.timesRowsOf(step, ln, dp, dyf, v, a.dv, keys);
    for (int64_t n = 0; n < kb / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef p = unary(KOp::Exp, B::sub(B::mul(lf(s[n][i]), f(a.scale)), lf(rl[i / 2])));
        if (masked) p = select(binary(KOp::Le, colOf(ln, key0, n, i), B::add(q0, ln.row(i))), p, f(0));
        step.push_back(set(s[n][i], B::mul(p, B::sub(lf(dp[n][i]), lf(rd[i / 2]))))); // dS
      }
    auto sixteen = [&](int64_t e) { return a.rows(head, B::add(key0, B::i(e * 16)), a.tk); };
    w.resultsTimesRows(step, ln, acc, s, k, a.d, sixteen);
    return step;
  };
  w.causalWalk(q0, kb, block);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dq, B::add(B::mul(qrows(ln.row(i)), B::i(a.d)), Lane::spread(n, ln.col(i), a.d)), B::mul(lf(acc[n][i]), f(a.scale))));
  return w.finish(iv, a.heads * tiles);
}

/// dk and dv: a warp per 16 keys over blocks of 16 queries (from the first that sees them).
Kernel gradKeysValues(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *lse = a.n.input(4), *dy = a.n.input(5);
  const ir::Value *dk = a.n.outputs[1], *dvOut = a.n.outputs[2], *delta = a.n.outputs[3];
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t tiles = a.tk / 16, qb = 16;
  ExprRef head = binary(KOp::IDiv, ln.warp, B::i(tiles));
  ExprRef k0 = B::mul(binary(KOp::IMod, ln.warp, B::i(tiles)), B::i(16)); // the longest walks (first keys) first
  RowOf krows = a.rows(head, k0, a.tk);
  auto kf = w.operandRows(ln, k, krows, a.d);
  auto vf = w.operandRows(ln, v, krows, a.dv);
  auto dkAcc = w.zeros(a.d / 8, w.body), dvAcc = w.zeros(a.dv / 8, w.body);
  ExprRef first = a.causal ? k0 : B::i(0); // causal: the queries before the warp's keys see none of them
  // One block of 16 queries; `masked`: the causal diagonal's (the walk's first).
  auto block = [&](const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef qpos0 = B::add(first, B::mul(jb, B::i(qb)));
    RowOf rows = a.rows(head, qpos0, a.tq);
    auto queries = [&](int64_t n) { return a.rows(head, B::add(qpos0, B::i(n * 8)), a.tq); };
    auto s = w.zeros(qb / 8, step);
    auto dp = w.zeros(qb / 8, step);
    w.timesRowsOf(step, ln, s, kf, q, a.d, queries);
    w.timesRowsOf(step, ln, dp, vf, dy, a.dv, queries);
    for (int64_t n = 0; n < qb / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef pos = colOf(ln, qpos0, n, i), row = a.rows(head, pos, a.tq)(B::i(0));
        ExprRef pt = unary(KOp::Exp, B::sub(B::mul(lf(s[n][i]), f(a.scale)), b.ld(lse, row)));
        if (masked) pt = select(binary(KOp::Ge, pos, B::add(k0, ln.row(i))), pt, f(0));
        int p = b.newLocal();
        step.push_back(let(p, pt));
        step.push_back(set(s[n][i], lf(p)));                                                   // P^T
        step.push_back(set(dp[n][i], B::mul(lf(p), B::sub(lf(dp[n][i]), b.ld(delta, row))))); // dS^T
      }
    w.resultsTimesRows(step, ln, dvAcc, s, dy, a.dv, [&](int64_t) { return rows; });
    w.resultsTimesRows(step, ln, dkAcc, dp, q, a.d, [&](int64_t) { return rows; });
    return step;
  };
  int64_t extent = a.tq / qb;
  auto unmasked = [&](ExprRef jb) { return block(std::move(jb), false); };
  if (a.causal) {
    w.body.push_back(w.walk(extent, B::i(0), B::i(1), [&](ExprRef jb) { return block(std::move(jb), true); }));
    w.body.push_back(w.walk(extent, B::i(1), B::sub(binary(KOp::IDiv, B::sub(B::i(a.tq), first), B::i(qb)), B::i(1)), unmasked));
  } else {
    w.body.push_back(w.walk(extent, B::i(0), B::i(extent), unmasked));
  }
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i) {
      ExprRef at = B::add(B::mul(krows(ln.row(i)), B::i(a.d)), Lane::spread(n, ln.col(i), a.d));
      w.body.push_back(b.st(dk, at, B::mul(lf(dkAcc[n][i]), f(a.scale))));
    }
  for (int64_t n = 0; n < a.dv / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dvOut, B::add(B::mul(krows(ln.row(i)), B::i(a.dv)), Lane::spread(n, ln.col(i), a.dv)), lf(dvAcc[n][i])));
  return w.finish(iv, a.heads * tiles);
}

} // namespace

Expected<std::optional<std::vector<Kernel>>> attentionGpu(const std::string& name, const ir::Node& n) {
  Geometry a(n);
  if (!a.fits()) return std::optional<std::vector<Kernel>>();
  if (n.op == ir::Op::FusedAttention) return std::optional<std::vector<Kernel>>(std::vector<Kernel>{forward(name + "_fwd", a)});
  // delta is written by the first kernel and read by the others.
  return std::optional<std::vector<Kernel>>(
      std::vector<Kernel>{delta(name + "_delta", a), gradQueries(name + "_dq", a), gradKeysValues(name + "_dkv", a)});
}

} // namespace sgc::kir
