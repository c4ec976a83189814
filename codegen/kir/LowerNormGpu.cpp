// The GPU forms of LayerNormalization and RmsNorm and of their gradients: a warp per row, the
// row held in registers where it fits (else read again), inside a row group with the elementwise
// work before and after it; the gradients' dscale and dbias summed in dx's kernel, or by column
// sums where no dx is computed. Their partial sums meet in atomic adds, whose order varies from
// run to run on a GPU (LowerGpu.cpp's header).
#include "codegen/kir/ColumnSumsGpu.h"
#include "codegen/kir/WarpRowsGpu.h"

#include <cmath>
#include <functional>

namespace sgc::kir {
namespace {
using B = Builder;

int64_t normalizedSize(const ir::Node& n, const ir::Value* x) {
  int64_t rank = x->type.rank(), axis = n.getInt("axis", -1), M = 1;
  if (axis < 0) axis += rank;
  for (int64_t q = axis; q < rank; ++q) M *= x->type.dims[q].value;
  return M;
}

/// A warp's row of d held in registers: lane l's elements are its laneWidth(d) neighbours in each
/// step of 32 * v (loaded once, read as often as needed).
struct HeldRow {
  WarpRows& w;
  int64_t steps;
  explicit HeldRow(WarpRows& rows) : w(rows), steps(rows.d / (32 * rows.v)) {}
  int64_t size() const { return steps * w.v; }
  /// Element i's index in the tensor and its column in the row (after w.begin()).
  ExprRef at(int64_t i) const { return B::add(local(w.base, Scalar::I64), B::i((i / w.v) * 32 * w.v + i % w.v)); }
  ExprRef col(int64_t i) const { return B::add(B::mul(w.lane(), B::i(w.v)), B::i((i / w.v) * 32 * w.v + i % w.v)); }
  /// The row's elements of `value(i)` in new locals.
  std::vector<int> load(std::vector<StmtRef>& out, const std::function<ExprRef(int64_t)>& value) const {
    return locals(w.b, size(), out, value);
  }
  /// Stores outputs(i, value(i)) for every element, tensor by tensor (WarpRows::storeByTensor).
  void store(std::vector<StmtRef>& out, const std::function<ExprRef(int64_t)>& value,
             const std::function<WarpRows::Outputs(int64_t, ExprRef)>& outputs) const {
    w.storeByTensor(out, size(), value, outputs, [&](int64_t i) { return at(i); });
  }
};

/// Rows of d a warp holds in registers: at most this many elements a lane (64: a Llama's rows of
/// 2,048 normalized in one read, with the residual add before them).
constexpr int64_t kHeldPerLane = 64;

bool holdable(int64_t rows, int64_t d, ir::DType t) { return warpable(rows, d, t) && d / 32 <= kHeldPerLane; }

/// LayerNormalization (or RmsNorm) a warp per row, over a row too long to hold: mean and variance
/// by warp sums over three reads of the row (RmsNorm: the mean square over two).
Kernel layerNormStreamed(const std::string& name, const ir::Node& n, int64_t M, int64_t rows) {
  const ir::Value *x = n.input(0), *scale = n.input(1), *bias = centered(n) ? n.input(2) : nullptr, *y = n.outputs[0];
  B b(name);
  int e = b.newLoopVar(), j1 = b.newLoopVar(), j2 = b.newLoopVar(), j3 = b.newLoopVar(), mean = b.newLocal(), var = b.newLocal();
  WarpRows w{b, e, M};
  Scalar t = Scalar::F32;
  std::vector<StmtRef> body;
  if (centered(n)) {
    body = w.reduce(mean, KOp::Add, 0, j1, b.ld(x, w.at(j1)));
    body.push_back(set(mean, B::div(local(mean, t), B::c((double)M, t))));
  } else {
    body.push_back(let(mean, B::c(0, t)));
  }
  ExprRef dev = B::sub(b.ld(x, w.at(j2)), local(mean, t));
  for (auto& st : w.reduce(var, KOp::Add, 0, j2, B::mul(dev, dev))) body.push_back(st);
  int inv = b.newLocal();
  body.push_back(let(inv, B::div(B::c(1, t), unary(KOp::Sqrt, B::add(B::div(local(var, t), B::c((double)M, t)), B::c(n.getFloat("epsilon", 1e-5), t))))));
  ExprRef v = B::mul(B::mul(B::sub(b.ld(x, w.at(j3)), local(mean, t)), local(inv, t)), b.ld(scale, w.col(j3)));
  if (bias) v = B::add(v, b.ld(bias, w.col(j3)));
  body.push_back(w.each(j3, {b.st(y, w.at(j3), v)}));
  if (centered(n) && n.outputs.size() > 1 && n.outputs[1]) body.push_back(b.st(n.outputs[1], w.row(), local(mean, t)));
  if (const ir::Value* is = invStdOut(n)) body.push_back(b.st(is, w.row(), local(inv, t)));
  return warpKernel(b, e, rows, std::move(body));
}

/// LayerNormGrad's dscale and dbias results (RmsNormGrad: no dbias), each absent where unused,
/// and those present in that order.
struct NormParams {
  const ir::Value *ds, *db;
  std::vector<const ir::Value*> results;
  explicit NormParams(const ir::Node& n)
      : ds(n.outputs.size() > 1 ? n.outputs[1] : nullptr), db(centered(n) && n.outputs.size() > 2 ? n.outputs[2] : nullptr) {
    for (const ir::Value* r : {ds, db})
      if (r) results.push_back(r);
  }
  /// The kernels zeroing them: their sums are atomic adds.
  void zeroings(const std::string& name, std::vector<Kernel>& ks) const {
    for (const ir::Value* r : results) ks.push_back(zeroKernel(name + (r == ds ? "_zero_dscale" : "_zero_dbias"), r));
  }
};

constexpr int64_t kParamRows = 64; ///< rows one thread of LayerNormGrad's dscale/dbias kernel sums
constexpr int64_t kParamUnroll = 8; ///< of which it loads this many at once

/// Each row's saved mean (0 for RmsNormGrad) into local `mean` and 1 / std-dev into `inv`.
std::vector<StmtRef> rowStatistics(B& b, const ir::Node& n, const ExprRef& row, int mean, int inv) {
  Scalar t = Scalar::F32;
  return {let(mean, centered(n) ? cast(b.ld(meanIn(n), row), t) : B::c(0, t)), let(inv, cast(b.ld(invStdIn(n), row), t))};
}

/// The gradient of a normalized element from its row's sums s1 = sum(g) (centered only) and
/// s2 = sum(g xhat), g = dy scale: inv / M (M g - s1 - xhat s2).
ExprRef normGradValue(const ir::Node& n, int64_t M, const ExprRef& inv, const ExprRef& g, const ExprRef& xhat, const ExprRef& s1, const ExprRef& s2) {
  Scalar t = Scalar::F32;
  ExprRef centeredG = B::mul(B::c((double)M, t), g);
  if (centered(n)) centeredG = B::sub(centeredG, s1);
  return B::mul(B::div(inv, B::c((double)M, t)), B::sub(centeredG, B::mul(xhat, s2)));
}

/// A row's dy (after the prologue) and xhat, as locals of normGradRow.
struct NormGradRow {
  std::vector<int> dy, xhat;
};

/// LayerNormGrad's (or RmsNormGrad's) dx for the warp's row held in registers (after w.begin()):
/// the row's two sums (RmsNormGrad: one), then dx, into `body`; `withTerms` adds statements that
/// read the row's dy and xhat as soon as they are known (while fewer values are live).
void normGradRow(const ir::Node& n, int64_t M, WarpRows& w, const HeldRow& row, RowIo& io, std::vector<StmtRef>& body,
                 const std::function<void(const NormGradRow&)>& withTerms = nullptr) {
  const ir::Value *x = n.input(0), *scale = n.input(1), *dy = n.input(2), *dx = n.outputs[0];
  Scalar t = Scalar::F32;
  auto f = [&](double v) { return B::c(v, t); };
  B& b = io.b;
  int mean = b.newLocal(), inv = b.newLocal(), s1 = b.newLocal(), s2 = b.newLocal();
  auto xs = row.load(body, [&](int64_t i) { return b.ld(x, row.at(i)); });
  auto dys = row.load(body, [&](int64_t i) { return io.ld(dy, row.at(i)); });
  for (StmtRef& st : rowStatistics(b, n, w.row(), mean, inv)) body.push_back(std::move(st));
  auto xh = row.load(body, [&](int64_t i) { return B::mul(B::sub(local(xs[i], t), local(mean, t)), local(inv, t)); });
  if (withTerms) withTerms({dys, xh});
  auto gs = row.load(body, [&](int64_t i) { return B::mul(local(dys[i], t), b.ld(scale, row.col(i))); });
  std::vector<ExprRef> sum1, sum2;
  for (int64_t i = 0; i < row.size(); ++i) {
    sum1.push_back(local(gs[i], t));
    sum2.push_back(B::mul(local(gs[i], t), local(xh[i], t)));
  }
  body.push_back(let(s1, centered(n) ? warpReduce(KOp::Add, sumTree(sum1)) : f(0)));
  body.push_back(let(s2, warpReduce(KOp::Add, sumTree(sum2))));
  auto value = [&](int64_t i) { return normGradValue(n, M, local(inv, t), local(gs[i], t), local(xh[i], t), local(s1, t), local(s2, t)); };
  row.store(body, value, [&](int64_t i, ExprRef v) { return io.outputs(dx, row.at(i), std::move(v)); });
}

/// LayerNormGrad's (or RmsNormGrad's) dx, a warp per row held in registers.
Kernel layerNormGradDx(const ir::Node& n, int64_t M, int64_t rows, RowIo& io) {
  int e = io.b.newLoopVar();
  WarpRows w{io.b, e, M, laneWidth(M)};
  std::vector<StmtRef> body{w.begin()};
  HeldRow row(w);
  normGradRow(n, M, w, row, io, body);
  return warpKernel(io.b, e, rows, std::move(body));
}

constexpr int kNormWarps = 8;     ///< warps of a block of the fused LayerNormGrad form
constexpr int64_t kNormWalk = 4;  ///< rows each of them takes one after another

/// LayerNormGrad's dx with its dscale and dbias in one kernel, rows held in registers. A block of
/// kNormWarps warps; each walks `walk` rows (block * 8 walk + 8 r + warp, r < walk) as
/// layerNormGradDx's warp takes one, and adds each row's dscale terms (dy xhat) and dbias terms
/// (dy) into its own row of shared memory. Then each thread of the block sums columns over the
/// warps and adds them atomically into the zeroed results: x and dy are read once (not again by
/// a column sums kernel), and rows / (8 walk) atomic adds meet at a column. A lane's v elements
/// start at (v + 1) lane in its shared row (one pad element each v): no bank conflicts.
std::optional<Kernel> layerNormGradFused(const ir::Node& n, int64_t M, int64_t rows, RowIo& io, const NormParams& params) {
  const std::vector<const ir::Value*>& results = params.results;
  B& b = io.b;
  Scalar t = Scalar::F32;
  int64_t walk = kNormWalk, K = (int64_t)results.size();
  while (walk > 1 && rows % (kNormWarps * walk)) walk /= 2;
  int e = b.newLoopVar(), r = b.newLoopVar();
  WarpRows w{b, e, M, laneWidth(M)};
  const int64_t threads = 32 * kNormWarps, stride = M + M / w.v; // a warp's padded shared row
  if (rows % (kNormWarps * walk) || rows / (kNormWarps * walk) > kMostGridBlocks || K * kNormWarps * stride * 4 > kMostShared) return std::nullopt;
  ExprRef tid = binary(KOp::IMod, loopVar(e), B::i(threads)), warp = binary(KOp::IDiv, tid, B::i(32));
  ExprRef block = binary(KOp::IDiv, loopVar(e), B::i(threads));
  int terms = (int)b.k.shared.size(); // [k][warp][padded column]
  b.k.shared.push_back({ir::DType::F32, K * kNormWarps * stride});
  auto at = [&](int64_t k, const ExprRef& wp, const ExprRef& padded) { return B::add(B::mul(B::add(B::i(k * kNormWarps), wp), B::i(stride)), padded); };
  HeldRow row(w);
  // Element i of the lane's row at the lane's first (padded) column plus a constant: col + col / v
  // with col = v lane + 32 v (i / v) + i % v.
  int first = b.newLocal();
  std::vector<StmtRef> body{let(first, at(0, warp, B::mul(w.lane(), B::i(w.v + 1))))};
  auto mine = [&](int64_t k, int64_t i) { return B::add(local(first, Scalar::I64), B::i(k * kNormWarps * stride + (i / w.v) * 32 * (w.v + 1) + i % w.v)); };
  for (int64_t k = 0; k < K; ++k) // the warp's own shared row: only its lanes touch it before the barrier
    for (int64_t i = 0; i < row.size(); ++i) body.push_back(sharedStore(terms, mine(k, i), B::c(0, t)));
  w.rowExpr = B::add(B::add(B::mul(block, B::i(kNormWarps * walk)), B::mul(loopVar(r), B::i(kNormWarps))), warp);
  std::vector<StmtRef> step{w.begin()};
  normGradRow(n, M, w, row, io, step, [&](const NormGradRow& got) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < row.size(); ++i) {
        ExprRef term = results[k] == params.db ? local(got.dy[i], t) : B::mul(local(got.dy[i], t), local(got.xhat[i], t));
        step.push_back(sharedStore(terms, mine(k, i), B::add(sharedLoad(terms, mine(k, i), t), term)));
      }
  });
  body.push_back(loop(r, walk, false, std::move(step)));
  body.push_back(barrier());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c0 = 0; c0 < M; c0 += threads) { // a thread a column: a warp's atomic adds on neighbours
      ExprRef c = B::add(B::i(c0), tid);
      std::vector<ExprRef> parts;
      for (int64_t wp = 0; wp < kNormWarps; ++wp) parts.push_back(sharedLoad(terms, at(k, B::i(wp), B::add(c, binary(KOp::IDiv, c, B::i(w.v)))), t));
      StmtRef add = b.atomic(results[k], c, sumTree(parts));
      body.push_back(M - c0 >= threads ? add : when(b, binary(KOp::Lt, c, B::i(M)), {add}));
    }
  body.push_back(barrier()); // a grid-stride loop's next rows reuse the shared rows
  Kernel kernel = warpKernel(b, e, rows / walk, std::move(body));
  kernel.threads = (int)threads;
  return kernel;
}

