// GPU forms of the lowerings that give a GPU too little parallelism: a
// reduction to few results (a bias gradient: 768 sums of 16384 terms; a mean
// loss: one sum), an embedding gradient (each result scanning every index)
// and a loss total. A CPU runs the generic kernels, whose per-result loops
// fill its few cores; a GPU needs tens of thousands of threads. Here the work
// is split into chunks across threads and the partial results meet in the
// zeroed output through atomic adds (f32 results only). The order of those
// adds varies, so the last bits of these results may vary from run to run on
// a GPU, as with PyTorch's atomic-based CUDA kernels.
#include "codegen/kir/Builder.h"
#include "codegen/kir/ColumnSumsGpu.h"
#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"
#include "codegen/kir/WarpRowsGpu.h"

#include <cassert>
#include <cmath>
#include <functional>
#include <set>

namespace sgc::kir {

Expected<std::vector<Kernel>> lowerLossGpu(const std::string& name, const ir::Node& n); // LowerMath.cpp
Expected<std::optional<std::vector<Kernel>>> sampleGpu(const std::string& name, const ir::Node& n); // LowerSample.cpp
/// LowerSceBlockGpu.cpp: a block per row, from 8,192 classes (or any count, with `shortRows`).
std::optional<std::vector<Kernel>> sceBlockGpu(const std::string& name, const ir::Node& n, bool shortRows = false);

namespace {
using B = Builder;

constexpr int64_t kFewResults = 1 << 16; ///< at most this many results: split the reduction
constexpr int64_t kLongLoop = 1024;      ///< and only when each result sums at least this many terms
constexpr int64_t kChunk = 256;          ///< terms one thread sums before its atomic add
constexpr int64_t kManyResults = 256;    ///< from this many results (bias gradients: 768 columns), chunks of
constexpr int64_t kShortChunk = 64;      ///< this many terms: 4x the threads, each result's atomics spread wider

/// y[o] = scale * sum over r of x[o, r], where `reduced` names x's summed dims: a zeroing kernel,
/// then one parallel iteration per (result, chunk of terms), result fastest (coalesced loads when
/// the kept dims are innermost, as in a bias gradient).
std::optional<std::vector<Kernel>> splitReduction(const std::string& name, const ir::Value* x, const ir::Value* y,
                                                  const std::set<int64_t>& reduced, double scale) {
  std::vector<int64_t> xs = x->type.shape(), keptShape, redShape;
  std::vector<int64_t> keptDims, redDims;
  for (int64_t d = 0; d < (int64_t)xs.size(); ++d) {
    (reduced.count(d) ? redDims : keptDims).push_back(d);
    (reduced.count(d) ? redShape : keptShape).push_back(xs[d]);
  }
  int64_t outer = 1, extent = 1;
  for (int64_t s : keptShape) outer *= s;
  for (int64_t s : redShape) extent *= s;
  if (y->type.dtype != ir::DType::F32 || outer > kFewResults || extent < kLongLoop) return std::nullopt;
  int64_t chunk = outer >= kManyResults ? kShortChunk : kChunk;
  while (extent % chunk) chunk /= 2; // a power of two dividing the terms
  if (chunk < 16) return std::nullopt;
  B b(name);
  int e = b.newLoopVar(), j = b.newLoopVar(), acc = b.newLocal();
  ExprRef o = binary(KOp::IMod, loopVar(e), B::i(outer)), c = binary(KOp::IDiv, loopVar(e), B::i(outer));
  auto kc = B::coords(o, keptShape), rc = B::coords(B::add(B::mul(c, B::i(chunk)), loopVar(j)), redShape);
  std::vector<ExprRef> xc(xs.size());
  for (size_t q = 0; q < keptDims.size(); ++q) xc[keptDims[q]] = kc[q];
  for (size_t q = 0; q < redDims.size(); ++q) xc[redDims[q]] = rc[q];
  Scalar t = computeType(x->type.dtype);
  ExprRef sum = local(acc, t);
  if (scale != 1) sum = B::mul(sum, B::c(scale, t));
  std::vector<Kernel> ks{zeroKernel(name + "_zero", y)};
  ks.push_back(b.finish(loop(e, outer * (extent / chunk), true,
                             {let(acc, B::c(0, t)), loop(j, chunk, false, {set(acc, B::add(local(acc, t), b.ld(x, B::offset(xc, xs))))}),
                              b.atomic(y, o, sum)})));
  return ks;
}

/// dx[a, idx[k], i] += dy[a, k, i]: one parallel iteration per element of dy, after zeroing dx.
std::optional<std::vector<Kernel>> gatherGradGpu(const std::string& name, const ir::Node& n) {
  const ir::Value *dy = n.input(0), *idx = n.input(1), *dx = n.outputs[0];
  if (dx->type.dtype != ir::DType::F32) return std::nullopt;
  std::vector<int64_t> xs = dx->type.shape();
  int64_t axis = n.getInt("axis", 0);
  if (axis < 0) axis += (int64_t)xs.size();
  int64_t count = idx->type.staticNumel().value(), d = xs[axis], inner = 1;
  for (size_t q = axis + 1; q < xs.size(); ++q) inner *= xs[q];
  B b(name);
  int e = b.newLoopVar();
  ExprRef a = binary(KOp::IDiv, loopVar(e), B::i(count * inner)), k = binary(KOp::IMod, binary(KOp::IDiv, loopVar(e), B::i(inner)), B::i(count)),
          i = binary(KOp::IMod, loopVar(e), B::i(inner));
  ExprRef j = gatheredIndex(b, idx, k, d);
  ExprRef at = B::add(B::mul(B::add(B::mul(a, B::i(d)), j), B::i(inner)), i);
  std::vector<Kernel> ks{zeroKernel(name + "_zero", dx)};
  ks.push_back(b.finish(loop(e, dy->type.staticNumel().value(), true, {b.atomic(dx, at, b.ld(dy, loopVar(e)))})));
  return ks;
}


/// y[o] = scale * sum over r of x[o, r] where the summed dims are x's last (x read as [outer,
/// extent], rows contiguous): a warp per span of its row (lanes on neighbouring terms, so that the
/// loads coalesce and merge into vectors), the span's sum by the warp, and one atomic add a warp
/// into the zeroed result. A loss's mean over all of a batch is 8,192 such warps, not 131,072
/// threads each reading 256 terms 1 KB apart from its neighbours' and adding them atomically.
std::optional<std::vector<Kernel>> trailingReduction(const std::string& name, const ir::Value* x, const ir::Value* y, int64_t outer,
                                                     int64_t extent, double scale) {
  constexpr int64_t kMostSpan = 32 * 128, kLeastSpan = 32 * 4; // terms a warp sums: 128 a lane at most, 4 at least
  int64_t span = kMostSpan;
  while (span > kLeastSpan && extent % span) span /= 2;
  if (y->type.dtype != ir::DType::F32 || extent < kLongLoop || extent % span || !warpable(outer, span, x->type.dtype)) return std::nullopt;
  B b(name);
  int e = b.newLoopVar(), j = b.newLoopVar(), acc = b.newLocal();
  WarpRows rows{b, e, span, laneWidth(span)};
  std::vector<StmtRef> body{rows.begin()};
  for (StmtRef& st : rows.reduce(acc, KOp::Add, 0, j, [&](int u) { return b.ld(x, rows.at(j, u)); })) body.push_back(std::move(st));
  ExprRef sum = local(acc, Scalar::F32);
  if (scale != 1) sum = B::mul(sum, B::c(scale, Scalar::F32));
  ExprRef result = binary(KOp::IDiv, rows.row(), B::i(extent / span));
  body.push_back(when(b, binary(KOp::Eq, rows.lane(), B::i(0)), {b.atomic(y, result, sum)}));
  return std::vector<Kernel>{zeroKernel(name + "_zero", y), warpKernel(b, e, outer * (extent / span), std::move(body))};
}

std::optional<std::vector<Kernel>> columnSums(const std::string& name, const ir::Value* x, const ir::Value* y, int64_t rows, int64_t C,
                                              double scale, const RowGroup* g, std::string& error);

/// A SumTo over x's leading dims (a bias gradient): x as [rows, C], the result its C columns;
/// none for other sums or shapes not static.
std::optional<std::pair<int64_t, int64_t>> leadingSum(const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs.empty() ? nullptr : n.outputs[0];
  if (n.op != ir::Op::SumTo || !y || !x->type.isStatic() || !y->type.isStatic() || y->type.rank() >= x->type.rank()) return std::nullopt;
  std::vector<int64_t> xs = x->type.shape(), ys = y->type.shape();
  if (!std::equal(ys.begin(), ys.end(), xs.end() - (std::ptrdiff_t)ys.size())) return std::nullopt;
  int64_t C = y->type.staticNumel().value();
  return std::make_pair(x->type.staticNumel().value() / std::max<int64_t>(C, 1), C);
}

std::optional<std::vector<Kernel>> reduceGpu(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  int64_t rank = x->type.rank();
  std::set<int64_t> axes;
  if (n.op == ir::Op::SumTo) { // the dims y lacks or has as 1 where x does not
    std::vector<int64_t> xs = x->type.shape(), ys = y->type.shape();
    size_t lead = xs.size() - ys.size();
    for (size_t d = 0; d < xs.size(); ++d)
      if (d < lead || (ys[d - lead] == 1 && xs[d] != 1)) axes.insert((int64_t)d);
  } else {
    if (n.input(1)) {
      if (n.input(1)->kind != ir::ValueKind::Const) return std::nullopt;
      for (int64_t a : n.input(1)->data->toI64()) axes.insert(a < 0 ? a + rank : a);
    }
    if (axes.empty() && !n.getInt("noop_with_empty_axes", 0))
      for (int64_t d = 0; d < rank; ++d) axes.insert(d);
  }
  int64_t extent = 1;
  for (int64_t d : axes) extent *= x->type.dims[d].value;
  double scale = n.op == ir::Op::ReduceMean ? 1.0 / (double)extent : 1.0;
  bool trailing = !axes.empty() && *axes.begin() == rank - (int64_t)axes.size(); // the summed dims are x's last
  if (trailing)
    if (auto ks = trailingReduction(name, x, y, x->type.staticNumel().value() / extent, extent, scale)) return ks;
  bool leading = !axes.empty() && *axes.rbegin() == (int64_t)axes.size() - 1; // the summed dims are x's first
  std::string error; // (no group: nothing to fail)
  if (leading)
    if (auto ks = columnSums(name, x, y, extent, x->type.staticNumel().value() / extent, scale, nullptr, error)) return ks;
  return splitReduction(name, x, y, axes, scale);
}


/// y[c] = scale * sum over r of x[r, c] where the summed dims are x's first (x read as [rows, C]):
/// a block per tile of columns and chunk of rows (ColumnSumsGpu.h). A bias gradient; in a row group
/// x computed by its prologue where it is summed (the GELU gradient), and stored there when read
/// outside the group.
std::optional<std::vector<Kernel>> columnSums(const std::string& name, const ir::Value* x, const ir::Value* y, int64_t rows, int64_t C,
                                              double scale, const RowGroup* g, std::string& error) {
  if (y->type.dtype != ir::DType::F32 || computeType(x->type.dtype) != Scalar::F32 || rows < kLongLoop) return std::nullopt;
  B b(name);
  RowIo io{b, g, {}};
  bool computed = g && !g->prologue.empty();
  int v = columnLaneWidth(ir::dtypeSize(x->type.dtype));
  auto k = blockColumnSums(b, rows, C, v, {y}, [&](const ExprRef& row, const ExprRef& col0) {
    ColumnTerms ct{{}, {{}}, {}};
    for (int u = 0; u < v; ++u) { // a computed operand summed as its stored (narrow) value is, as a CPU sums it
      ExprRef term = io.ld(x, row * C + col0 + u);
      if (computed && x->type.dtype == ir::DType::BF16) term = unary(KOp::RoundBf16, term);
      if (computed && x->type.dtype == ir::DType::F16) term = unary(KOp::RoundF16, term);
      ct.terms[0].push_back(scale == 1 ? term : term * scale);
    }
    if (g && g->storePrologue)
      ct.after = [&b, x, row, col0, C, scale](const std::vector<ExprRef>& values) {
        assert(scale == 1 && "a column sum that stores its operand is a SumTo");
        std::vector<StmtRef> stores;
        for (size_t u = 0; u < values.size(); ++u) stores.push_back(b.st(x, row * C + col0 + (double)u, values[u]));
        return stores;
      };
    return ct;
  });
  error = io.error;
  if (!k) return std::nullopt;
  return std::vector<Kernel>{zeroKernel(name + "_zero", y), std::move(*k)};
}

/// A column sum (SumTo over leading dims) with the elementwise nodes that compute its operand.
std::optional<std::vector<Kernel>> columnSumGroupGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error) {
  auto shape = leadingSum(n);
  if (!shape) return std::nullopt;
  return columnSums(name, n.input(0), n.outputs[0], shape->first, shape->second, 1, g, error);
}

/// Softmax / LogSoftmax over the last axis, a warp per row.
std::optional<std::vector<Kernel>> softmaxGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  int64_t rank = x->type.rank(), axis = n.getInt("axis", -1);
  if (axis < 0) axis += rank;
  int64_t d = x->type.dims[rank - 1].value, rows = x->type.staticNumel().value() / std::max<int64_t>(d, 1);
  if (axis != rank - 1 || !warpable(rows, d, x->type.dtype)) return std::nullopt;
  B b(name);
  RowIo io{b, g, {}};
  int e = b.newLoopVar(), j1 = b.newLoopVar(), j2 = b.newLoopVar(), j3 = b.newLoopVar(), mx = b.newLocal(), sum = b.newLocal();
  WarpRows w{b, e, d, laneWidth(d)};
  Scalar t = Scalar::F32;
  auto xAt = [&](int j, int u) { return io.ld(x, w.at(j, u)); };
  std::vector<StmtRef> body{w.begin()};
  for (auto& st : w.reduce(mx, KOp::Max, -INFINITY, j1, [&](int u) { return xAt(j1, u); })) body.push_back(st);
  for (auto& st : w.reduce(sum, KOp::Add, 0, j2, [&](int u) { return unary(KOp::Exp, B::sub(xAt(j2, u), local(mx, t))); })) body.push_back(st);
  auto out = [&](int u) {
    ExprRef shifted = B::sub(xAt(j3, u), local(mx, t));
    return n.op == ir::Op::LogSoftmax ? B::sub(shifted, unary(KOp::Log, local(sum, t))) : B::div(unary(KOp::Exp, shifted), local(sum, t));
  };
  body.push_back(w.storeEach(j3, out, [&](int u, ExprRef v) { return io.outputs(y, w.at(j3, u), v); }));
  error = io.error;
  return std::vector<Kernel>{warpKernel(b, e, rows, std::move(body))};
}

