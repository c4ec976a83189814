// The GPU form of SceLossGrad over long rows (an LM head's vocabulary): a GPU
// block of 512 threads per row instead of a warp.
//
// The gradient reads each row twice: once for its maximum and sum of
// exponentials, once to write exp(x - lse) - onehot. With a warp per row, some
// 8,000 rows are in flight on an H200 and the first read of a row has left the
// 50 MB L2 cache long before the second (GPT-2: 100 KB a row, 1.6 GB of
// scores read twice from memory). With a block per row, two blocks an SM,
// about 260 rows are in flight, 26 MB, and the second read, walked backwards
// from where the first ended, finds the row in L2: the scores cross the memory
// bus once.
//
// A row's partial results meet in two steps: a warp's lanes by warpReduce,
// then the block's 16 warps through shared memory, each warp combining the 16
// partials in its lanes (one exp a thread, not 16).
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <cmath>
#include <functional>

namespace sgc::kir {
namespace {
using B = Builder;

constexpr int kThreads = 512;            ///< a row's threads: one GPU block
constexpr int kWarps = kThreads / 32;    ///< at most 32: a warp's lanes combine the block's warps
constexpr int64_t kUnroll = 3;           ///< steps whose loads a thread issues together (at most)
constexpr int64_t kLongRow = 1 << 13;    ///< from this many classes

ExprRef f(double v) { return B::c(v, Scalar::F32); }

/// Thread tid (e % kThreads) of the block of row e / kThreads; in step s it visits the v
/// neighbouring elements from (kThreads s + tid) v. A row has `full` whole steps, then a part step that threads
/// tid < `partThreads` take.
struct BlockRow {
  B& b;
  int e;
  int64_t d, v;
  int base = -1;
  ExprRef row() const { return binary(KOp::IDiv, loopVar(e), B::i(kThreads)); }
  ExprRef tid() const { return binary(KOp::IMod, loopVar(e), B::i(kThreads)); }
  ExprRef lane() const { return binary(KOp::IMod, tid(), B::i(32)); }
  ExprRef warp() const { return binary(KOp::IDiv, tid(), B::i(32)); }
  int64_t full() const { return d / (kThreads * v); }
  int64_t partThreads() const { return (d % (kThreads * v)) / v; }
  StmtRef begin() {
    base = b.newLocal();
    return let(base, B::add(B::mul(row(), B::i(d)), B::mul(tid(), B::i(v))));
  }
  /// Element u of step `step` (an i64 expression), as its flat index.
  ExprRef at(const ExprRef& step, int64_t u) const { return B::add(B::add(local(base, Scalar::I64), B::mul(step, B::i(kThreads * v))), B::i(u)); }
  /// The most steps (up to kUnroll) dividing the whole steps.
  int64_t unroll() const {
    int64_t u = std::min(kUnroll, std::max<int64_t>(full(), 1));
    while (full() % u) --u;
    return u;
  }
  /// body(first step) for each group of unroll() whole steps (`backwards`: the last group
  /// first), then (or, backwards, before them) body for the part step on the threads that have one.
  std::vector<StmtRef> walk(bool backwards, const std::function<std::vector<StmtRef>(const ExprRef& step0, int64_t steps)>& body) const {
    std::vector<StmtRef> out;
    int64_t u = unroll(), groups = full() / u;
    if (partThreads() && backwards) out.push_back(when(b, binary(KOp::Lt, tid(), B::i(partThreads())), body(B::i(full()), 1)));
    if (groups) {
      int j = b.newLoopVar();
      ExprRef g = backwards ? B::sub(B::i(groups - 1), loopVar(j)) : loopVar(j);
      out.push_back(loop(j, groups, false, body(B::mul(g, B::i(u)), u)));
    }
    if (partThreads() && !backwards) out.push_back(when(b, binary(KOp::Lt, tid(), B::i(partThreads())), body(B::i(full()), 1)));
    return out;
  }
};

} // namespace

std::optional<std::vector<Kernel>> sceBlockGpu(const std::string& name, const ir::Node& n, bool shortRows) {
  if (n.op != ir::Op::SceLossGrad) return std::nullopt;
  const ir::Value *x = n.input(0), *target = n.input(1), *dl = n.input(2), *w = n.input(3), *dx = n.outputs[0];
  const ir::Value* lossOut = n.outputs.size() > 1 ? n.outputs[1] : nullptr;
  if (!dx || x->type.rank() != 2 || computeType(x->type.dtype) != Scalar::F32) return std::nullopt;
  int64_t P = x->type.dims[0].value, C = x->type.dims[1].value;
  int64_t v = storeVectorWidth(ir::dtypeSize(x->type.dtype), C); // 16-byte loads, or narrower where C needs: GPT-2's 50,257 classes, one element a load
  std::string red = n.getString("reduction", "mean");
  if ((C < kLongRow && !shortRows) || P < 1 || (lossOut && (red == "none" || lossOut->type.dtype != ir::DType::F32))) return std::nullopt;
  Scalar t = Scalar::F32;
  B b(name);
  int e = b.newLoopVar();
  BlockRow rows{b, e, C, v};
  int maxes = (int)b.k.shared.size();
  b.k.shared.push_back({ir::DType::F32, kWarps}); // each warp's maximum,
  int sums = maxes + 1;
  b.k.shared.push_back({ir::DType::F32, kWarps}); // its sum of exp(x - maximum),
  int weights = maxes + 2;
  b.k.shared.push_back({ir::DType::F32, kWarps}); // its share of the weights' total (mean)
  auto tgt = [&](ExprRef pos) { return cast(b.ld(target, std::move(pos)), Scalar::I64); };
  auto weight = [&](ExprRef cls) { return lossWeight(b, n, w, C, std::move(cls)); };
  auto lf = [&](int id) { return local(id, t); };
  auto newLocal = [&](std::vector<StmtRef>& out, ExprRef value) {
    int id = b.newLocal();
    out.push_back(let(id, std::move(value)));
    return id;
  };
  std::vector<StmtRef> body{rows.begin()};
  ExprRef tp = tgt(rows.row());
  ExprRef isFirst = binary(KOp::Eq, rows.tid(), B::i(0));
  int xt = -1;
  if (lossOut) { // the target's score, read before the barrier that every write of the gradient follows
    xt = newLocal(body, f(0));
    body.push_back(when(b, isFirst, {set(xt, b.ld(x, B::add(B::mul(rows.row(), B::i(C)), B::clamp(tp, C))))}));
  }
  int wsum = -1;
  if (red == "mean") { // the weights of all positions, a thread's share of them
    wsum = newLocal(body, f(0));
    int jq = b.newLoopVar();
    ExprRef pos = B::add(rows.tid(), B::mul(loopVar(jq), B::i(kThreads)));
    ExprRef term = select(binary(KOp::Lt, pos, B::i(P)), weight(tgt(binary(KOp::Min, pos, B::i(P - 1)))), f(0));
    body.push_back(loop(jq, (P + kThreads - 1) / kThreads, false, {set(wsum, B::add(lf(wsum), term))}));
  }
  // The online maximum and sum over the thread's elements, a group of steps' loads at once.
  int mx = newLocal(body, f(-INFINITY)), sum = newLocal(body, f(0));
  for (StmtRef& s : rows.walk(false, [&](const ExprRef& step0, int64_t steps) {
         std::vector<StmtRef> step;
         std::vector<int> xs;
         ExprRef top = lf(mx);
         for (int64_t s = 0; s < steps; ++s)
           for (int64_t u = 0; u < v; ++u) {
             xs.push_back(newLocal(step, b.ld(x, rows.at(B::add(step0, B::i(s)), u))));
             top = binary(KOp::Max, top, lf(xs.back()));
           }
         int mn = newLocal(step, top);
         ExprRef fresh = binary(KOp::Eq, lf(mn), f(-INFINITY)); // nothing but -inf yet: nothing to add
         ExprRef add = select(fresh, f(0), B::mul(lf(sum), unary(KOp::Exp, B::sub(lf(mx), lf(mn)))));
         for (int xi : xs) add = B::add(add, select(fresh, f(0), unary(KOp::Exp, B::sub(lf(xi), lf(mn)))));
         step.push_back(set(sum, add));
         step.push_back(set(mx, lf(mn)));
         return step;
       }))
    body.push_back(std::move(s));
  // The warp's partials, then the block's: every warp combines the block's warps' in its lanes.
  auto scaled = [&](ExprRef m, ExprRef s, ExprRef top) { // s exp(m - top), 0 where m is -inf
    return select(binary(KOp::Eq, m, f(-INFINITY)), f(0), B::mul(std::move(s), unary(KOp::Exp, B::sub(m, std::move(top)))));
  };
  int wmax = newLocal(body, warpReduce(KOp::Max, lf(mx)));
  body.push_back(set(sum, warpReduce(KOp::Add, scaled(lf(mx), lf(sum), lf(wmax)))));
  std::vector<StmtRef> publish{sharedStore(maxes, rows.warp(), lf(wmax)), sharedStore(sums, rows.warp(), lf(sum))};
  if (wsum >= 0) {
    body.push_back(set(wsum, warpReduce(KOp::Add, lf(wsum))));
    publish.push_back(sharedStore(weights, rows.warp(), lf(wsum)));
  }
  body.push_back(when(b, binary(KOp::Eq, rows.lane(), B::i(0)), std::move(publish)));
  body.push_back(barrier());
  ExprRef mine = binary(KOp::Lt, rows.lane(), B::i(kWarps)), slot = binary(KOp::Min, rows.lane(), B::i(kWarps - 1)); // lane w: warp w's
  int m32 = newLocal(body, select(mine, sharedLoad(maxes, slot, t), f(-INFINITY)));
  body.push_back(set(mx, warpReduce(KOp::Max, lf(m32))));
  body.push_back(set(sum, warpReduce(KOp::Add, scaled(lf(m32), sharedLoad(sums, slot, t), lf(mx)))));
  if (wsum >= 0) body.push_back(set(wsum, warpReduce(KOp::Add, select(mine, sharedLoad(weights, slot, t), f(0)))));
  int lse = newLocal(body, B::add(lf(mx), unary(KOp::Log, lf(sum))));
  int wt = newLocal(body, weight(tp));
  std::vector<Kernel> ks;
  if (lossOut) {
    ExprRef loss = unary(KOp::Neg, B::mul(lf(wt), B::sub(lf(xt), lf(lse))));
    if (wsum >= 0) loss = B::div(loss, lf(wsum));
    body.push_back(when(b, isFirst, {b.atomic(lossOut, B::i(0), loss)}));
    ks.push_back(zeroKernel(name + "_zero", lossOut));
  }
  // The gradient, the row walked backwards (its last elements are the likeliest still in L2):
  // a group's values into locals, then its stores, so that neighbours merge into vectors.
  ExprRef up = red == "none" ? b.ld(dl, rows.row()) : red == "sum" ? b.ld(dl, B::i(0)) : B::div(b.ld(dl, B::i(0)), lf(wsum));
  int coef = newLocal(body, B::mul(lf(wt), up));
  ExprRef rowStart = B::mul(rows.row(), B::i(C));
  for (StmtRef& s : rows.walk(true, [&](const ExprRef& step0, int64_t steps) {
         std::vector<StmtRef> step;
         std::vector<std::pair<ExprRef, int>> values;
         for (int64_t s = 0; s < steps; ++s)
           for (int64_t u = 0; u < v; ++u) {
             ExprRef at = rows.at(B::add(step0, B::i(s)), u);
             ExprRef isT = cast(binary(KOp::Eq, B::sub(at, rowStart), tp), t);
             values.emplace_back(at, newLocal(step, B::mul(B::sub(unary(KOp::Exp, B::sub(b.ld(x, at), lf(lse))), isT), lf(coef))));
           }
         for (auto& [at, id] : values) step.push_back(b.st(dx, at, lf(id)));
         return step;
       }))
    body.push_back(std::move(s));
  body.push_back(barrier()); // the shared partials are the next row's once every warp has read them
  Kernel k = b.finish(loop(e, P * kThreads, true, std::move(body)));
  k.gpuOnly = true;
  k.threads = kThreads;
  k.minBlocks = 2; // 64 registers: two rows an SM
  ks.push_back(std::move(k));
  return ks;
}

} // namespace sgc::kir
