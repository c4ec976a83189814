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
// A thread moves 16 bytes a load: v neighbours from a multiple of v in the buffer.
// Where the class count is no multiple of v (GPT-2's 50,257), a row's first and
// last few elements (fewer than 2v) lie outside its whole vectors and go one a
// thread.
//
// A row's partial results meet in two steps: a warp's lanes by warpReduce,
// then the block's 16 warps through shared memory, each warp combining the 16
// partials in its lanes (one exp a thread, not 16).
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <algorithm>
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

/// Thread tid (e % kThreads) of the block of row e / kThreads visits the row's elements v at a
/// time: in step s the vector q0 + kThreads s + tid, where q0 is the row's first whole vector (v
/// elements from a multiple of v in the buffer, so that they move as one 16-byte access even
/// where the row length C is no multiple of v: GPT-2's 50,257 classes). A row has `full()` whole
/// steps, then a part step on the threads whose vector is still the row's; and where C is no
/// multiple of v, the row's edges (fewer than 2v elements before its first whole vector and
/// after its last), one a thread.
struct BlockRow {
  B& b;
  int e;
  int64_t C, v;
  int q = -1, nv = -1, first = -1; ///< locals: the thread's vector in step 0, the row's whole vectors, its first
  bool even() const { return C % v == 0; } ///< every row's vectors start at the row
  ExprRef row() const { return binary(KOp::IDiv, loopVar(e), B::i(kThreads)); }
  ExprRef tid() const { return binary(KOp::IMod, loopVar(e), B::i(kThreads)); }
  ExprRef lane() const { return binary(KOp::IMod, tid(), B::i(32)); }
  ExprRef warp() const { return binary(KOp::IDiv, tid(), B::i(32)); }
  ExprRef rowStart() const { return B::mul(row(), B::i(C)); }
  /// Whole steps: of C / v vectors, or of one fewer where a row's first vector may start past its start.
  int64_t full() const { return (C / v - (even() ? 0 : 1)) / kThreads; }
  std::vector<StmtRef> begin() {
    first = b.newLocal(), nv = b.newLocal(), q = b.newLocal();
    ExprRef q0 = binary(KOp::IDiv, B::add(rowStart(), B::i(v - 1)), B::i(v)); // ceil(row start / v)
    ExprRef count = even() ? B::i(C / v) : B::sub(binary(KOp::IDiv, B::add(rowStart(), B::i(C)), B::i(v)), local(first, Scalar::I64));
    return {let(first, q0), let(nv, count), let(q, B::add(local(first, Scalar::I64), tid()))};
  }
  /// Element u of step `step` (an i64 expression), as its flat index: v times a vector's index,
  /// plus u, so that LLVM sees v neighbours aligned to v.
  ExprRef at(const ExprRef& step, int64_t u) const {
    return B::add(B::mul(B::add(local(q, Scalar::I64), B::mul(step, B::i(kThreads))), B::i(v)), B::i(u));
  }
  std::vector<ExprRef> ats(const ExprRef& step0, int64_t steps) const {
    std::vector<ExprRef> out;
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t u = 0; u < v; ++u) out.push_back(at(B::add(step0, B::i(s)), u));
    return out;
  }
  /// The row's edge element of this thread, where tid < the edges' count: the h = v q0 - start
  /// before the first whole vector, then those after the last.
  std::pair<ExprRef, ExprRef> edge() const {
    ExprRef q0 = local(first, Scalar::I64), start = rowStart(), count = local(nv, Scalar::I64);
    ExprRef head = B::sub(B::mul(q0, B::i(v)), start);
    ExprRef edges = B::sub(B::i(C), B::mul(count, B::i(v)));
    ExprRef at = select(binary(KOp::Lt, tid(), head), B::add(start, tid()), B::add(B::mul(B::add(q0, count), B::i(v)), B::sub(tid(), head)));
    return {binary(KOp::Lt, tid(), edges), at};
  }
  /// body(indices) for each group of up to kUnroll whole steps (`backwards`: from the row's end),
  /// then the part step and the edges, on the threads that have them (backwards: those first).
  std::vector<StmtRef> walk(bool backwards, const std::function<std::vector<StmtRef>(const std::vector<ExprRef>& at)>& body) const {
    std::vector<StmtRef> wholes, rest;
    int64_t u = std::min<int64_t>(kUnroll, std::max<int64_t>(full(), 1)), groups = full() / u, left = full() % u;
    if (groups) {
      int j = b.newLoopVar();
      ExprRef g = backwards ? B::sub(B::i(groups - 1), loopVar(j)) : loopVar(j);
      wholes.push_back(loop(j, groups, false, body(ats(B::mul(g, B::i(u)), u))));
    }
    if (left) wholes.insert(backwards ? wholes.begin() : wholes.end(), block(body(ats(B::i(groups * u), left))));
    int64_t partFirst = full() * kThreads; // the part step's first vector
    if (!even() || partFirst < C / v)
      rest.push_back(when(b, binary(KOp::Lt, B::add(B::i(partFirst), tid()), local(nv, Scalar::I64)), body(ats(B::i(full()), 1))));
    if (!even()) {
      auto [has, at] = edge();
      rest.push_back(when(b, has, body({at})));
    }
    if (backwards) std::reverse(rest.begin(), rest.end());
    std::vector<StmtRef> out = backwards ? std::move(rest) : std::move(wholes);
    for (StmtRef& st : backwards ? wholes : rest) out.push_back(std::move(st));
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
  // 16-byte loads, from the buffer's vectors whatever C (BlockRow); rows shorter than two
  // vectors in vectors that divide them.
  size_t bytes = ir::dtypeSize(x->type.dtype);
  int64_t widest = widestVector(bytes), v = C >= 2 * widest ? widest : storeVectorWidth(bytes, C);
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
  std::vector<StmtRef> body = rows.begin();
  ExprRef tp = tgt(rows.row());
  ExprRef isFirst = binary(KOp::Eq, rows.tid(), B::i(0));
  int xt = -1;
  if (lossOut) { // the target's score, read before the barrier that every write of the gradient follows
    xt = newLocal(body, f(0));
    body.push_back(when(b, isFirst, {set(xt, b.ld(x, B::add(rows.rowStart(), B::clamp(tp, C))))}));
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
  for (StmtRef& s : rows.walk(false, [&](const std::vector<ExprRef>& ats) {
         std::vector<StmtRef> step;
         std::vector<int> xs;
         ExprRef top = lf(mx);
         for (const ExprRef& at : ats) {
           xs.push_back(newLocal(step, b.ld(x, at)));
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
  ExprRef rowStart = rows.rowStart();
  for (StmtRef& s : rows.walk(true, [&](const std::vector<ExprRef>& ats) {
         std::vector<StmtRef> step;
         std::vector<std::pair<ExprRef, int>> values;
         for (const ExprRef& at : ats) {
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