/// SoftmaxGrad over the last axis: dx = y (dy - sum(dy y)), or for log-softmax dy - exp(y) sum(dy).
std::optional<std::vector<Kernel>> softmaxGradGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error) {
  const ir::Value *y = n.input(0), *dy = n.input(1), *dx = n.outputs[0];
  int64_t rank = y->type.rank(), axis = n.getInt("axis", -1);
  if (axis < 0) axis += rank;
  int64_t d = y->type.dims[rank - 1].value, rows = y->type.staticNumel().value() / std::max<int64_t>(d, 1);
  if (axis != rank - 1 || !warpable(rows, d, y->type.dtype)) return std::nullopt;
  bool log = n.getInt("log", 0);
  B b(name);
  RowIo io{b, g, {}};
  int e = b.newLoopVar(), j1 = b.newLoopVar(), j2 = b.newLoopVar(), s = b.newLocal();
  WarpRows w{b, e, d, laneWidth(d)};
  Scalar t = Scalar::F32;
  auto term = [&](int u) { return log ? io.ld(dy, w.at(j1, u)) : B::mul(io.ld(dy, w.at(j1, u)), io.ld(y, w.at(j1, u))); };
  std::vector<StmtRef> body{w.begin()};
  for (auto& st : w.reduce(s, KOp::Add, 0, j1, term)) body.push_back(st);
  auto out = [&](int u) {
    ExprRef gk = io.ld(dy, w.at(j2, u)), yk = io.ld(y, w.at(j2, u));
    return log ? B::sub(gk, B::mul(unary(KOp::Exp, yk), local(s, t))) : B::mul(yk, B::sub(gk, local(s, t)));
  };
  body.push_back(w.storeEach(j2, out, [&](int u, ExprRef v) { return io.outputs(dx, w.at(j2, u), v); }));
  error = io.error;
  return std::vector<Kernel>{warpKernel(b, e, rows, std::move(body))};
}


