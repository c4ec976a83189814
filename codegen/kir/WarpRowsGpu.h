// The pieces the GPU forms of row ops share (LowerGpu.cpp: reductions, softmax, the loss;
// LowerNormGpu.cpp: the layer and RMS norms and their gradients): a warp per row (WarpRows),
// the kernel over such rows (warpKernel), and where a form reads its operands and writes its
// result inside a row group (RowIo).
#pragma once
#include "codegen/kir/Builder.h"
#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sgc::kir {

/// One warp per row of d elements (d a multiple of 32 v, rows contiguous): parallel iteration e
/// is lane e % 32 of row e / 32, and in step j lane l visits the v neighbouring elements from
/// (32 j + l) v of its row (with v > 1 they load and store as vectors).
struct WarpRows {
  Builder& b;
  int e;
  int64_t d;
  int v = 1;
  int base = -1;             ///< the local holding the lane's first element (begin), if any
  ExprRef rowExpr = nullptr; ///< the warp's row, where it is not iteration e / 32 (a warp walking rows)
  ExprRef row() const { return rowExpr ? rowExpr : binary(KOp::IDiv, loopVar(e), Builder::i(32)); }
  ExprRef lane() const { return binary(KOp::IMod, loopVar(e), Builder::i(32)); }
  /// Element u of this lane's step j (j a loop variable), as its column in the row.
  ExprRef col(int j, int u = 0) const {
    ExprRef c = Builder::add(lane(), Builder::mul(loopVar(j), Builder::i(32)));
    return v == 1 ? c : Builder::add(Builder::mul(c, Builder::i(v)), Builder::i(u));
  }
  ExprRef at(int j, int u = 0) const {
    if (base < 0) return Builder::add(Builder::mul(row(), Builder::i(d)), col(j, u));
    return Builder::add(Builder::add(local(base, Scalar::I64), Builder::mul(loopVar(j), Builder::i(32 * v))), Builder::i(u));
  }
  /// The lane's first element, once (the kernel's first statement): every element's index is then
  /// that local plus constants and the step, which lets LLVM see neighbours and merge their accesses.
  StmtRef begin() {
    base = b.newLocal();
    return let(base, Builder::add(Builder::mul(row(), Builder::i(d)), Builder::mul(lane(), Builder::i(v))));
  }
  StmtRef each(int j, std::vector<StmtRef> body) const { return loop(j, d / (32 * v), false, std::move(body)); }
  /// Steps taken `unroll` at a time (a divisor of the steps): element k (< unroll * v) of step j's
  /// group, and the loop over the groups.
  ExprRef atUnrolled(int j, int64_t unroll, int64_t k) const {
    return Builder::add(Builder::add(local(base, Scalar::I64), Builder::mul(loopVar(j), Builder::i(unroll * 32 * v))), Builder::i((k / v) * 32 * v + k % v));
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
    return {let(localId, Builder::c(init, t)), each(j, std::move(step)), set(localId, warpReduce(op, local(localId, t)))};
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
inline int laneWidth(int64_t d) {
  int v = 8;
  while (v > 1 && d % (32 * v)) v /= 2;
  return v;
}

inline bool warpable(int64_t rows, int64_t d, ir::DType t) { return d % 32 == 0 && d >= 32 && rows > 0 && computeType(t) == Scalar::F32; }

inline Kernel warpKernel(Builder& b, int e, int64_t rows, std::vector<StmtRef> body) {
  Kernel k = b.finish(loop(e, rows * 32, true, std::move(body)));
  k.gpuOnly = true;
  return k;
}

/// Where a row op's GPU form reads its operands and writes its result: by default loads and
/// stores; in a row group, the prologue's result is computed where it is read (never stored),
/// and the epilogue's result is stored with (or, when nothing else reads it, instead of) the
/// row op's.
struct RowIo {
  Builder& b;
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
    return Builder::c(0, Scalar::F32);
  }
};

/// The GPU forms of LayerNormalization and RmsNorm, and of their gradients (LowerNormGpu.cpp);
/// `g` the row group around the row op, if any.
std::optional<std::vector<Kernel>> layerNormGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error);
std::optional<std::vector<Kernel>> layerNormGradGpu(const std::string& name, const ir::Node& n, const RowGroup* g, std::string& error);

} // namespace sgc::kir
