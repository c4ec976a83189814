// The GPU forms of FusedAttention and its gradient on Hopper (sm_90): LowerAttentionGpu.cpp's
// flash attention with its products as warpgroup ones (kir::wgmmaBf16). A GPU block is one
// warpgroup, 4 warps each owning 16 rows as there (queries: forward, dq; keys: dk, dv), 64 in all,
// and walks the other side in blocks staged in shared memory by asynchronous copies one block
// ahead, in wgmma's 128-byte swizzled layout (WgTile), from which the tensor cores read them
// themselves: no operand fragments are loaded for them. The block's own rows stay in registers as
// bf16 in the order wgmma takes its A operand (Lane::natural); a product's result fragments
// are the next product's A operand, as there. Each warpgroup product waits for its results before
// the softmax reads them. The warps of a warpgroup run every product together, so none skips a
// block that a causal mask hides from its rows: such rows are masked instead.
// For grouped heads of 128 the gradient stores dS^T (scoreScratchElements): the dK/dV kernel,
// after delta's kernel, writes each block pair's through shared memory into the scratch with a
// bulk copy, and a dq kernel of one product a block pair reads it back.
#include "codegen/kir/AttentionGpu.h"

#include <optional>

namespace sgc::kir::attention {
namespace {

/// A run of warpgroup products as a step's statements: a fence before them (the registers they
/// read were written), one group committed, `meanwhile` (which must not touch their operands or
/// accumulators) while the tensor cores work, and a wait for it before `results` (the
/// accumulators they write) are read.
void products(std::vector<StmtRef>& step, std::vector<StmtRef> run, const std::vector<int>& results, std::vector<StmtRef> meanwhile = {}) {
  step.push_back(wgmmaFence());
  for (StmtRef& p : run) step.push_back(std::move(p));
  step.push_back(wgmmaCommit());
  for (StmtRef& m : meanwhile) step.push_back(std::move(m));
  step.push_back(wgmmaWait(0, results));
}

/// acc += R T as warpgroup products appended to `run`: a block's result fragments `r` (two a
/// k-step: P, dS, their transposes) times the rows of `tile`'s stage `stage`, 16 rows a product.
void resultsTimesRows(std::vector<StmtRef>& run, const std::vector<Frag>& acc, const std::vector<Frag>& r, const WgTile& tile,
                      const ExprRef& stage) {
  for (size_t e = 0; 2 * e < r.size(); ++e) run.push_back(wgmmaBf16(Writer::accOf(acc), Writer::fromResults(r[2 * e], r[2 * e + 1]), tile.rowsOf(stage, (int64_t)e)));
}

/// dS^T of a warpgroup's 64 keys by the block's 64 queries into `staged` (one stage), pair by pair
/// as the warps hold them (rounded to bf16, as the products read them: each lane's neighbouring
/// queries at its rows g and g + 8 of its warp's 16 keys), then fenced for the bulk copy that
/// stores it once every warp has written its part (storeStaged).
void stageScoreGradients(std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& ds, const WgTile& staged, const WarpBlock& wb) {
  ExprRef key = B::sub(wb.warpRow0, wb.row0); // the warp's first key within the 64
  for (size_t n = 0; n < ds.size(); ++n)
    for (int i = 0; i < 4; i += 2)
      step.push_back(sharedStorePair(staged.array, staged.element(B::i(0), B::add(key, ln.row(i)), colOf(ln, B::i(0), (int64_t)n, i)), lf(ds[n][i]),
                                     lf(ds[n][i + 1])));
  step.push_back(fenceProxyAsync());
}

/// The bulk copy of `staged` (dS^T of the GPU block's keys by the queries from qpos0) into its
/// block of the scratch, by the block's first thread.
std::vector<StmtRef> storeStaged(B& b, const WgTile& staged, const ScoreBlocks& sb, const WarpBlock& wb, const ExprRef& qpos0) {
  ExprRef kblock = binary(KOp::IDiv, wb.row0, B::i(64)), qblock = binary(KOp::IDiv, qpos0, B::i(64));
  ExprRef at = B::mul(sb.block(wb.head, kblock, qblock), B::i(64 * 64));
  return {when(b, binary(KOp::Eq, wb.tid, B::i(0)), {bulkStore(staged.array, B::i(0), b.buf(sb.scratch), at, 64 * 64 * 2), bulkCommit()})};
}

} // namespace

/// Forward on Hopper: a warpgroup (a GPU block of 4 warps) per 64 queries, each warp's 16 as the
/// forward kernel's; blocks of kb keys staged in shared memory in wgmma's layout, S = Q K^T and
/// O += P V each one warpgroup product per 16 contracted columns (Q and P from the warps'
/// registers, K and V read by the tensor cores from shared memory). The warps of a warpgroup run
/// every product together, so none skips a block: rows before a block's keys mask all of it.
bool forwardFitsWgmma(const Geometry& a) { return a.d % 64 == 0 && a.dv % 64 == 0 && a.d <= 128 && a.dv <= 128 && a.tq % 64 == 0; }

Kernel forwardWgmma(const std::string& name, const Geometry& a) {
  const ir::Value* q = a.n.input(0);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  // Blocks of 64 keys: two stages of K and V take 32 KiB for heads of 64, 64 KiB (dynamic shared
  // memory) for heads of 128.
  int64_t kb = blockFor(a.tk, 64);
  WarpBlock wb(ln, loopVar(iv), a.tq / 16, 16, true);
  const ExprRef &head = wb.head, &q0 = wb.warpRow0;
  WgTile ks(b, kb, a.d), vs(b, kb, a.dv);
  const double c2 = a.scale * M_LOG2E; // onlineSoftmax's
  RowOf qrows = a.rows(head, q0, a.tq);
  auto qf = w.operandRows(ln, q, a.rows(head, q0, a.tq, 0), a.d, ln.natural());
  auto o = w.zeros(a.dv / 8, w.body);
  std::array<int, 2> m, l;
  runningStats(w, m, l);
  Writer::Copies copies = keyValueCopies(w, ks, vs, wb, kb);
  auto s = w.zeros(kb / 8, w.body); // each block's scores: its first product replaces them
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<StmtRef> scores;
    for (int64_t e = 0; e < a.d / 16; ++e) scores.push_back(wgmmaBf16(Writer::accOf(s), Writer::held(qf[e]), ks.contracted(stage, e), e > 0));
    products(step, std::move(scores), Writer::accOf(s));
    onlineSoftmax(b, step, ln, s, m, l, o, c2, masked, key0, q0);
    std::vector<StmtRef> outputs;
    resultsTimesRows(outputs, o, s, vs, stage);
    products(step, std::move(outputs), Writer::accOf(o));
    return step;
  };
  w.stagedWalk(a.tk / kb, keyWalk(a, wb.row0, 64, kb), copies, block, true);
  forwardResults(w, ln, qrows, o, m, l, [&](int64_t n, int i) { return colOf(ln, B::i(0), n, i); });
  Kernel k = w.finish(iv, a.heads * (a.tq / 16), wb.threads);
  // Heads of 64 in 127 registers, four blocks an SM (16 warps: -3.5% against three); heads of 128
  // in 168, three (214 when free). Neither spills.
  k.minBlocks = a.d <= 64 ? 4 : 3;
  return k;
}