constexpr int64_t kLogSumExpUnroll = 4; ///< steps of a row the online log-sum-exp loads at once

/// The row's maximum (into local `mx`) and its sum of exp(x - max) (into `sum`) in one pass over
/// it (the online softmax's rescaling: each group of kLogSumExpUnroll steps' elements against the
/// running maximum), for every lane of the warp; element(at) reads the element at index `at`.
std::vector<StmtRef> onlineLogSumExp(const WarpRows& rows, int mx, int sum, int j, const std::function<ExprRef(ExprRef)>& element) {
  Scalar t = Scalar::F32;
  B& b = rows.b;
  auto f = [&](double v) { return B::c(v, t); };
  int64_t unroll = rows.unrollFor(kLogSumExpUnroll);
  std::vector<StmtRef> step;
  std::vector<int> xs;
  ExprRef top = local(mx, t);
  for (int64_t k = 0; k < unroll * rows.v; ++k) { // all the group's loads, then its arithmetic
    xs.push_back(b.newLocal());
    step.push_back(let(xs.back(), element(rows.atUnrolled(j, unroll, k))));
    top = binary(KOp::Max, top, local(xs.back(), t));
  }
  int mn = b.newLocal();
  step.push_back(let(mn, top));
  ExprRef fresh = binary(KOp::Eq, local(mn, t), f(-INFINITY)); // nothing but -inf yet: no scaling, nothing to add
  ExprRef add = local(sum, t);
  add = select(fresh, f(0), B::mul(add, unary(KOp::Exp, B::sub(local(mx, t), local(mn, t)))));
  for (int x : xs) add = B::add(add, select(fresh, f(0), unary(KOp::Exp, B::sub(local(x, t), local(mn, t)))));
  step.push_back(set(sum, add));
  step.push_back(set(mx, local(mn, t)));
  int all = b.newLocal();
  return {let(mx, f(-INFINITY)), let(sum, f(0)), rows.eachUnrolled(j, unroll, std::move(step)), let(all, warpReduce(KOp::Max, local(mx, t))),
          set(sum, warpReduce(KOp::Add, select(binary(KOp::Eq, local(mx, t), f(-INFINITY)), f(0),
                                            B::mul(local(sum, t), unary(KOp::Exp, B::sub(local(mx, t), local(all, t))))))),
          set(mx, local(all, t))};
}

