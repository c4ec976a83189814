// The GPU form of FusedAttention and its gradient in bf16: flash attention on
// the tensor cores (mma.m16n8k16, see kir::mmaBf16). A warp owns 32 query rows
// (forward), 16 (dq) or 16 key rows (dk/dv) and walks the other side in blocks:
//
//   forward  S = Q K^T, online softmax, O += P V           (keeps O, max, sum)
//   dq       delta = dO . O; S = Q K^T, P from the log-sum-exp, dP = dO V^T,
//            dS = P (dP - delta), dQ += dS K
//   dk, dv   S^T = K Q^T, P^T from the log-sum-exp, dV += P^T dO,
//            dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q
//
// The warps of a GPU block (WarpBlock: up to 4, on neighbouring rows of one
// problem) walk the other side together: each block of its rows is copied into
// shared memory by asynchronous copies one block ahead of the products that
// read it (SharedTile, Writer::stagedWalk), so the copies run behind the
// arithmetic and each row is read from global memory once per GPU block. A
// warp's own rows (Q, or K and V) stay in registers, as bf16 (letBf16: at D 128
// the dK/dV kernel's K and V as f32 spilled). Operand fragments are read
// 16 bytes a lane (Lane::dim and Lane::spread permute the dims so that a lane's
// elements are neighbours; SharedTile swizzles them clear of bank conflicts); a
// product's f32 result fragment is, pair for pair, the next product's bf16
// operand fragment, so P and dS never leave registers. Only the blocks the
// causal diagonal crosses are masked, and a warp skips those wholly past its
// diagonal. Nothing of size [T, T] is stored. The CPU keeps the scalar kernels
// of LowerAttention.cpp, which are the reference.
#include "codegen/kir/AttentionGpu.h"