/// Whether the Hopper forms of the gradient apply: head dims of 64 or 128, rows in whole warpgroups.
bool gradFitsWgmma(const Geometry& a) { return forwardFitsWgmma(a) && a.tk % 64 == 0; }

/// dq on Hopper: gradQueries' walk for a warpgroup per 64 queries, its four products (S = Q K^T,
/// dP = dO V^T, then dQ += dS K) warpgroup products reading K and V from shared memory.
Kernel gradQueriesWgmma(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *dy = a.n.input(5), *dq = a.gradOf(0);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t kb = blockFor(a.tk, 64); // as the forward kernel's
  WarpBlock wb(ln, loopVar(iv), a.tq / 16, 16, true);
  const ExprRef &head = wb.head, &q0 = wb.warpRow0;
  WgTile ks(b, kb, a.d), vs(b, kb, a.dv);
  RowOf qrows = a.rows(head, q0, a.tq), qIn = a.rows(head, q0, a.tq, 0);
  auto qf = w.operandRows(ln, q, qIn, a.d, ln.natural());
  auto dyf = w.operandRows(ln, dy, qrows, a.dv, ln.natural());
  auto [rl, rd] = rowValues(w, ln, dyf, qrows, ln.natural());
  auto acc = w.zeros(a.d / 8, w.body);
  Writer::Copies copies = keyValueCopies(w, ks, vs, wb, kb);
  auto s = w.zeros(kb / 8, w.body), dp = w.zeros(kb / 8, w.body); // each block's: its first products replace them
  std::vector<int> both = Writer::accOf(s), dps = Writer::accOf(dp);
  both.insert(both.end(), dps.begin(), dps.end());
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<StmtRef> scores;
    for (int64_t e = 0; e < a.d / 16; ++e) scores.push_back(wgmmaBf16(Writer::accOf(s), Writer::held(qf[e]), ks.contracted(stage, e), e > 0));
    for (int64_t e = 0; e < a.dv / 16; ++e) scores.push_back(wgmmaBf16(dps, Writer::held(dyf[e]), vs.contracted(stage, e), e > 0));
    products(step, std::move(scores), both);
    for (int64_t n = 0; n < kb / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef p = exp2(B::sub(B::mul(lf(s[n][i]), f(a.scale * M_LOG2E)), lf(rl[i / 2])));
        if (masked) p = select(binary(KOp::Le, colOf(ln, key0, n, i), B::add(q0, ln.row(i))), p, f(0));
        step.push_back(set(s[n][i], B::mul(p, B::sub(lf(dp[n][i]), lf(rd[i / 2]))))); // dS
      }
    std::vector<StmtRef> dqs;
    resultsTimesRows(dqs, acc, s, ks, stage);
    products(step, std::move(dqs), Writer::accOf(acc));
    return step;
  };
  w.stagedWalk(a.tk / kb, keyWalk(a, wb.row0, 64, kb), copies, block, true);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dq, B::add(B::mul(qIn(ln.row(i)), B::i(a.d)), colOf(ln, B::i(0), n, i)), B::mul(lf(acc[n][i]), f(a.scale))));
  Kernel k = w.finish(iv, a.heads * (a.tq / 16), wb.threads);
  // Heads of 64: three blocks an SM (168 registers, no spills); free, ptxas takes 192 and two
  // blocks, 2% slower (session 39, H100).
  if (a.d <= 64) k.minBlocks = 3;
  return k;
}