/// Softmax cross-entropy over [N, C] scores (C and N multiples of 32), a warp per position: the
/// loss (its terms meeting in the zeroed result by atomic adds from lane 0), its gradient, or
/// both (SceLossGrad with its loss result: the row's loss term is taken before its gradient
/// is written, perhaps over the scores).
std::optional<std::vector<Kernel>> sceGpu(const std::string& name, const ir::Node& n) {
  bool grad = n.op == ir::Op::SceLossGrad;
  const ir::Value *x = n.input(0), *target = n.input(1), *dl = grad ? n.input(2) : nullptr, *w = n.input(grad ? 3 : 2);
  const ir::Value* lossOut = !grad ? n.outputs[0] : n.outputs.size() > 1 ? n.outputs[1] : nullptr;
  if (x->type.rank() != 2 || computeType(x->type.dtype) != Scalar::F32) return std::nullopt;
  int64_t P = x->type.dims[0].value, C = x->type.dims[1].value;
  std::string red = n.getString("reduction", "mean");
  if (!warpable(P, C, x->type.dtype) || P % 32 || (lossOut && (red == "none" || lossOut->type.dtype != ir::DType::F32)))
    return std::nullopt;
  Scalar t = Scalar::F32;
  B b(name);
  int e = b.newLoopVar(), jq = b.newLoopVar(), j1 = b.newLoopVar(), j3 = b.newLoopVar();
  int wsum = b.newLocal(), mx = b.newLocal(), sum = b.newLocal(), wt = b.newLocal();
  WarpRows rows{b, e, C, laneWidth(C)};
  auto tgt = [&](ExprRef pos) { return cast(b.ld(target, std::move(pos)), Scalar::I64); };
  auto weight = [&](ExprRef cls) { return lossWeight(b, n, w, C, std::move(cls)); };
  std::vector<StmtRef> body{rows.begin()};
  if (red == "mean") { // the weights of all positions, each lane a 32nd of them
    body.push_back(let(wsum, B::c(0, t)));
    body.push_back(loop(jq, P / 32, false, {set(wsum, B::add(local(wsum, t), weight(tgt(B::add(rows.lane(), B::mul(loopVar(jq), B::i(32)))))))}));
    body.push_back(set(wsum, warpReduce(KOp::Add, local(wsum, t))));
  }
  ExprRef tp = tgt(rows.row());
  int xt = b.newLocal();
  if (lossOut && grad) { // the target's score, read by every lane before any lane writes the row's gradient over it:
    // the warp's reduction of the (equal) values waits for every lane's read
    body.push_back(let(xt, b.ld(x, B::add(B::mul(rows.row(), B::i(C)), B::clamp(tp, C)))));
    body.push_back(set(xt, warpReduce(KOp::Max, local(xt, t))));
  }
  for (auto& st : onlineLogSumExp(rows, mx, sum, j1, [&](ExprRef at) { return b.ld(x, std::move(at)); })) body.push_back(st);
  body.push_back(let(wt, weight(tp)));
  auto logProb = [&](ExprRef at) { return B::sub(B::sub(b.ld(x, std::move(at)), local(mx, t)), unary(KOp::Log, local(sum, t))); };
  std::vector<Kernel> ks;
  if (lossOut) {
    ExprRef at = B::add(B::mul(rows.row(), B::i(C)), B::clamp(tp, C));
    ExprRef lp = grad ? B::sub(B::sub(local(xt, t), local(mx, t)), unary(KOp::Log, local(sum, t))) : logProb(at);
    ExprRef loss = unary(KOp::Neg, B::mul(local(wt, t), lp));
    if (red == "mean") loss = B::div(loss, local(wsum, t));
    body.push_back(when(b, binary(KOp::Eq, rows.lane(), B::i(0)), {b.atomic(lossOut, B::i(0), loss)})); // one atomic add a row, not 32
    ks.push_back(zeroKernel(name + "_zero", lossOut));
  }
  if (!grad) {
    if (n.outputs.size() > 1 && n.outputs[1])
      body.push_back(rows.storeEach(j3, [&](int u) { return logProb(rows.at(j3, u)); },
                                    [&](int, ExprRef v) { return WarpRows::Outputs{{n.outputs[1], v}}; }));
  } else {
    ExprRef up = red == "none" ? b.ld(dl, rows.row()) : red == "sum" ? b.ld(dl, B::i(0)) : B::div(b.ld(dl, B::i(0)), local(wsum, t));
    ExprRef rowStart = B::mul(rows.row(), B::i(C));
    auto g = [&](ExprRef at) {
      ExprRef isT = cast(binary(KOp::Eq, B::sub(at, rowStart), tp), t);
      return B::mul(B::sub(unary(KOp::Exp, logProb(at)), isT), B::mul(local(wt, t), up));
    };
    body.push_back(rows.storeEachUnrolled(j3, rows.unrollFor(kLogSumExpUnroll), g,
                                          [&](ExprRef, ExprRef v) { return WarpRows::Outputs{{n.outputs[0], v}}; }));
  }
  ks.push_back(warpKernel(b, e, P, std::move(body)));
  return ks;
}