namespace sgc::kir {
namespace {
using namespace attention;

/// Forward: a warp per kForwardTiles x 16 queries, blocks of 32 keys staged in shared memory for
/// the GPU block's warps, the online softmax of flash attention. The tiles' products with one key
/// or value fragment are side by side, so that the emitter loads it once for all of them (half
/// the loads per product of one tile a warp).
constexpr int kForwardTiles = 2;

Kernel forward(const std::string& name, const Geometry& a) {
  const ir::Value* q = a.n.input(0);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  const int R = a.tq % (16 * kForwardTiles) == 0 && a.dv <= 64 ? kForwardTiles : 1; // wider rows: the registers of one tile
  int64_t rowsPerWarp = 16 * R, tiles = a.tq / rowsPerWarp, kb = blockFor(a.tk, 32);
  WarpBlock wb(ln, loopVar(iv), tiles, rowsPerWarp, true);
  const ExprRef &head = wb.head, &q0 = wb.warpRow0;
  SharedTile ks(b, kb, a.d), vs(b, kb, a.dv);
  const double c2 = a.scale * M_LOG2E; // the running max in log2 units: exp(x) = 2^(x log2 e), ex2 being the GPU's own (onlineSoftmax)
  std::vector<RowOf> qrows;
  std::vector<std::vector<std::array<int, 8>>> qf;
  std::vector<std::vector<Frag>> o;
  std::vector<std::array<int, 2>> m(R), l(R);
  for (int t = 0; t < R; ++t) {
    qrows.push_back(a.rows(head, B::add(q0, B::i(16 * t)), a.tq));
    qf.push_back(w.operandRows(ln, q, a.rows(head, B::add(q0, B::i(16 * t)), a.tq, 0), a.d, ln.permuted(a.d)));
    o.push_back(w.zeros(a.dv / 8, w.body));
    runningStats(w, m[t], l[t]);
  }
  Writer::Copies copies = keyValueCopies(w, ks, vs, wb, kb);
  // One block of kb keys in `stage`; `masked`: the causal diagonal crosses it for some warp of the GPU block.
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<std::vector<Frag>> s;
    for (int t = 0; t < R; ++t) s.push_back(w.zeros(kb / 8, step));
    for (int64_t n = 0; n < kb / 8; ++n) { // S = Q K^T, each key fragment for every tile
      for (int64_t e = 0; e < a.d / 16; ++e) {
        std::vector<ExprRef> kfrag = Writer::contracted(ln, ks.source(stage, B::i(n * 8)), e, a.d);
        for (int t = 0; t < R; ++t) step.push_back(mmaBf16({s[t][n].begin(), s[t][n].end()}, Writer::held(qf[t][e]), kfrag));
      }
    }
    for (int t = 0; t < R; ++t) onlineSoftmax(b, step, ln, s[t], m[t], l[t], o[t], c2, masked, key0, B::add(q0, B::i(16 * t)));
    for (int64_t e = 0; e < kb / 16; ++e) { // O += P V, each value fragment for every tile
      for (size_t n = 0; n < o[0].size(); ++n) {
        std::vector<ExprRef> vfrag = Writer::spreadRows(ln, vs.source(stage, B::i(e * 16)), (int64_t)n, a.dv);
        for (int t = 0; t < R; ++t)
          step.push_back(mmaBf16({o[t][n].begin(), o[t][n].end()}, Writer::fromResults(s[t][2 * e], s[t][2 * e + 1]), vfrag));
      }
    }
    if (!masked) return step;
    return std::vector<StmtRef>{when(b, binary(KOp::Le, key0, B::add(q0, B::i(rowsPerWarp - 1))), std::move(step))}; // past the warp's last query: nothing
  };
  w.stagedWalk(a.tk / kb, keyWalk(a, wb.row0, wb.warps * rowsPerWarp, kb), copies, block);
  for (int t = 0; t < R; ++t) forwardResults(w, ln, qrows[t], o[t], m[t], l[t], [&](int64_t n, int i) { return Lane::spread(n, ln.col(i), a.dv); });
  return w.finish(iv, a.heads * tiles, wb.threads);
}

/// dq: a warp per 16 queries over blocks of kb keys, staged in shared memory for the GPU block's
/// warps. It also gives delta = dy . y for its rows, which dk and dv read: each lane multiplies
/// the dy elements it holds as operands by y's at the same places, and the four lanes of a row
/// add theirs.
Kernel gradQueries(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *dy = a.n.input(5), *dq = a.gradOf(0);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t tiles = a.tq / 16, kb = blockFor(a.tk, std::max(a.d, a.dv) <= 64 ? 64 : 32); // two stages of K and V within 48 KiB
  WarpBlock wb(ln, loopVar(iv), tiles, 16, true);
  const ExprRef &head = wb.head, &q0 = wb.warpRow0;
  SharedTile ks(b, kb, a.d), vs(b, kb, a.dv);
  RowOf qrows = a.rows(head, q0, a.tq), qIn = a.rows(head, q0, a.tq, 0);
  auto qf = w.operandRows(ln, q, qIn, a.d, ln.permuted(a.d));
  auto dyf = w.operandRows(ln, dy, qrows, a.dv, ln.permuted(a.dv));
  auto [rl, rd] = rowValues(w, ln, dyf, qrows, ln.permuted(a.dv));
  auto acc = w.zeros(a.d / 8, w.body);
  Writer::Copies copies = keyValueCopies(w, ks, vs, wb, kb);
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    auto s = w.zeros(kb / 8, step);
    auto dp = w.zeros(kb / 8, step);
    Writer::timesRowsOf(step, ln, s, qf, a.d, [&](int64_t n) { return ks.source(stage, B::i(n * 8)); });
    Writer::timesRowsOf(step, ln, dp, dyf, a.dv, [&](int64_t n) { return vs.source(stage, B::i(n * 8)); });
    for (int64_t n = 0; n < kb / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef p = exp2(B::sub(B::mul(lf(s[n][i]), f(a.scale * M_LOG2E)), lf(rl[i / 2])));
        if (masked) p = select(binary(KOp::Le, colOf(ln, key0, n, i), B::add(q0, ln.row(i))), p, f(0));
        step.push_back(set(s[n][i], B::mul(p, B::sub(lf(dp[n][i]), lf(rd[i / 2]))))); // dS
      }
    Writer::resultsTimesRows(step, ln, acc, s, a.d, [&](int64_t e) { return ks.source(stage, B::i(e * 16)); });
    if (!masked) return step;
    return std::vector<StmtRef>{when(b, binary(KOp::Le, key0, B::add(q0, B::i(15))), std::move(step))}; // past the warp's last query: nothing
  };
  w.stagedWalk(a.tk / kb, keyWalk(a, wb.row0, wb.warps * 16, kb), copies, block);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dq, B::add(B::mul(qIn(ln.row(i)), B::i(a.d)), Lane::spread(n, ln.col(i), a.d)), B::mul(lf(acc[n][i]), f(a.scale))));
  return w.finish(iv, a.heads * tiles, wb.threads);
}

