// Lowerings of matrix products, row-wise ops (softmax, layer normalization,
// losses and their gradients), elementwise derivatives and optimizer updates.
#include "codegen/kir/Builder.h"
#include "codegen/kir/ElementwiseMath.h"
#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"

#include <cmath>
#include <functional>
#include <optional>

namespace sgc::kir {
namespace {
using B = Builder;
} // namespace

/// A matrix product, one output row [r, 0..N) per parallel iteration:
///   y[r, j] = alpha * sum_k a(r, k) * b(k, j) (+ beta * c(r, j))
/// With b(k, j) contiguous in j, the row is accumulated in place k by k
/// (the inner loop over j vectorizes); otherwise each element is a dot
/// product over k. `aAt(r, k)`, `bAt(r, k, j)` give operand offsets.
struct Product {
  const ir::Value *a, *b, *y; ///< y: the buffer written (the product's, or its epilogue's last result)
  int64_t rows, N, K;
  bool bRowContiguous;
  std::function<ExprRef(ExprRef, ExprRef)> aAt;
  std::function<ExprRef(ExprRef, ExprRef, ExprRef)> bAt;
  double alpha = 1;
  std::function<ExprRef(B&, ExprRef, ExprRef)> epilogue; ///< added to each element, may be null
  std::vector<const ir::Node*> chain;                    ///< elementwise nodes applied to the product
  const ir::Value* product = nullptr;                    ///< the product's own value (the chain's seed)
  int64_t rowsPerMatrix = 0;                             ///< rows of one matrix of a batch (0: all rows)
  bool epilogueOnly = false; ///< y already holds the sum (a GEMM library wrote it): apply only what follows
};

static Expected<Kernel> lowerProduct(const std::string& name, const Product& p) {
  Scalar t = computeType(p.y->type.dtype);
  B b(name);
  int r = b.newLoopVar(), k = b.newLoopVar(), j = b.newLoopVar(), acc = b.newLocal();
  auto yAt = [&](ExprRef row, ExprRef col) { return B::add(B::mul(std::move(row), B::i(p.N)), std::move(col)); };
  Error err = Error::success();
  // alpha * sum (+ beta * c) followed by the fused elementwise chain, at (row, col).
  auto finish = [&](ExprRef row, ExprRef col, ExprRef sum) {
    ExprRef v = p.alpha == 1 ? sum : B::mul(B::c(p.alpha, t), sum);
    if (p.epilogue) v = B::add(v, p.epilogue(b, row, col));
    if (p.chain.empty()) return v;
    auto e = chainExpression(b, p.chain, p.product, v, yAt(row, col));
    if (e) return *e;
    if (!err) err = e.takeError();
    else llvm::consumeError(e.takeError());
    return v;
  };
  if (p.epilogueOnly) { // one element per parallel iteration, rewritten in place
    int e = b.newLoopVar();
    ExprRef row = binary(KOp::IDiv, loopVar(e), B::i(p.N)), col = binary(KOp::IMod, loopVar(e), B::i(p.N));
    Kernel kernel = b.finish(loop(e, p.rows * p.N, true, {b.st(p.y, loopVar(e), finish(row, col, b.ld(p.y, loopVar(e))))}));
    if (err) return err;
    return kernel;
  }
  if (!p.bRowContiguous) { // dot products over k
    ExprRef prod = B::mul(b.ld(p.a, p.aAt(loopVar(r), loopVar(k))), b.ld(p.b, p.bAt(loopVar(r), loopVar(k), loopVar(j))));
    auto body = {loop(j, p.N, false, {let(acc, B::c(0, t)), loop(k, p.K, false, {set(acc, B::add(local(acc, t), prod))}),
                                      b.st(p.y, yAt(loopVar(r), loopVar(j)), finish(loopVar(r), loopVar(j), local(acc, t)))})};
    Kernel kernel = b.finish(loop(r, p.rows, true, body));
    if (err) return err;
    return kernel;
  }
  // Rows accumulated in place, R rows per iteration: each element of b's row k,
  // loaded once, feeds R multiply-adds (R divides the rows of each matrix).
  int64_t m = p.rowsPerMatrix ? p.rowsPerMatrix : p.rows; // a block must not straddle two matrices of a batch
  int64_t R = m % 4 == 0 ? 4 : m % 2 == 0 ? 2 : 1;
  auto rowOf = [&](ExprRef q) { return B::add(B::mul(loopVar(r), B::i(R)), std::move(q)); };
  int j2 = b.newLoopVar(), q = b.newLoopVar(), j3 = b.newLoopVar(), bkj = b.newLocal();
  std::vector<StmtRef> loadA, update{let(bkj, b.ld(p.b, p.bAt(rowOf(B::i(0)), loopVar(k), loopVar(j2))))};
  for (int64_t qi = 0; qi < R; ++qi) {
    int a = b.newLocal();
    loadA.push_back(let(a, b.ld(p.a, p.aAt(rowOf(B::i(qi)), loopVar(k)))));
    ExprRef at = yAt(rowOf(B::i(qi)), loopVar(j2));
    update.push_back(b.st(p.y, at, B::add(b.ld(p.y, at), B::mul(local(a, t), local(bkj, t)))));
  }
  loadA.push_back(loop(j2, p.N, false, update));
  std::vector<StmtRef> body{loop(q, R, false, {loop(j, p.N, false, {b.st(p.y, yAt(rowOf(loopVar(q)), loopVar(j)), B::c(0, t))})}),
                            loop(k, p.K, false, loadA)};
  if (p.alpha != 1 || p.epilogue || !p.chain.empty()) {
    int q2 = b.newLoopVar();
    ExprRef at = yAt(rowOf(loopVar(q2)), loopVar(j3));
    body.push_back(loop(q2, R, false, {loop(j3, p.N, false, {b.st(p.y, at, finish(rowOf(loopVar(q2)), loopVar(j3), b.ld(p.y, at)))})}));
  }
  Kernel kernel = b.finish(loop(r, p.rows / R, true, body));
  if (err) return err;
  return kernel;
}

static Expected<std::vector<Kernel>> kernels(Expected<Kernel> k) {
  if (!k) return k.takeError();
  return std::vector<Kernel>{std::move(*k)};
}

Expected<std::vector<Kernel>> lowerMatMulChain(const std::string& name, const ir::Node& n, const std::vector<const ir::Node*>& chain,
                                              bool epilogueOnly = false) {
  const ir::Value *a = n.input(0), *bv = n.input(1), *y = chain.empty() ? n.outputs[0] : chain.back()->outputs[0];
  // A vector operand is a matrix of one row (a) or one column (b): its unit dim, absent from y,
  // changes no element's place.
  std::vector<int64_t> as = shapeOf(a), bs = shapeOf(bv), ys = shapeOf(y);
  if (as.size() == 1) as.insert(as.begin(), 1), ys.insert(ys.end() - (bs.size() == 1 ? 0 : 1), 1);
  if (bs.size() == 1) bs.push_back(1), ys.push_back(1);
  int64_t M = ys[ys.size() - 2], N = ys.back(), K = as.back();
  std::vector<int64_t> rowShape(ys.begin(), ys.end() - 1); // batch dims and M
  // The offset of a batched operand's matrix for output row r (batch dims broadcast).
  auto matrixBase = [&](const std::vector<int64_t>& s, ExprRef r) {
    auto c = B::coords(std::move(r), rowShape);
    std::vector<ExprRef> oc;
    size_t lead = rowShape.size() - 1 - (s.size() - 2);
    for (size_t d = 0; d + 2 < s.size(); ++d) oc.push_back(s[d] == 1 ? B::i(0) : c[lead + d]);
    oc.push_back(B::i(0));
    oc.push_back(B::i(0));
    return std::make_pair(B::offset(oc, s), c.back());
  };
  Product p{a, bv, y, numel(y) / std::max<int64_t>(N, 1), N, K, true,
            [&](ExprRef r, ExprRef k) {
              auto [base, i] = matrixBase(as, r);
              return B::add(base, B::add(B::mul(i, B::i(K)), k));
            },
            [&](ExprRef r, ExprRef k, ExprRef j) { return B::add(matrixBase(bs, r).first, B::add(B::mul(k, B::i(N)), j)); },
            1, nullptr, chain, n.outputs[0], M, epilogueOnly};
  return kernels(lowerProduct(name, p));
}

Expected<std::vector<Kernel>> lowerMatMul(const std::string& name, const ir::Node& n) { return lowerMatMulChain(name, n, {}); }

Expected<std::vector<Kernel>> lowerGemmChain(const std::string& name, const ir::Node& n, const std::vector<const ir::Node*>& chain,
                                            bool epilogueOnly = false) {
  const ir::Value *a = n.input(0), *bv = n.input(1), *cv = n.input(2), *y = chain.empty() ? n.outputs[0] : chain.back()->outputs[0];
  bool ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  int64_t M = y->type.dims[0].value, N = y->type.dims[1].value, K = a->type.dims[ta ? 0 : 1].value;
  Product p{a, bv, y, M, N, K, !tb,
            [=](ExprRef i, ExprRef k) { return ta ? B::add(B::mul(k, B::i(M)), i) : B::add(B::mul(i, B::i(K)), k); },
            [=](ExprRef, ExprRef k, ExprRef j) { return tb ? B::add(B::mul(j, B::i(K)), k) : B::add(B::mul(k, B::i(N)), j); },
            n.getFloat("alpha", 1), nullptr, chain, n.outputs[0], 0, epilogueOnly};
  if (cv) {
    std::vector<int64_t> cs = shapeOf(cv);
    while (cs.size() < 2) cs.insert(cs.begin(), 1);
    double beta = n.getFloat("beta", 1);
    Scalar t = computeType(y->type.dtype);
    p.epilogue = [=](B& b, ExprRef i, ExprRef j) {
      ExprRef cAt = B::add(B::mul(cs[0] == 1 ? B::i(0) : i, B::i(cs[1])), cs[1] == 1 ? B::i(0) : j);
      return B::mul(B::c(beta, t), b.ld(cv, cAt));
    };
  }
  return kernels(lowerProduct(name, p));
}

Expected<std::vector<Kernel>> lowerGemm(const std::string& name, const ir::Node& n) { return lowerGemmChain(name, n, {}); }

Expected<std::vector<Kernel>> lowerProductGroup(const std::string& name, const std::vector<const ir::Node*>& group) {
  std::vector<const ir::Node*> chain(group.begin() + 1, group.end());
  if (group[0]->op == ir::Op::Gemm) return lowerGemmChain(name, *group[0], chain);
  return lowerMatMulChain(name, *group[0], chain);
}

std::optional<GemmShape> gemmShape(const std::vector<const ir::Node*>& group) {
  const ir::Node& n = *group[0];
  const ir::Value *a = n.input(0), *bv = n.input(1), *y = group.back()->outputs[0];
  ir::DType t = y->type.dtype;
  if ((n.op != ir::Op::Gemm && n.op != ir::Op::MatMul) || a->type.rank() < 2 || bv->type.rank() < 2 || a->type.dtype != t ||
      bv->type.dtype != t || (t != ir::DType::F32 && t != ir::DType::BF16 && t != ir::DType::F16))
    return std::nullopt;
  std::vector<int64_t> as = shapeOf(a), ys = shapeOf(y);
  GemmShape s{a, bv, y, ys[ys.size() - 2], ys.back(), 0, 1, 0, 0, false, false};
  if (n.op == ir::Op::Gemm) {
    s.transA = n.getInt("transA", 0);
    s.transB = n.getInt("transB", 0);
    s.k = as[s.transA ? 0 : 1];
    return s;
  }
  // A batch of MatMuls: each operand's batch dims are y's (stride one matrix) or absent (stride 0).
  s.k = as.back();
  s.batch = numel(y) / std::max<int64_t>(1, s.m * s.n);
  int64_t aBatch = numel(a) / std::max<int64_t>(1, s.m * s.k), bBatch = numel(bv) / std::max<int64_t>(1, s.k * s.n);
  if ((aBatch != s.batch && aBatch != 1) || (bBatch != s.batch && bBatch != 1)) return std::nullopt;
  s.strideA = aBatch == 1 ? 0 : s.m * s.k;
  s.strideB = bBatch == 1 ? 0 : s.k * s.n;
  return s;
}

void foldBatchIntoRows(GemmShape& s) {
  if (s.batch == 1 || s.strideB != 0 || s.transA || s.strideA != s.m * s.k) return;
  s.m *= s.batch;
  s.batch = 1;
  s.strideA = 0;
}

Expected<std::optional<Kernel>> lowerProductEpilogue(const std::string& name, const std::vector<const ir::Node*>& group) {
  const ir::Node& n = *group[0];
  bool scaled = n.op == ir::Op::Gemm && (n.getFloat("alpha", 1) != 1 || n.input(2));
  if (group.size() == 1 && !scaled) return std::optional<Kernel>();
  std::vector<const ir::Node*> chain(group.begin() + 1, group.end());
  auto ks = n.op == ir::Op::Gemm ? lowerGemmChain(name, n, chain, true) : lowerMatMulChain(name, n, chain, true);
  if (!ks) return ks.takeError();
  return std::optional<Kernel>(std::move(ks->front()));
}

Expected<std::vector<Kernel>> lowerSoftmax(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  AxisRows R(shapeOf(x), axisOf(n, x->type.rank(), -1));
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int row = b.newLoopVar(), k1 = b.newLoopVar(), k2 = b.newLoopVar(), k3 = b.newLoopVar(), mx = b.newLocal(), sum = b.newLocal();
  auto xAt = [&](int k) { return b.ld(x, R.at(loopVar(row), loopVar(k))); };
  ExprRef shifted = B::sub(xAt(k3), local(mx, t));
  ExprRef out = n.op == ir::Op::LogSoftmax ? B::sub(shifted, unary(KOp::Log, local(sum, t))) : B::div(unary(KOp::Exp, shifted), local(sum, t));
  return std::vector<Kernel>{b.finish(loop(row, R.outer * R.inner, true,
      {let(mx, B::c(-INFINITY, t)), loop(k1, R.d, false, {set(mx, binary(KOp::Max, local(mx, t), xAt(k1)))}),
       let(sum, B::c(0, t)), loop(k2, R.d, false, {set(sum, B::add(local(sum, t), unary(KOp::Exp, B::sub(xAt(k2), local(mx, t)))))}),
       loop(k3, R.d, false, {b.st(y, R.at(loopVar(row), loopVar(k3)), out)})}))};
}

Expected<std::vector<Kernel>> lowerSoftmaxGrad(const std::string& name, const ir::Node& n) {
  const ir::Value *y = n.input(0), *dy = n.input(1), *dx = n.outputs[0];
  AxisRows R(shapeOf(y), axisOf(n, y->type.rank(), -1));
  bool log = n.getInt("log", 0);
  Scalar t = computeType(y->type.dtype);
  B b(name);
  int row = b.newLoopVar(), k1 = b.newLoopVar(), k2 = b.newLoopVar(), s = b.newLocal();
  auto at = [&](int k) { return R.at(loopVar(row), loopVar(k)); };
  ExprRef term = log ? b.ld(dy, at(k1)) : B::mul(b.ld(dy, at(k1)), b.ld(y, at(k1)));
  ExprRef g = b.ld(dy, at(k2)), yk = b.ld(y, at(k2));
  ExprRef out = log ? B::sub(g, B::mul(unary(KOp::Exp, yk), local(s, t))) : B::mul(yk, B::sub(g, local(s, t)));
  return std::vector<Kernel>{b.finish(loop(row, R.outer * R.inner, true,
      {let(s, B::c(0, t)), loop(k1, R.d, false, {set(s, B::add(local(s, t), term))}), loop(k2, R.d, false, {b.st(dx, at(k2), out)})}))};
}

/// A normalization's statistics of row `row` (M elements from offset row*M) into locals mean and
/// inv: LayerNorm's mean and 1 / std-dev, or (not `centered`: RmsNorm) 0 and 1 / rms.
static std::vector<StmtRef> rowStats(B& b, const ir::Value* x, int row, int64_t M, int mean, int inv, double eps, Scalar t, bool centered) {
  int k1 = b.newLoopVar(), k2 = b.newLoopVar(), var = b.newLocal();
  auto xAt = [&](int k) { return b.ld(x, B::add(B::mul(loopVar(row), B::i(M)), loopVar(k))); };
  ExprRef dev = B::sub(xAt(k2), local(mean, t));
  std::vector<StmtRef> body{let(mean, B::c(0, t))};
  if (centered) {
    body.push_back(loop(k1, M, false, {set(mean, B::add(local(mean, t), xAt(k1)))}));
    body.push_back(set(mean, B::div(local(mean, t), B::c((double)M, t))));
  }
  for (StmtRef st : {let(var, B::c(0, t)), loop(k2, M, false, {set(var, B::add(local(var, t), B::mul(dev, dev)))}),
                     let(inv, B::div(B::c(1, t), unary(KOp::Sqrt, B::add(B::div(local(var, t), B::c((double)M, t)), B::c(eps, t)))))})
    body.push_back(std::move(st));
  return body;
}

/// LayerNormalization, and RmsNorm (kir::centered), a row per iteration.
Expected<std::vector<Kernel>> lowerLayerNorm(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *scale = n.input(1), *bias = centered(n) ? n.input(2) : nullptr, *y = n.outputs[0];
  int64_t axis = axisOf(n, x->type.rank(), -1), M = 1;
  for (int64_t d = axis; d < x->type.rank(); ++d) M *= x->type.dims[d].value;
  if (scale->type.staticNumel() != M || (bias && bias->type.staticNumel() != M))
    return makeError(ir::describe(n) + ": broadcast scale or bias is not generated yet");
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int row = b.newLoopVar(), mean = b.newLocal(), inv = b.newLocal();
  auto body = rowStats(b, x, row, M, mean, inv, n.getFloat("epsilon", 1e-5), t, centered(n));
  int k = b.newLoopVar();
  ExprRef at = B::add(B::mul(loopVar(row), B::i(M)), loopVar(k));
  ExprRef v = B::mul(B::mul(B::sub(b.ld(x, at), local(mean, t)), local(inv, t)), b.ld(scale, loopVar(k)));
  if (bias) v = B::add(v, b.ld(bias, loopVar(k)));
  body.push_back(loop(k, M, false, {b.st(y, at, v)}));
  if (centered(n) && n.outputs.size() > 1 && n.outputs[1]) body.push_back(b.st(n.outputs[1], loopVar(row), local(mean, t)));
  if (const ir::Value* is = invStdOut(n)) body.push_back(b.st(is, loopVar(row), local(inv, t)));
  return std::vector<Kernel>{b.finish(loop(row, numel(x) / std::max<int64_t>(M, 1), true, body))};
}

/// LayerNormGrad, and RmsNormGrad (kir::centered: no mean, no bias gradient).
Expected<std::vector<Kernel>> lowerLayerNormGrad(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *scale = n.input(1), *dy = n.input(2), *meanV = meanIn(n), *invV = invStdIn(n);
  const bool c = centered(n);
  int64_t axis = axisOf(n, x->type.rank(), -1), M = 1;
  for (int64_t d = axis; d < x->type.rank(); ++d) M *= x->type.dims[d].value;
  if (scale->type.staticNumel() != M) return makeError(ir::describe(n) + ": broadcast scale is not generated yet");
  if ((c && !meanV) || !invV) return makeError(ir::describe(n) + ": the forward statistics (mean, inverse std-dev) are needed");
  int64_t rows = numel(x) / std::max<int64_t>(M, 1);
  Scalar t = computeType(x->type.dtype);
  auto meanOf = [&](B& b, const ExprRef& row) { return c ? cast(b.ld(meanV, row), t) : B::c(0, t); };
  std::vector<Kernel> ks;
  { // dx, one row per iteration, from the forward's saved statistics: inv / M (M dxhat - s1 - xhat s2)
    B b(name + "_dx");
    int row = b.newLoopVar(), k1 = b.newLoopVar(), k2 = b.newLoopVar(), mean = b.newLocal(), inv = b.newLocal(), s1 = b.newLocal(), s2 = b.newLocal();
    auto at = [&](int k) { return B::add(B::mul(loopVar(row), B::i(M)), loopVar(k)); };
    auto xhat = [&](int k) { return B::mul(B::sub(b.ld(x, at(k)), local(mean, t)), local(inv, t)); };
    auto dxhat = [&](int k) { return B::mul(b.ld(dy, at(k)), b.ld(scale, loopVar(k))); };
    ExprRef scaled = B::mul(B::c((double)M, t), dxhat(k2));
    if (c) scaled = B::sub(scaled, local(s1, t));
    ExprRef dx = B::mul(B::div(local(inv, t), B::c((double)M, t)), B::sub(scaled, B::mul(xhat(k2), local(s2, t))));
    std::vector<StmtRef> sums;
    if (c) sums.push_back(set(s1, B::add(local(s1, t), dxhat(k1))));
    sums.push_back(set(s2, B::add(local(s2, t), B::mul(dxhat(k1), xhat(k1)))));
    ks.push_back(b.finish(loop(row, rows, true,
        {let(mean, meanOf(b, loopVar(row))), let(inv, cast(b.ld(invV, loopVar(row)), t)), let(s1, B::c(0, t)), let(s2, B::c(0, t)),
         loop(k1, M, false, std::move(sums)), loop(k2, M, false, {b.st(n.outputs[0], at(k2), dx)})})));
  }
  { // dscale (and dbias), one normalized element per iteration, summed over the rows
    const ir::Value* dbias = c && n.outputs.size() > 2 ? n.outputs[2] : nullptr;
    B b(name + "_dparams");
    int e = b.newLoopVar(), r = b.newLoopVar(), ds = b.newLocal(), db = b.newLocal();
    ExprRef at = B::add(B::mul(loopVar(r), B::i(M)), loopVar(e));
    ExprRef xhat = B::mul(B::sub(b.ld(x, at), meanOf(b, loopVar(r))), cast(b.ld(invV, loopVar(r)), t));
    std::vector<StmtRef> sums{set(ds, B::add(local(ds, t), B::mul(b.ld(dy, at), xhat)))}, body{let(ds, B::c(0, t))};
    if (dbias) sums.push_back(set(db, B::add(local(db, t), b.ld(dy, at)))), body.push_back(let(db, B::c(0, t)));
    body.push_back(loop(r, rows, false, std::move(sums)));
    body.push_back(b.st(n.outputs[1], loopVar(e), local(ds, t)));
    if (dbias) body.push_back(b.st(dbias, loopVar(e), local(db, t)));
    ks.push_back(b.finish(loop(e, M, true, std::move(body))));
  }
  return ks;
}

/// Cross-entropy and negative log-likelihood losses and their gradients. The
/// gradient is one parallel loop over positions, each writing its row. The
/// loss sums over positions: a serial kernel on the CPU (a fixed order), or,
/// with `atomicTotal` (the GPU form), a parallel loop whose positions add
/// their terms to the zeroed result atomically. Each parallel position totals
/// the weights itself (the divisor of a mean). With `lossOfGrad`, the loss that a
/// gradient node also gives (SceLossGrad's second result).
static Expected<std::vector<Kernel>> lowerLossWith(const std::string& name, const ir::Node& n, bool atomicTotal, bool lossOfGrad = false) {
  bool gradNode = n.op == ir::Op::SceLossGrad || n.op == ir::Op::NllLossGrad, grad = gradNode && !lossOfGrad;
  bool softmax = n.op == ir::Op::SoftmaxCrossEntropyLoss || n.op == ir::Op::SceLossGrad;
  const ir::Value *x = n.input(0), *target = n.input(1), *lossOut = !gradNode ? n.outputs[0] : n.outputs.size() > 1 ? n.outputs[1] : nullptr;
  const ir::Value *dl = grad ? n.input(2) : nullptr, *w = n.input(gradNode ? 3 : 2);
  std::vector<int64_t> xs = shapeOf(x);
  int64_t N = xs[0], C = xs[1], inner = numel(x) / std::max<int64_t>(N * C, 1), P = N * inner;
  std::string red = n.getString("reduction", "mean");
  bool parallel = grad || red == "none" || atomicTotal;
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int p = b.newLoopVar(), q = b.newLoopVar(), k1 = b.newLoopVar(), k2 = b.newLoopVar(), k3 = b.newLoopVar();
  int wsum = b.newLocal(), total = b.newLocal(), mx = b.newLocal(), s = b.newLocal(), wt = b.newLocal();
  auto tgt = [&](ExprRef pos) { return cast(b.ld(target, std::move(pos)), Scalar::I64); };
  auto weight = [&](ExprRef cls) { return lossWeight(b, n, w, C, std::move(cls)); };
  auto xAt = [&](ExprRef pos, ExprRef cls) { // element (n, cls, i) of position pos = n * inner + i
    return B::add(B::mul(B::add(B::mul(binary(KOp::IDiv, pos, B::i(inner)), B::i(C)), std::move(cls)), B::i(inner)), binary(KOp::IMod, pos, B::i(inner)));
  };
  bool needsWsum = red == "mean";
  StmtRef sumWeights = block({let(wsum, B::c(0, t)), loop(q, P, false, {set(wsum, B::add(local(wsum, t), weight(tgt(loopVar(q)))))})});
  ExprRef tp = tgt(loopVar(p));
  ExprRef safeT = binary(KOp::Min, binary(KOp::Max, tp, B::i(0)), B::i(C - 1));
  std::vector<StmtRef> per{let(wt, weight(tp))};
  if (parallel && needsWsum) per.insert(per.begin(), sumWeights);
  ExprRef logp; // log probability of class k2 at p
  if (softmax) {
    per.push_back(let(mx, B::c(-INFINITY, t)));
    per.push_back(loop(k1, C, false, {set(mx, binary(KOp::Max, local(mx, t), b.ld(x, xAt(loopVar(p), loopVar(k1)))))}));
    per.push_back(let(s, B::c(0, t)));
    per.push_back(loop(k3, C, false, {set(s, B::add(local(s, t), unary(KOp::Exp, B::sub(b.ld(x, xAt(loopVar(p), loopVar(k3))), local(mx, t)))))}));
  }
  auto logProb = [&](ExprRef cls) {
    ExprRef v = b.ld(x, xAt(loopVar(p), cls));
    return softmax ? B::sub(B::sub(v, local(mx, t)), unary(KOp::Log, local(s, t))) : v;
  };
  std::vector<Kernel> ks;
  if (!grad) {
    ExprRef loss = unary(KOp::Neg, B::mul(local(wt, t), logProb(safeT)));
    if (softmax && !gradNode && n.outputs.size() > 1 && n.outputs[1])
      per.push_back(loop(k2, C, false, {b.st(n.outputs[1], xAt(loopVar(p), loopVar(k2)), logProb(loopVar(k2)))}));
    if (red == "none") {
      per.push_back(b.st(lossOut, loopVar(p), loss));
      ks.push_back(b.finish(loop(p, P, true, per)));
    } else if (atomicTotal) {
      per.push_back(b.atomic(lossOut, B::i(0), red == "mean" ? B::div(loss, local(wsum, t)) : loss));
      ks.push_back(zeroKernel(name + "_zero", lossOut));
      ks.push_back(b.finish(loop(p, P, true, per)));
    } else {
      per.push_back(set(total, B::add(local(total, t), loss)));
      std::vector<StmtRef> body{let(total, B::c(0, t)), loop(p, P, false, per)};
      if (needsWsum) body.insert(body.begin(), sumWeights);
      body.push_back(b.st(lossOut, B::i(0), red == "sum" ? local(total, t) : B::div(local(total, t), local(wsum, t))));
      ks.push_back(b.finish(block(body)));
    }
  } else {
    ExprRef up = red == "none" ? b.ld(dl, loopVar(p)) : red == "sum" ? b.ld(dl, B::i(0)) : B::div(b.ld(dl, B::i(0)), local(wsum, t));
    ExprRef scale = B::mul(local(wt, t), up);
    ExprRef isT = cast(binary(KOp::Eq, loopVar(k2), tp), t);
    ExprRef g = softmax ? B::mul(B::sub(unary(KOp::Exp, logProb(loopVar(k2))), isT), scale) : B::mul(unary(KOp::Neg, isT), scale);
    per.push_back(loop(k2, C, false, {b.st(n.outputs[0], xAt(loopVar(p), loopVar(k2)), g)}));
    ks.push_back(b.finish(loop(p, P, true, per)));
  }
  return ks;
}

/// A SceLossGrad that also gives the loss: the loss first, then the gradient, which may write
/// over the scores.
static Expected<std::vector<Kernel>> lowerLossAndGrad(const std::string& name, const ir::Node& n, bool atomicTotal) {
  bool both = n.op == ir::Op::SceLossGrad && n.outputs.size() > 1 && n.outputs[1];
  if (!both) return lowerLossWith(name, n, atomicTotal);
  auto ks = lowerLossWith(name + "_loss", n, atomicTotal, true);
  if (!ks) return ks;
  auto grad = lowerLossWith(name, n, atomicTotal);
  if (!grad) return grad;
  ks->insert(ks->end(), grad->begin(), grad->end());
  return ks;
}

Expected<std::vector<Kernel>> lowerLoss(const std::string& name, const ir::Node& n) { return lowerLossAndGrad(name, n, false); }

Expected<std::vector<Kernel>> lowerLossGpu(const std::string& name, const ir::Node& n) { return lowerLossAndGrad(name, n, true); }

/// f'(x) * dy for the unary op named by the `of` attribute.
Expected<std::vector<Kernel>> lowerUnaryGrad(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *dy = n.input(1), *dx = n.outputs[0];
  B b(name);
  int i = b.newLoopVar();
  auto of = derivativeOf(n);
  if (!of) return of.takeError();
  auto d = unaryDerivative(n, *of, b.ld(x, loopVar(i)));
  if (!d) return d.takeError();
  return std::vector<Kernel>{b.finish(loop(i, numel(dx), true, {b.st(dx, loopVar(i), B::mul(*d, b.ld(dy, loopVar(i))))}))};
}

Expected<std::vector<Kernel>> lowerOptimizer(const std::string& name, const ir::Node& n) {
  const ir::Value *p = n.input(0), *g = n.input(1);
  bool adam = n.op == ir::Op::AdamUpdate;
  const ir::Value *lrV = n.input(adam ? 4 : 2), *stepV = n.input(adam ? 5 : 3);
  Scalar t = computeType(p->type.dtype);
  B b(name);
  int i = b.newLoopVar();
  ExprRef at = loopVar(i), lr = cast(b.ld(lrV, B::i(0)), t), step = cast(b.ld(stepV, B::i(0)), t), one = B::c(1, t);
  ExprRef w = b.ld(p, at), d = b.ld(g, at);
  double wd = n.getFloat("weight_decay", 0);
  // The results are stores only, of expressions sharing their terms: the emitter computes all of
  // an element's new values before it stores any (Kernel.h), as the plan may update the parameter
  // and its state in place, and a GPU then moves 16 bytes a buffer per access (vectorWidthFor).
  std::vector<std::pair<const ir::Value*, ExprRef>> outs;
  if (!adam) {
    double mom = n.getFloat("momentum", 0), damp = n.getFloat("dampening", 0);
    ExprRef dd = B::add(d, B::mul(B::c(wd, t), w));
    if (mom != 0) {
      ExprRef first = binary(KOp::Le, step, one);
      outs.push_back({n.outputs[1], select(first, dd, B::add(B::mul(B::c(mom, t), b.ld(n.input(4), at)), B::mul(B::c(1 - damp, t), dd)))});
      ExprRef nb = outs.back().second;
      dd = n.getInt("nesterov", 0) ? B::add(dd, B::mul(B::c(mom, t), nb)) : nb;
    }
    outs.push_back({n.outputs[0], B::sub(w, B::mul(lr, dd))});
  } else {
    double b1 = n.getFloat("beta1", 0.9), b2 = n.getFloat("beta2", 0.999), eps = n.getFloat("eps", 1e-8);
    bool decoupled = n.getInt("decoupled", 0);
    ExprRef wv = decoupled ? B::mul(w, B::sub(one, B::mul(lr, B::c(wd, t)))) : w;
    ExprRef dv = decoupled ? d : B::add(d, B::mul(B::c(wd, t), w));
    outs.push_back({n.outputs[1], B::add(B::mul(B::c(b1, t), b.ld(n.input(2), at)), B::mul(B::c(1 - b1, t), dv))});
    outs.push_back({n.outputs[2], B::add(B::mul(B::c(b2, t), b.ld(n.input(3), at)), B::mul(B::c(1 - b2, t), B::mul(dv, dv)))});
    ExprRef m = outs[0].second, v = outs[1].second;
    ExprRef bc1 = B::sub(one, binary(KOp::Pow, B::c(b1, t), step)), bc2 = B::sub(one, binary(KOp::Pow, B::c(b2, t), step));
    ExprRef denom = B::add(B::div(unary(KOp::Sqrt, v), unary(KOp::Sqrt, bc2)), B::c(eps, t));
    outs.push_back({n.outputs[0], B::sub(wv, B::mul(B::div(lr, bc1), B::div(m, denom)))});
    if (n.outputs.size() > 3 && n.outputs[3]) outs.push_back({n.outputs[3], outs.back().second}); // its bf16 copy (stored rounded)
  }
  // With the `apply` flag false (the step's loss was not finite) each result is its old value.
  const ir::Value* apply = n.input(adam ? 6 : 5);
  std::map<const ir::Value*, ExprRef> old{{n.outputs[0], w}};
  if (adam) {
    old[n.outputs[1]] = b.ld(n.input(2), at), old[n.outputs[2]] = b.ld(n.input(3), at);
    if (n.outputs.size() > 3 && n.outputs[3]) old[n.outputs[3]] = w; // the copy of the weight kept
  } else if (n.outputs.size() > 1 && n.outputs[1]) {
    old[n.outputs[1]] = b.ld(n.input(4), at);
  }
  ExprRef ok = apply ? binary(KOp::Ne, cast(b.ld(apply, B::i(0)), Scalar::I64), B::i(0)) : ExprRef{};
  std::vector<StmtRef> body;
  for (auto& [out, v] : outs) body.push_back(b.st(out, at, apply ? select(ok, v, old.at(out)) : v));
  return std::vector<Kernel>{b.finish(loop(i, numel(p), true, body))};
}

} // namespace sgc::kir

