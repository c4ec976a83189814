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

/// One warp per row of d elements (d a multiple of 32 v, rows contiguous): parallel iteration e
/// is lane e % 32 of row e / 32, and in step j lane l visits the v neighbouring elements from
/// (32 j + l) v of its row (with v > 1 they load and store as vectors).
struct WarpRows {
  B& b;
  int e;
  int64_t d;
  int v = 1;
  int base = -1;             ///< the local holding the lane's first element (begin), if any
  ExprRef rowExpr = nullptr; ///< the warp's row, where it is not iteration e / 32 (a warp walking rows)
  ExprRef row() const { return rowExpr ? rowExpr : binary(KOp::IDiv, loopVar(e), B::i(32)); }
  ExprRef lane() const { return binary(KOp::IMod, loopVar(e), B::i(32)); }
  /// Element u of this lane's step j (j a loop variable), as its column in the row.
  ExprRef col(int j, int u = 0) const {
    ExprRef c = B::add(lane(), B::mul(loopVar(j), B::i(32)));
    return v == 1 ? c : B::add(B::mul(c, B::i(v)), B::i(u));
  }
  ExprRef at(int j, int u = 0) const {
    if (base < 0) return B::add(B::mul(row(), B::i(d)), col(j, u));
    return B::add(B::add(local(base, Scalar::I64), B::mul(loopVar(j), B::i(32 * v))), B::i(u));
  }
  /// The lane's first element, once (the kernel's first statement): every element's index is then
  /// that local plus constants and the step, which lets LLVM see neighbours and merge their accesses.
  StmtRef begin() {
    base = b.newLocal();
    return let(base, B::add(B::mul(row(), B::i(d)), B::mul(lane(), B::i(v))));
  }
  StmtRef each(int j, std::vector<StmtRef> body) const { return loop(j, d / (32 * v), false, std::move(body)); }
  /// Steps taken `unroll` at a time (a divisor of the steps): element k (< unroll * v) of step j's
  /// group, and the loop over the groups.
  ExprRef atUnrolled(int j, int64_t unroll, int64_t k) const {
    return B::add(B::add(local(base, Scalar::I64), B::mul(loopVar(j), B::i(unroll * 32 * v))), B::i((k / v) * 32 * v + k % v));
  }
  StmtRef eachUnrolled(int j, int64_t unroll, std::vector<StmtRef> body) const { return loop(j, d / (32 * v * unroll), false, std::move(body)); }
  /// The most steps (up to `most`) that divide the row's steps.
  int64_t unrollFor(int64_t most) const {
    int64_t steps = d / (32 * v), u = std::min(most, steps);
    while (steps % u) --u;
    return u;
  }
  /// local = op over the row of `term` (an expression of loop variable j; one element a step).
  std::vector<StmtRef> reduce(int localId, KOp op, double init, int j, ExprRef term) const {
    assert(v == 1);
    return reduce(localId, op, init, j, [&](int) { return term; });
  }
  /// The same with term(u) the expression of element u of the step.
  std::vector<StmtRef> reduce(int localId, KOp op, double init, int j, const std::function<ExprRef(int)>& term) const {
    Scalar t = Scalar::F32;
    std::vector<StmtRef> step;
    for (int u = 0; u < v; ++u) step.push_back(set(localId, binary(op, local(localId, t), term(u))));
    return {let(localId, B::c(init, t)), each(j, std::move(step)), set(localId, warpReduce(op, local(localId, t)))};
  }
  /// Step j's results: value(u) for every element u, and outputs(u, that value) the (tensor,
  /// value) pairs to store there; all computed into locals first, then stored tensor by tensor,
  /// so that no store separates the step's loads nor another tensor's neighbouring stores
  /// (which then merge into vector loads and stores).
  using Outputs = std::vector<std::pair<const ir::Value*, ExprRef>>;
  /// Elements 0..count-1: outputs(k, value(k)) for each (value(k) kept in a local first), every
  /// pair's value in a local, then the stores at at(k) tensor by tensor.
  void storeByTensor(std::vector<StmtRef>& out, int64_t count, const std::function<ExprRef(int64_t)>& value,
                     const std::function<Outputs(int64_t, ExprRef)>& outputs, const std::function<ExprRef(int64_t)>& at) const {
    auto keep = [&](ExprRef e) {
      int id = b.newLocal();
      Scalar t = e->type;
      out.push_back(let(id, std::move(e)));
      return local(id, t);
    };
    std::vector<Outputs> outs;
    for (int64_t k = 0; k < count; ++k) {
      outs.push_back(outputs(k, keep(value(k))));
      for (auto& [tensor, e] : outs.back()) e = keep(e);
    }
    for (size_t o = 0; o < outs[0].size(); ++o)
      for (int64_t k = 0; k < count; ++k) out.push_back(b.st(outs[k][o].first, at(k), outs[k][o].second));
  }
  StmtRef storeEach(int j, const std::function<ExprRef(int)>& value, const std::function<Outputs(int, ExprRef)>& outputs) const {
    std::vector<StmtRef> step;
    storeByTensor(step, v, [&](int64_t u) { return value((int)u); }, [&](int64_t u, ExprRef e) { return outputs((int)u, std::move(e)); },
                  [&](int64_t u) { return at(j, (int)u); });
    return each(j, std::move(step));
  }
  /// The same over groups of `unroll` steps (a divisor of the steps), value(at) and outputs(at,
  /// value) given each element's index: the group's loads, then its stores.
  StmtRef storeEachUnrolled(int j, int64_t unroll, const std::function<ExprRef(ExprRef)>& value,
                            const std::function<Outputs(ExprRef, ExprRef)>& outputs) const {
    std::vector<StmtRef> step;
    auto at = [&](int64_t k) { return atUnrolled(j, unroll, k); };
    storeByTensor(step, unroll * v, [&](int64_t k) { return value(at(k)); }, [&](int64_t k, ExprRef e) { return outputs(at(k), std::move(e)); }, at);
    return eachUnrolled(j, unroll, std::move(step));
  }
};