/// LayerNormGrad's dscale and dbias: column sums a block per tile (ColumnSumsGpu.h) where the
/// row fits its tiles; else a thread per (v neighbouring columns, kParamRows rows), the columns
/// fastest (each row's loads coalesce), kParamUnroll rows loaded at once. The sums meet in atomic
/// adds (after zeroing kernels).
std::vector<Kernel> layerNormGradParams(const std::string& name, const ir::Node& n, int64_t M, int64_t rows, RowIo& io) {
  const ir::Value *x = n.input(0), *dy = n.input(2);
  NormParams params(n);
  const ir::Value *ds = params.ds, *db = params.db;
  const std::vector<const ir::Value*>& results = params.results;
  std::vector<Kernel> ks;
  if (results.empty()) return ks;
  Scalar t = Scalar::F32;
  B& b = io.b;
  params.zeroings(name, ks);
  int lanes = columnLaneWidth(std::max(ir::dtypeSize(x->type.dtype), ir::dtypeSize(dy->type.dtype)));
  auto blocks = blockColumnSums(b, rows, M, lanes, results, [&](const ExprRef& row, const ExprRef& col0) {
    ColumnTerms ct;
    int mean = b.newLocal(), inv = b.newLocal();
    ct.setup = rowStatistics(b, n, row, mean, inv);
    for (const ir::Value* r : results) {
      ct.terms.emplace_back();
      for (int u = 0; u < lanes; ++u) {
        ExprRef at = row * M + col0 + u, g = io.ld(dy, at);
        ct.terms.back().push_back(r == db ? g : g * ((b.ld(x, at) - local(mean, t)) * local(inv, t)));
      }
    }
    return ct;
  });
  if (blocks) {
    ks.push_back(std::move(*blocks));
    return ks;
  }
  int64_t v = M % 4 == 0 ? 4 : M % 2 == 0 ? 2 : 1, groups = M / v, chunk = kParamRows, unroll = kParamUnroll;
  while (rows % chunk) chunk /= 2;
  unroll = std::min(unroll, chunk);
  int e = b.newLoopVar(), r = b.newLoopVar();
  ExprRef c0 = B::mul(binary(KOp::IMod, loopVar(e), B::i(groups)), B::i(v)), q = binary(KOp::IDiv, loopVar(e), B::i(groups));
  std::vector<StmtRef> body;
  auto zeros = [&](int64_t) { return B::c(0, t); };
  auto sds = locals(b, v, body, zeros), sdb = locals(b, v, body, zeros);
  std::vector<StmtRef> step, sums;
  for (int64_t k = 0; k < unroll; ++k) {
    ExprRef row = B::add(B::add(B::mul(q, B::i(chunk)), B::mul(loopVar(r), B::i(unroll))), B::i(k));
    int mean = b.newLocal(), inv = b.newLocal();
    for (StmtRef& st : rowStatistics(b, n, row, mean, inv)) step.push_back(std::move(st));
    auto at = [&](int64_t u) { return B::add(B::add(B::mul(row, B::i(M)), c0), B::i(u)); };
    auto xs = locals(b, v, step, [&](int64_t u) { return b.ld(x, at(u)); });
    auto dys = locals(b, v, step, [&](int64_t u) { return io.ld(dy, at(u)); });
    for (int64_t u = 0; u < v; ++u) {
      ExprRef xh = B::mul(B::sub(local(xs[u], t), local(mean, t)), local(inv, t));
      sums.push_back(set(sds[u], B::add(local(sds[u], t), B::mul(local(dys[u], t), xh))));
      if (db) sums.push_back(set(sdb[u], B::add(local(sdb[u], t), local(dys[u], t))));
    }
  }
  step.insert(step.end(), sums.begin(), sums.end()); // every row's loads before any sum
  body.push_back(loop(r, chunk / unroll, false, std::move(step)));
  for (int64_t u = 0; u < v; ++u) {
    ExprRef col = B::add(c0, B::i(u));
    if (ds) body.push_back(b.atomic(ds, col, local(sds[u], t)));
    if (db) body.push_back(b.atomic(db, col, local(sdb[u], t)));
  }
  ks.push_back(b.finish(loop(e, groups * (rows / chunk), true, std::move(body))));
  return ks;
}