/// dk and dv on Hopper: gradKeysValues' walk for a warpgroup per 64 keys over blocks of qb
/// queries, its four products (S^T = K Q^T, dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q)
/// warpgroup products reading Q and dO from shared memory, each tile both ways: contracted over
/// its width, then over its rows.
Kernel gradKeysValuesWgmma(const std::string& name, const Geometry& a) {
  const ir::Value *k = a.n.input(1), *v = a.n.input(2), *dk = a.gradOf(1), *dvOut = a.gradOf(2);
  std::optional<ScoreBlocks> stored; // dS^T for the dq kernel
  if (storesScoreGradients(a)) stored.emplace(a);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  // Blocks of 64 queries. K and V of the block's keys are A of S^T and dP^T: held in registers
  // for heads of 64; for wider ones (whose dK and dV take 128 registers) read from shared memory.
  const int64_t qb = 64;
  const bool keysShared = a.d + a.dv > 128;
  WarpBlock wb(ln, loopVar(iv), a.tk / 16, 16, false); // the longest walks (first keys) first
  const ExprRef &head = wb.head, &k0 = wb.warpRow0;
  RowOf krows = a.rows(head, k0, a.tk, 1), vrows = a.rows(head, k0, a.tk, 2);
  RowOf dkRows = a.gradRows(head, k0, a.tk, 1), dvRows = a.gradRows(head, k0, a.tk, 2);
  std::vector<std::array<int, 8>> kf, vf;
  std::optional<WgTile> kt, vt;
  if (keysShared) { // copied first: the walk's first wait covers them
    kt.emplace(b, 64, a.d, 1), vt.emplace(b, 64, a.dv, 1);
    for (StmtRef& c : kt->copies(b, B::i(0), k, a.rows(head, wb.row0, a.tk, 1), wb.tid, wb.threads)) w.body.push_back(std::move(c));
    for (StmtRef& c : vt->copies(b, B::i(0), v, a.rows(head, wb.row0, a.tk, 2), wb.tid, wb.threads)) w.body.push_back(std::move(c));
    w.body.push_back(asyncCommit());
  } else {
    kf = w.operandRows(ln, k, krows, a.d, ln.natural());
    vf = w.operandRows(ln, v, vrows, a.dv, ln.natural());
  }
  auto dkAcc = w.zeros(a.d / 8, w.body), dvAcc = w.zeros(a.dv / 8, w.body);
  WgTile qs(b, qb, a.d), dys(b, qb, a.dv);
  SharedRowValues lses(b, qb), deltas(b, qb);
  // dS^T on its way to the scratch: one stage (two would leave room for one block an SM, not two)
  std::optional<WgTile> staged;
  if (stored) staged.emplace(b, 64, qb, 1);
  ExprRef first = a.causal ? wb.row0 : B::i(0); // causal: the queries before the block's keys see none of them
  Writer::Copies copies = queryBlockCopies(w, qs, dys, lses, deltas, wb, first, qb);
  auto s = w.zeros(qb / 8, w.body), dp = w.zeros(qb / 8, w.body); // each block's: its first products replace them
  std::vector<int> both = Writer::accOf(s), dps = Writer::accOf(dp);
  both.insert(both.end(), dps.begin(), dps.end());
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef qpos0 = B::add(first, B::mul(jb, B::i(qb)));
    std::vector<StmtRef> scores;
    for (int64_t e = 0; e < a.d / 16; ++e)
      scores.push_back(keysShared ? wgmmaBf16(Writer::accOf(s), kt->contracted(B::i(0), e), qs.contracted(stage, e), e > 0)
                                  : wgmmaBf16(Writer::accOf(s), Writer::held(kf[e]), qs.contracted(stage, e), e > 0));
    for (int64_t e = 0; e < a.dv / 16; ++e)
      scores.push_back(keysShared ? wgmmaBf16(dps, vt->contracted(B::i(0), e), dys.contracted(stage, e), e > 0)
                                  : wgmmaBf16(dps, Writer::held(vf[e]), dys.contracted(stage, e), e > 0));
    // With dS^T stored: while the tensor cores work, the first thread waits until the last block's
    // bulk copy has read `staged`; nobody writes it before the barrier after that.
    std::vector<StmtRef> readWait;
    if (stored) readWait.push_back(when(b, binary(KOp::Eq, wb.tid, B::i(0)), {bulkReadWait(0)}));
    products(step, std::move(scores), both, std::move(readWait));
    keyGradients(b, step, ln, s, dp, lses, deltas, stage, a.scale, masked, qpos0, k0);
    if (stored) step.push_back(barrier());
    std::vector<int> grads = Writer::accOf(dvAcc), dks = Writer::accOf(dkAcc);
    grads.insert(grads.end(), dks.begin(), dks.end());
    std::vector<StmtRef> updates, stores; // dS^T stored while the tensor cores work
    resultsTimesRows(updates, dvAcc, s, dys, stage); // dV += P^T dO
    resultsTimesRows(updates, dkAcc, dp, qs, stage); // dK += dS^T Q
    if (stored) stageScoreGradients(stores, ln, dp, *staged, wb);
    products(step, std::move(updates), grads, std::move(stores));
    return step;
  };
  Writer::Copies store;
  if (stored) store = [&](const ExprRef&, const ExprRef& jb) { return storeStaged(b, *staged, *stored, wb, B::add(first, B::mul(jb, B::i(qb)))); };
  w.stagedWalk(a.tq / qb, queryWalk(a, first, qb, 64), copies, block, true, store);
  if (stored) w.body.push_back(when(b, binary(KOp::Eq, wb.tid, B::i(0)), {bulkWait(0)}));
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dk, B::add(B::mul(dkRows(ln.row(i)), B::i(a.d)), colOf(ln, B::i(0), n, i)), B::mul(lf(dkAcc[n][i]), f(a.scale))));
  for (int64_t n = 0; n < a.dv / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dvOut, B::add(B::mul(dvRows(ln.row(i)), B::i(a.dv)), colOf(ln, B::i(0), n, i)), lf(dvAcc[n][i])));
  return w.finish(iv, a.heads * (a.tk / 16), wb.threads);
}