/// The most neighbouring elements (up to 8) a lane may take per step in rows of d.
int laneWidth(int64_t d) {
  int v = 8;
  while (v > 1 && d % (32 * v)) v /= 2;
  return v;
}

bool warpable(int64_t rows, int64_t d, ir::DType t) { return d % 32 == 0 && d >= 32 && rows > 0 && computeType(t) == Scalar::F32; }

Kernel warpKernel(B& b, int e, int64_t rows, std::vector<StmtRef> body) {
  Kernel k = b.finish(loop(e, rows * 32, true, std::move(body)));
  k.gpuOnly = true;
  return k;
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

/// Where a row op's GPU form reads its operands and writes its result: by default loads and
/// stores; in a row group, the prologue's result is computed where it is read (never stored),
/// and the epilogue's result is stored with (or, when nothing else reads it, instead of) the
/// row op's.
struct RowIo {
  B& b;
  const RowGroup* g = nullptr;
  std::string error; ///< the first chain that failed to lower

  ExprRef ld(const ir::Value* v, ExprRef at) {
    if (!g || g->prologue.empty() || v != g->prologue.back()->outputs[0]) return b.ld(v, at);
    return orZero(chainExpression(b, g->prologue, nullptr, nullptr, std::move(at)));
  }
  /// What to store for the row op's result y = value at `at`: y and the epilogue's stored results.
  WarpRows::Outputs outputs(const ir::Value* y, ExprRef at, ExprRef value) {
    if (!g || g->epilogue.empty()) return {{y, value}};
    WarpRows::Outputs out;
    if (g->storeResult) out.push_back({y, value});
    for (size_t k = 0; k < g->epilogue.size(); ++k)
      if (k + 1 == g->epilogue.size() || (k < g->storeEpilogue.size() && g->storeEpilogue[k])) {
        std::vector<const ir::Node*> upTo(g->epilogue.begin(), g->epilogue.begin() + (std::ptrdiff_t)k + 1);
        out.push_back({g->epilogue[k]->outputs[0], orZero(chainExpression(b, upTo, y, value, at))});
      }
    return out;
  }
  ExprRef orZero(Expected<ExprRef> e) {
    if (e) return *e;
    std::string msg = errorText(e.takeError());
    if (error.empty()) error = msg;
    return B::c(0, Scalar::F32);
  }
};

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
std::optional<Kernel> layerNormGradFused(const ir::Node& n, int64_t M, int64_t rows, RowIo& io, const std::vector<const ir::Value*>& results,
                                         const ir::Value* db) {
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
        ExprRef term = results[k] == db ? local(got.dy[i], t) : B::mul(local(got.dy[i], t), local(got.xhat[i], t));
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
  const ir::Value *ds = n.outputs.size() > 1 ? n.outputs[1] : nullptr, *db = centered(n) && n.outputs.size() > 2 ? n.outputs[2] : nullptr;
  std::vector<Kernel> ks;
  if (!ds && !db) return ks;
  Scalar t = Scalar::F32;
  B& b = io.b;
  if (ds) ks.push_back(zeroKernel(name + "_zero_dscale", ds));
  if (db) ks.push_back(zeroKernel(name + "_zero_dbias", db));
  std::vector<const ir::Value*> results;
  for (const ir::Value* r : {ds, db})
    if (r) results.push_back(r);
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
  const ir::Value *ds = n.outputs.size() > 1 ? n.outputs[1] : nullptr, *db = centered(n) && n.outputs.size() > 2 ? n.outputs[2] : nullptr;
  if (held && n.outputs[0] && (ds || db)) {
    B fb(name + "_fused");
    RowIo fio{fb, g, {}};
    std::vector<const ir::Value*> results;
    for (const ir::Value* r : {ds, db})
      if (r) results.push_back(r);
    if (std::optional<Kernel> fused = layerNormGradFused(n, M, rows, fio, results, db)) {
      for (const ir::Value* r : results) ks.push_back(zeroKernel(name + (r == ds ? "_zero_dscale" : "_zero_dbias"), r));
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