/// LayerNormGrad's dx over a row too long to hold: a warp per row, its two sums from one read of
/// the row, dx from a second.
Kernel layerNormGradDxStreamed(const std::string& name, const ir::Node& n, int64_t M, int64_t rows) {
  const ir::Value *x = n.input(0), *scale = n.input(1), *dy = n.input(2);
  Scalar t = Scalar::F32;
  B b(name);
  int e = b.newLoopVar(), j1 = b.newLoopVar(), j2 = b.newLoopVar(), mean = b.newLocal(), inv = b.newLocal(), s1 = b.newLocal(), s2 = b.newLocal();
  WarpRows w{b, e, M};
  auto xhat = [&](int j) { return B::mul(B::sub(b.ld(x, w.at(j)), local(mean, t)), local(inv, t)); };
  auto dxhat = [&](int j) { return B::mul(b.ld(dy, w.at(j)), b.ld(scale, w.col(j))); };
  std::vector<StmtRef> body = rowStatistics(b, n, w.row(), mean, inv);
  for (StmtRef st : {let(s1, B::c(0, t)), let(s2, B::c(0, t)),
                     w.each(j1, {set(s1, B::add(local(s1, t), dxhat(j1))), set(s2, B::add(local(s2, t), B::mul(dxhat(j1), xhat(j1))))}),
                     set(s1, warpReduce(KOp::Add, local(s1, t))), set(s2, warpReduce(KOp::Add, local(s2, t)))})
    body.push_back(std::move(st));
  ExprRef dx = normGradValue(n, M, local(inv, t), dxhat(j2), xhat(j2), local(s1, t), local(s2, t));
  body.push_back(w.each(j2, {b.st(n.outputs[0], w.at(j2), dx)}));
  return warpKernel(b, e, rows, std::move(body));
}

} // namespace