/// ArgMax / ArgMin along a contiguous last axis, a warp per row: each lane keeps the best of its
/// columns (lane, lane + 32, ...), the first (select_last_index: the last) where it meets an
/// equal; then the warp agrees on the best value, and on the least (greatest) column holding it.
/// Columns travel through the f32 warp reduction exactly: rows shorter than 2^24. As the
/// serial form, a lane's first element is its best until one beats it, so a row of -inf gives 0.
std::optional<std::vector<Kernel>> argReduceGpu(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  AxisRows r(shapeOf(x), axisOf(n, x->type.rank(), 0));
  int64_t rows = r.outer * r.inner, d = r.d;
  if (r.inner != 1 || d < 32 || d >= (int64_t(1) << 24) || computeType(x->type.dtype) != Scalar::F32) return std::nullopt;
  bool isMax = n.op == ir::Op::ArgMax, last = n.getInt("select_last_index", 0);
  Scalar t = Scalar::F32;
  B b(name);
  int e = b.newLoopVar(), j = b.newLoopVar(), best = b.newLocal(), arg = b.newLocal(), v = b.newLocal(), top = b.newLocal();
  WarpRows lanes{b, e, d, 1};
  ExprRef col = lanes.col(j), none = B::c(last ? -1.0 : (double)d, t);
  ExprRef valid = lt(col, B::i(d));
  ExprRef beats = isMax ? (last ? ge(local(v, t), local(best, t)) : gt(local(v, t), local(best, t)))
                        : (last ? le(local(v, t), local(best, t)) : lt(local(v, t), local(best, t)));
  ExprRef better = binary(KOp::And, valid, binary(KOp::Or, beats, eq(local(arg, t), none)));
  ExprRef safe = select(valid, B::add(B::mul(lanes.row(), B::i(d)), col), B::i(0)); // a column past the row reads its start
  std::vector<StmtRef> step{let(v, b.ld(x, safe)), set(arg, select(better, cast(col, t), local(arg, t))),
                            set(best, select(better, local(v, t), local(best, t)))};
  ExprRef holder = select(binary(KOp::And, eq(local(best, t), local(top, t)), binary(KOp::Ne, local(arg, t), none)), local(arg, t), none);
  std::vector<StmtRef> body{let(best, B::c(isMax ? -INFINITY : INFINITY, t)), let(arg, none),
                            loop(j, (d + 31) / 32, false, std::move(step)),
                            let(top, warpReduce(isMax ? KOp::Max : KOp::Min, local(best, t))),
                            set(arg, warpReduce(last ? KOp::Max : KOp::Min, holder)),
                            when(b, eq(lanes.lane(), B::i(0)), {b.st(y, lanes.row(), cast(local(arg, t), Scalar::I64))})};
  return std::vector<Kernel>{warpKernel(b, e, rows, std::move(body))};
}

} // namespace