namespace sgc::kir {

/// Dropout with the interpreter's counter-based generator: splitmix64 of
/// (seed mixed with the step, element index), so both draw the same mask.
Expected<std::vector<Kernel>> lowerDropout(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *ratioV = n.input(1), *trainingV = n.input(2), *stepV = n.input(3), *y = n.outputs[0];
  const ir::Value* maskV = n.outputs.size() > 1 ? n.outputs[1] : nullptr;
  bool training = trainingV && !(trainingV->kind == ir::ValueKind::Const && trainingV->data->getI(0) == 0);
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int i = b.newLoopVar(), keepL = b.newLocal();
  auto u64 = [](uint64_t v) { return constantI64((int64_t)v); };
  ExprRef keep = constant(1, Scalar::I1), scale = B::c(1, t);
  if (training) {
    ExprRef ratio = ratioV ? cast(b.ld(ratioV, B::i(0)), Scalar::F64) : constant(0.5, Scalar::F64);
    ExprRef seed = u64((uint64_t)n.getInt("seed", 0));
    if (stepV) seed = binary(KOp::Xor, binary(KOp::Mul, seed, u64(0x100000001b3ull)), b.ld(stepV, B::i(0)));
    ExprRef z = binary(KOp::Add, binary(KOp::Add, binary(KOp::Mul, seed, u64(0x9e3779b97f4a7c15ull)), loopVar(i)), u64(0x632be59bd9b4e019ull));
    z = binary(KOp::Mul, binary(KOp::Xor, z, binary(KOp::Shr, z, B::i(30))), u64(0xbf58476d1ce4e5b9ull));
    z = binary(KOp::Mul, binary(KOp::Xor, z, binary(KOp::Shr, z, B::i(27))), u64(0x94d049bb133111ebull));
    z = binary(KOp::Xor, z, binary(KOp::Shr, z, B::i(31)));
    ExprRef u = binary(KOp::Mul, cast(binary(KOp::Shr, z, B::i(11)), Scalar::F64), constant(0x1.0p-53, Scalar::F64));
    keep = binary(KOp::Or, binary(KOp::Eq, ratio, constant(0, Scalar::F64)), binary(KOp::Ge, u, ratio));
    scale = cast(binary(KOp::Div, constant(1, Scalar::F64), binary(KOp::Sub, constant(1, Scalar::F64), ratio)), t);
  }
  std::vector<StmtRef> body{let(keepL, keep), b.st(y, loopVar(i), select(local(keepL, Scalar::I1), B::mul(b.ld(x, loopVar(i)), scale), B::c(0, t)))};
  if (maskV) body.push_back(b.st(maskV, loopVar(i), local(keepL, Scalar::I1)));
  return std::vector<Kernel>{b.finish(loop(i, numel(y), true, body))};
}

} // namespace sgc::kir