/// LayerNormalization, a warp per row held in registers: mean and variance by warp sums, then
/// the row; in a row group, x may come from a prologue and y go on through an epilogue. Rows too
/// long to hold: layerNormStreamed (alone, not in a group).
std::optional<std::vector<Kernel>> layerNormGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error) {
  const ir::Value *x = n.input(0), *scale = n.input(1), *bias = centered(n) ? n.input(2) : nullptr, *y = n.outputs[0];
  int64_t M = normalizedSize(n, x), rows = x->type.staticNumel().value() / std::max<int64_t>(M, 1);
  if (!warpable(rows, M, x->type.dtype) || scale->type.staticNumel() != M || (bias && bias->type.staticNumel() != M)) return std::nullopt;
  if (!holdable(rows, M, x->type.dtype)) return g ? std::nullopt : std::optional<std::vector<Kernel>>({layerNormStreamed(name, n, M, rows)});
  B b(name);
  RowIo io{b, g, {}};
  int e = b.newLoopVar(), mean = b.newLocal(), var = b.newLocal(), inv = b.newLocal();
  WarpRows w{b, e, M, laneWidth(M)};
  Scalar t = Scalar::F32;
  auto f = [&](double v) { return B::c(v, t); };
  std::vector<StmtRef> body{w.begin()};
  HeldRow row(w);
  auto xs = row.load(body, [&](int64_t i) { return io.ld(x, row.at(i)); });
  if (g && g->storePrologue) // x, computed here from the prologue, is read after the group too
    for (int64_t i = 0; i < row.size(); ++i) body.push_back(b.st(x, row.at(i), local(xs[i], t)));
  std::vector<ExprRef> terms;
  for (int id : xs) terms.push_back(local(id, t));
  body.push_back(let(mean, centered(n) ? B::div(warpReduce(KOp::Add, sumTree(terms)), f((double)M)) : f(0)));
  terms.clear();
  for (int id : xs) terms.push_back(B::mul(B::sub(local(id, t), local(mean, t)), B::sub(local(id, t), local(mean, t))));
  body.push_back(let(var, warpReduce(KOp::Add, sumTree(terms))));
  body.push_back(let(inv, B::div(f(1), unary(KOp::Sqrt, B::add(B::div(local(var, t), f((double)M)), f(n.getFloat("epsilon", 1e-5)))))));
  auto value = [&](int64_t i) {
    ExprRef v = B::mul(B::mul(B::sub(local(xs[i], t), local(mean, t)), local(inv, t)), b.ld(scale, row.col(i)));
    return bias ? B::add(v, b.ld(bias, row.col(i))) : v;
  };
  row.store(body, value, [&](int64_t i, ExprRef v) { return io.outputs(y, row.at(i), std::move(v)); });
  // Every lane stores the same statistics (the same value to the same address).
  if (centered(n) && n.outputs.size() > 1 && n.outputs[1]) body.push_back(b.st(n.outputs[1], w.row(), local(mean, t)));
  if (const ir::Value* is = invStdOut(n)) body.push_back(b.st(is, w.row(), local(inv, t)));
  error = io.error;
  return std::vector<Kernel>{warpKernel(b, e, rows, std::move(body))};
}