Expected<std::optional<std::vector<Kernel>>> lowerForGpu(const std::string& name, const ir::Node& n, GpuArch arch) {
  using ir::Op;
  switch (n.op) {
  case Op::SumTo: case Op::ReduceSum: case Op::ReduceMean: return reduceGpu(name, n);
  case Op::GatherGrad: return gatherGradGpu(name, n);
  case Op::Softmax: case Op::LogSoftmax: case Op::SoftmaxGrad: case Op::LayerNormalization: case Op::LayerNormGrad: case Op::RmsNorm:
  case Op::RmsNormGrad:
    return lowerRowGroupGpu(name, RowGroup{{}, &n, {}, true, {}});
  case Op::SceLossGrad: // with its loss result, the atomic total of the loss below unless a block or a warp per row fits
    if (auto ks = sceBlockGpu(name, n)) return ks;
    if (auto ks = sceGpu(name, n)) return ks;
    if (auto ks = sceBlockGpu(name, n, true)) return ks; // rows a warp's lanes do not divide (1,000 classes)
    if (n.outputs.size() < 2 || !n.outputs[1]) return std::optional<std::vector<Kernel>>();
    if (n.getString("reduction", "mean") == "none" || n.outputs[1]->type.dtype != ir::DType::F32) return std::optional<std::vector<Kernel>>();
    {
      auto ks = lowerLossGpu(name, n);
      if (!ks) return ks.takeError();
      return std::optional<std::vector<Kernel>>(std::move(*ks));
    }
  case Op::ArgMax: case Op::ArgMin: return argReduceGpu(name, n);
  case Op::Sample: return sampleGpu(name, n);
  case Op::FusedAttention: case Op::FusedAttentionGrad: return attentionGpu(name, n, arch);
  case Op::PagedAttention: return pagedAttentionGpu(name, n);
  case Op::SoftmaxCrossEntropyLoss:
    if (auto ks = sceGpu(name, n)) return ks;
    [[fallthrough]];
  case Op::NegativeLogLikelihoodLoss: {
    if (n.getString("reduction", "mean") == "none" || n.outputs[0]->type.dtype != ir::DType::F32) return std::optional<std::vector<Kernel>>();
    auto ks = lowerLossGpu(name, n);
    if (!ks) return ks.takeError();
    return std::optional<std::vector<Kernel>>(std::move(*ks));
  }
  default: return std::optional<std::vector<Kernel>>();
  }
}