/// Whether the gradient stores dS^T for a dq kernel of one product (the node has its scratch).
bool storesScoreGradients(const Geometry& a) { return a.n.outputs.size() > 4 && a.n.outputs[4]; }

/// Heads of 128 with grouped keys and values only. The dq kernel of one product reads a block
/// pair's dS^T (8 KB) and its K (16 KB), and the query heads of a group read the same K, mostly
/// from L2; dK/dV's stores add 8 KB to the 32 KB of Q and dO it streams through L2 a block pair.
/// Measured on an H100 (RESULTS, session 29): Llama's grouped layers -35 us each against the
/// seven products, ungrouped heads (B 4, H 32, T 2048) +66 us a layer.
int64_t scoreScratchElements(const Geometry& a) {
  if (!gradFitsWgmma(a) || a.d != 128 || a.dv != 128 || a.group == 1) return 0;
  return a.heads * ScoreBlocks(a).perProblem * 64 * 64;
}

/// delta = dy . y of every row, for the dK/dV kernel that runs before the dq kernel reading its
/// dS^T: a warp per 16 rows, as the dq kernels compute it.
Kernel gradDelta(const std::string& name, const Geometry& a) {
  const ir::Value* dy = a.n.input(5);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  WarpBlock wb(ln, loopVar(iv), a.tq / 16, 16, false);
  RowOf qrows = a.rows(wb.head, wb.warpRow0, a.tq);
  auto dyf = w.operandRows(ln, dy, qrows, a.dv, ln.natural());
  rowValues(w, ln, dyf, qrows, ln.natural());
  return w.finish(iv, a.heads * (a.tq / 16), wb.threads);
}