/// LayerNormGrad: dx a warp per row held in registers (in a row group, dy may come from a
/// prologue and dx go on through an epilogue), with dscale and dbias summed in the same kernel
/// (layerNormGradFused); or over rows too long to hold, read twice (alone, not in a group), and
/// dscale and dbias by chunks of rows, as they are without dx.
std::optional<std::vector<Kernel>> layerNormGradGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error) {
  const ir::Value *x = n.input(0), *scale = n.input(1);
  int64_t M = normalizedSize(n, x), rows = x->type.staticNumel().value() / std::max<int64_t>(M, 1);
  if (!warpable(rows, M, x->type.dtype) || scale->type.staticNumel() != M || (centered(n) && !meanIn(n)) || !invStdIn(n)) return std::nullopt;
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (n.outputs[o] && n.outputs[o]->type.dtype != ir::DType::F32) return std::nullopt;
  bool held = holdable(rows, M, x->type.dtype);
  if (!held && g) return std::nullopt; // the group's kernels one after another
  std::vector<Kernel> ks;
  B dxb(name + "_dx"), pb(name + "_dparams");
  RowIo dxio{dxb, g, {}}, pio{pb, g, {}};
  NormParams params(n);
  if (held && n.outputs[0] && !params.results.empty()) {
    B fb(name + "_fused");
    RowIo fio{fb, g, {}};
    if (std::optional<Kernel> fused = layerNormGradFused(n, M, rows, fio, params)) {
      params.zeroings(name, ks);
      ks.push_back(std::move(*fused));
      error = fio.error;
      return ks;
    }
  }
  if (n.outputs[0]) ks.push_back(held ? layerNormGradDx(n, M, rows, dxio) : layerNormGradDxStreamed(name + "_dx", n, M, rows));
  for (Kernel& k : layerNormGradParams(name, n, M, rows, pio)) ks.push_back(std::move(k));
  error = !dxio.error.empty() ? dxio.error : pio.error;
  return ks;
}

} // namespace sgc::kir