bool isRowOp(const ir::Node& n) {
  switch (n.op) {
  case ir::Op::Softmax: case ir::Op::LogSoftmax: case ir::Op::SoftmaxGrad: case ir::Op::LayerNormalization: case ir::Op::LayerNormGrad:
  case ir::Op::RmsNorm: case ir::Op::RmsNormGrad:
    return true;
  case ir::Op::SumTo: return leadingSum(n).has_value();
  default: return false;
  }
}

Expected<std::optional<std::vector<Kernel>>> lowerRowGroupGpu(const std::string& name, const RowGroup& g) {
  std::string error;
  const RowGroup* fused = g.prologue.empty() && g.epilogue.empty() ? nullptr : &g;
  if (g.storePrologue && !storesPrologue(*g.row)) return std::optional<std::vector<Kernel>>(); // only their forms store it
  std::optional<std::vector<Kernel>> ks;
  switch (g.row->op) {
  case ir::Op::SoftmaxGrad: ks = softmaxGradGpu(name, *g.row, fused, error); break;
  case ir::Op::LayerNormalization: case ir::Op::RmsNorm: ks = layerNormGpu(name, *g.row, fused, error); break;
  case ir::Op::LayerNormGrad: case ir::Op::RmsNormGrad: ks = layerNormGradGpu(name, *g.row, fused, error); break;
  case ir::Op::SumTo: ks = columnSumGroupGpu(name, *g.row, fused, error); break;
  default: ks = softmaxGpu(name, *g.row, fused, error);
  }
  if (!error.empty()) return makeError(error);
  return ks;
}

} // namespace sgc::kir