/// dk and dv: a warp per 16 keys over blocks of 32 queries (16 where 32 do not divide them), from
/// the first that sees the GPU block's keys, staged in shared memory for the block's warps with
/// their log-sum-exp and delta.
Kernel gradKeysValues(const std::string& name, const Geometry& a) {
  const ir::Value *k = a.n.input(1), *v = a.n.input(2), *dk = a.gradOf(1), *dvOut = a.gradOf(2);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t tiles = a.tk / 16, qb = a.tq % 32 == 0 && std::max(a.d, a.dv) <= 64 ? 32 : 16; // wider rows: the registers of 16
  WarpBlock wb(ln, loopVar(iv), tiles, 16, false); // the longest walks (first keys) first
  const ExprRef &head = wb.head, &k0 = wb.warpRow0;
  RowOf krows = a.rows(head, k0, a.tk, 1), vrows = a.rows(head, k0, a.tk, 2);
  RowOf dkRows = a.gradRows(head, k0, a.tk, 1), dvRows = a.gradRows(head, k0, a.tk, 2);
  auto kf = w.operandRows(ln, k, krows, a.d, ln.permuted(a.d));
  auto vf = w.operandRows(ln, v, vrows, a.dv, ln.permuted(a.dv));
  auto dkAcc = w.zeros(a.d / 8, w.body), dvAcc = w.zeros(a.dv / 8, w.body);
  SharedTile qs(b, qb, a.d), dys(b, qb, a.dv);
  SharedRowValues lses(b, qb), deltas(b, qb);
  ExprRef first = a.causal ? wb.row0 : B::i(0); // causal: the queries before the block's keys see none of them
  Writer::Copies copies = queryBlockCopies(w, qs, dys, lses, deltas, wb, first, qb);
  // One block of qb queries; `masked`: the causal diagonal crosses it for some warp of the GPU block.
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef qpos0 = B::add(first, B::mul(jb, B::i(qb)));
    auto s = w.zeros(qb / 8, step);
    auto dp = w.zeros(qb / 8, step);
    Writer::timesRowsOf(step, ln, s, kf, a.d, [&](int64_t n) { return qs.source(stage, B::i(n * 8)); });
    Writer::timesRowsOf(step, ln, dp, vf, a.dv, [&](int64_t n) { return dys.source(stage, B::i(n * 8)); });
    keyGradients(b, step, ln, s, dp, lses, deltas, stage, a.scale, masked, qpos0, k0);
    Writer::resultsTimesRows(step, ln, dvAcc, s, a.dv, [&](int64_t e) { return dys.source(stage, B::i(e * 16)); });
    Writer::resultsTimesRows(step, ln, dkAcc, dp, a.d, [&](int64_t e) { return qs.source(stage, B::i(e * 16)); });
    if (!masked) return step;
    return std::vector<StmtRef>{when(b, binary(KOp::Ge, B::add(qpos0, B::i(qb - 1)), k0), std::move(step))}; // before the warp's keys: nothing
  };
  w.stagedWalk(a.tq / qb, queryWalk(a, first, qb, wb.warps * 16), copies, block);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i) {
      ExprRef at = B::add(B::mul(dkRows(ln.row(i)), B::i(a.d)), Lane::spread(n, ln.col(i), a.d));
      w.body.push_back(b.st(dk, at, B::mul(lf(dkAcc[n][i]), f(a.scale))));
    }
  for (int64_t n = 0; n < a.dv / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dvOut, B::add(B::mul(dvRows(ln.row(i)), B::i(a.dv)), Lane::spread(n, ln.col(i), a.dv)), lf(dvAcc[n][i])));
  return w.finish(iv, a.heads * tiles, wb.threads);
}

} // namespace

int64_t attentionScratchElements(const ir::Node& n, GpuArch arch) {
  if (n.op != ir::Op::FusedAttentionGrad || !arch.hopper) return 0;
  Geometry a(n);
  return a.fits() ? scoreScratchElements(a) : 0;
}

Expected<std::optional<std::vector<Kernel>>> attentionGpu(const std::string& name, const ir::Node& n, GpuArch arch) {
  Geometry a(n);
  if (!a.fits()) return std::optional<std::vector<Kernel>>();
  if (n.op == ir::Op::FusedAttention)
    return std::optional<std::vector<Kernel>>(
        std::vector<Kernel>{arch.hopper && forwardFitsWgmma(a) ? forwardWgmma(name + "_fwd", a) : forward(name + "_fwd", a)});
  // delta is written by the first kernel and read by the second.
  if (arch.hopper && storesScoreGradients(a)) {
    if (scoreScratchElements(a) == 0 || a.n.outputs[4]->type.staticNumel().value_or(0) != scoreScratchElements(a))
      return makeError(ir::describe(a.n) + ": its scratch does not fit Hopper's form (codegen/AttentionScratch.h gives it)");
    return std::optional<std::vector<Kernel>>(
        std::vector<Kernel>{gradDelta(name + "_delta", a), gradKeysValuesWgmma(name + "_dkv", a), gradQueriesStoredWgmma(name + "_dq", a)});
  }
  if (arch.hopper && gradFitsWgmma(a))
    return std::optional<std::vector<Kernel>>(std::vector<Kernel>{gradQueriesWgmma(name + "_dq", a), gradKeysValuesWgmma(name + "_dkv", a)});
  return std::optional<std::vector<Kernel>>(std::vector<Kernel>{gradQueries(name + "_dq", a), gradKeysValues(name + "_dkv", a)});
}

} // namespace sgc::kir