/// dq on Hopper from the dS^T that the dK/dV kernel stored: a warpgroup per 64 queries walks the
/// blocks of 64 keys they see, each block's dS^T and K staged in shared memory, dQ += dS K one
/// warpgroup product per 16 keys with both operands read from shared memory (dS as A from its
/// transpose: an MN-major tile). Scores masked by the causal diagonal were stored as zeros.
Kernel gradQueriesStoredWgmma(const std::string& name, const Geometry& a) {
  const ir::Value* dq = a.gradOf(0);
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  ScoreBlocks sb(a);
  WarpBlock wb(ln, loopVar(iv), a.tq / 16, 16, true);
  WgTile ks(b, 64, a.d), dst(b, 64, 64);
  ExprRef qblock = binary(KOp::IDiv, wb.row0, B::i(64));
  Writer::Copies copies = [&](const ExprRef& stage, const ExprRef& jb) {
    std::vector<StmtRef> c = ks.copies(b, stage, a.n.input(1), a.rows(wb.head, B::mul(jb, B::i(64)), a.tk, 1), wb.tid, wb.threads);
    for (StmtRef& s : dst.stageCopies(b, stage, sb.scratch, B::mul(sb.block(wb.head, jb, qblock), B::i(64 * 64)), wb.tid, wb.threads))
      c.push_back(std::move(s));
    return c;
  };
  auto acc = w.zeros(a.d / 8, w.body);
  auto block = [&](const ExprRef& stage, const ExprRef&, bool) {
    std::vector<StmtRef> step, run;
    for (int64_t e = 0; e < 4; ++e) run.push_back(wgmmaBf16(Writer::accOf(acc), dst.rowsOf(stage, e), ks.rowsOf(stage, e), true));
    products(step, std::move(run), Writer::accOf(acc));
    return step;
  };
  ExprRef count = a.causal ? B::add(qblock, B::i(1)) : B::i(a.tk / 64);
  w.stagedWalk(a.tk / 64, Writer::Walk{count, {{B::i(0), count, false}}}, copies, block, true);
  RowOf qIn = a.rows(wb.head, wb.warpRow0, a.tq, 0);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dq, B::add(B::mul(qIn(ln.row(i)), B::i(a.d)), colOf(ln, B::i(0), n, i)), B::mul(lf(acc[n][i]), f(a.scale))));
  Kernel k = w.finish(iv, a.heads * (a.tq / 16), wb.threads);
  k.minBlocks = 4; // ~115 registers and 48 KiB of shared memory a block: four an SM, to hide the reads of dS^T
  return k;
}

} // namespace sgc::kir::attention
