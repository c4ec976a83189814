// Sample (ir/Ops.def): the token each row of a decode step's logits chooses, greedy or drawn
// with a temperature, top-k and top-p. The interpreter sorts each row; a kernel cannot, so it
// finds the same cuts by bisection on the logits' values:
//   top-k: the largest t with count(x >= t) >= k;
//   top-p: the largest t >= the top-k cut with mass(x >= t) >= top_p * mass(x >= the cut),
//          mass the softmax's numerators exp((x - max) / temperature);
// each halving [lo, hi] (f(lo) reaches the target, f past hi does not) until every logit left
// inside is the same value, which is then the cut (40 halvings at most: float32 logits closer
// than that are one token apart). Then the Gumbel-max of x / temperature + G over x >= the cut,
// G as the interpreter draws it. A greedy row (temperature <= 0) takes one pass, a temperature
// alone one pass, each cut a pass per halving.
// Two forms: a row per parallel iteration walked serially (the CPU), and a warp per row (a
// GPU), each lane taking every 32nd logit and the lanes agreeing by shuffles, in a fixed order:
// the same inputs draw the same tokens on a device, run after run.
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <cmath>
#include <functional>

namespace sgc::kir {
namespace {

using B = Builder;
constexpr int kHalvings = 40;
constexpr Scalar F = Scalar::F32;

/// A local combined over the row: its initial value and, in the warp form, how lanes combine it.
struct Acc {
  int id;
  double init;
  KOp op;
  bool combined = true; ///< false: the caller combines the lanes' values itself
};

/// One row of V logits, walked serially or by a warp's lanes.
struct RowWalk {
  B& b;
  const ir::Value* x;
  int64_t V;
  bool warp;
  int e; ///< the parallel loop's variable: the row (serial), or 32 x row + lane (warp)

  ExprRef row() const { return warp ? binary(KOp::IDiv, loopVar(e), B::i(32)) : loopVar(e); }
  ExprRef lane() const { return binary(KOp::IMod, loopVar(e), B::i(32)); }

  using Step = std::function<std::vector<StmtRef>(ExprRef col, ExprRef x, ExprRef valid)>;
  /// One pass: the accumulators start at their initial values, `step` updates them at each of
  /// this walker's logits (`valid` false past the row's end, where x is the row's first), then
  /// the lanes combine them.
  std::vector<StmtRef> pass(const std::vector<Acc>& accs, const Step& step) const {
    std::vector<StmtRef> out;
    for (const Acc& a : accs) out.push_back(let(a.id, B::c(a.init, F)));
    int j = b.newLoopVar(), xv = b.newLocal();
    ExprRef col = warp ? B::add(lane(), B::mul(loopVar(j), B::i(32))) : loopVar(j);
    ExprRef valid = warp ? lt(col, B::i(V)) : constant(1, Scalar::I1);
    ExprRef at = B::add(B::mul(row(), B::i(V)), warp ? select(valid, col, B::i(0)) : col);
    std::vector<StmtRef> body{let(xv, cast(b.ld(x, at), F))};
    for (StmtRef& s : step(col, local(xv, F), valid)) body.push_back(std::move(s));
    out.push_back(loop(j, warp ? (V + 31) / 32 : V, false, std::move(body)));
    if (warp)
      for (const Acc& a : accs)
        if (a.combined) out.push_back(set(a.id, warpReduce(a.op, local(a.id, F))));
    return out;
  }
};

ExprRef both(ExprRef a, ExprRef b) { return binary(KOp::And, std::move(a), std::move(b)); }
ExprRef u64(uint64_t v) { return constantI64((int64_t)v); }

/// The interpreter's Gumbel noise (ir/interp/Sample.cpp) at column `col` of the row's (seed, counter).
ExprRef gumbel(ExprRef seed, ExprRef counter, ExprRef col) {
  ExprRef z = binary(KOp::Xor, binary(KOp::Mul, std::move(seed), u64(0x100000001b3ull)), std::move(counter));
  z = binary(KOp::Add, binary(KOp::Add, binary(KOp::Mul, z, u64(0x9e3779b97f4a7c15ull)), std::move(col)), u64(0x632be59bd9b4e019ull));
  z = binary(KOp::Mul, binary(KOp::Xor, z, binary(KOp::Shr, z, B::i(30))), u64(0xbf58476d1ce4e5b9ull));
  z = binary(KOp::Mul, binary(KOp::Xor, z, binary(KOp::Shr, z, B::i(27))), u64(0x94d049bb133111ebull));
  z = binary(KOp::Xor, z, binary(KOp::Shr, z, B::i(31)));
  ExprRef u = B::mul(B::add(cast(binary(KOp::Shr, z, B::i(41)), F), B::c(0.5, F)), B::c(0x1.0p-23, F));
  return -log(-log(u));
}

/// Halves [lo, hi] (locals) towards the largest t with sum of weight(x) over x >= t reaching
/// `target`, until the logits inside are one value (then lo is the cut) or floats run out.
std::vector<StmtRef> bisect(const RowWalk& w, int lo, int hi, ExprRef target, const std::function<ExprRef(ExprRef)>& weight) {
  B& b = w.b;
  int it = b.newLoopVar(), done = b.newLocal(), mid = b.newLocal(), f = b.newLocal(), inMin = b.newLocal(), inMax = b.newLocal();
  auto L = [&](int id) { return local(id, F); };
  std::vector<StmtRef> halving{let(mid, B::add(L(lo), B::mul(B::sub(L(hi), L(lo)), B::c(0.5, F))))};
  for (StmtRef& s : w.pass({{f, 0, KOp::Add}, {inMin, INFINITY, KOp::Min}, {inMax, -INFINITY, KOp::Max}}, [&](ExprRef, ExprRef x, ExprRef valid) {
         ExprRef inside = both(valid, both(ge(x, L(lo)), le(x, L(hi))));
         return std::vector<StmtRef>{set(f, B::add(L(f), select(both(valid, ge(x, L(mid))), weight(x), B::c(0, F)))),
                                     set(inMin, select(inside, min(L(inMin), x), L(inMin))),
                                     set(inMax, select(inside, max(L(inMax), x), L(inMax)))};
       }))
    halving.push_back(std::move(s));
  ExprRef settled = binary(KOp::Or, eq(L(inMin), L(inMax)), binary(KOp::Or, le(L(mid), L(lo)), ge(L(mid), L(hi))));
  ExprRef reached = ge(L(f), target);
  halving.push_back(set(done, select(settled, B::c(1, F), B::c(0, F))));
  halving.push_back(when(b, eq(L(done), 0.0), {set(lo, select(reached, L(mid), L(lo))), set(hi, select(reached, L(hi), L(mid)))}));
  return {let(done, B::c(0, F)), loop(it, kHalvings, false, {when(b, eq(L(done), 0.0), std::move(halving))})};
}

Expected<std::vector<Kernel>> lowerSampleForm(const std::string& name, const ir::Node& n, bool warp) {
  const ir::Value *x = n.input(0), *temperature = n.input(1), *topK = n.input(2), *topP = n.input(3), *seed = n.input(4),
                  *counter = n.input(5), *y = n.outputs[0];
  int64_t V = x->type.shape().back(), rows = numel(y);
  if (V >= (int64_t(1) << 24)) return makeError(ir::describe(n) + ": a vocabulary of 2^24 or more tokens");
  B b(name);
  int e = b.newLoopVar();
  RowWalk w{b, x, V, warp, e};
  auto L = [&](int id) { return local(id, F); };
  int T = b.newLocal(), K = b.newLocal(), P = b.newLocal(), thr = b.newLocal(), mx = b.newLocal(), mn = b.newLocal(), lo = b.newLocal(),
      hi = b.newLocal(), Z = b.newLocal(), best = b.newLocal(), arg = b.newLocal(), top = b.newLocal();
  ExprRef r = w.row();
  std::vector<StmtRef> body{let(T, cast(b.ld(temperature, r), F)), let(K, cast(b.ld(topK, r), F)), let(P, cast(b.ld(topP, r), F)),
                            let(thr, B::c(-INFINITY, F))};
  ExprRef sampled = gt(L(T), 0.0), cutK = both(gt(L(K), 0.0), lt(L(K), (double)V)), cutP = lt(L(P), 1.0);
  // The cuts: the row's extremes, then top-k's threshold by count, then top-p's by mass.
  std::vector<StmtRef> cuts = w.pass({{mx, -INFINITY, KOp::Max}, {mn, INFINITY, KOp::Min}}, [&](ExprRef, ExprRef v, ExprRef valid) {
    return std::vector<StmtRef>{set(mx, select(valid, max(L(mx), v), L(mx))),
                                set(mn, select(both(valid, gt(v, -INFINITY)), min(L(mn), v), L(mn)))};
  });
  cuts.push_back(set(thr, L(mn)));
  std::vector<StmtRef> byCount{let(lo, L(mn)), let(hi, L(mx))};
  for (StmtRef& s : bisect(w, lo, hi, L(K), [](ExprRef) { return B::c(1, F); })) byCount.push_back(std::move(s));
  byCount.push_back(set(thr, L(lo)));
  cuts.push_back(when(b, cutK, std::move(byCount)));
  auto mass = [&](ExprRef v) { return exp(B::div(B::sub(v, L(mx)), L(T))); };
  std::vector<StmtRef> byMass = w.pass({{Z, 0, KOp::Add}}, [&](ExprRef, ExprRef v, ExprRef valid) {
    return std::vector<StmtRef>{set(Z, B::add(L(Z), select(both(valid, ge(v, L(thr))), mass(v), B::c(0, F))))};
  });
  byMass.push_back(let(lo, L(thr)));
  byMass.push_back(let(hi, L(mx)));
  for (StmtRef& s : bisect(w, lo, hi, B::mul(L(P), L(Z)), mass)) byMass.push_back(std::move(s));
  byMass.push_back(set(thr, L(lo)));
  cuts.push_back(when(b, cutP, std::move(byMass)));
  body.push_back(when(b, both(sampled, binary(KOp::Or, cutK, cutP)), std::move(cuts)));
  // The draw: the best score over the kept logits (x / T + G, or x for a greedy row), the first
  // column holding it. The greedy pass draws no noise.
  ExprRef rowSeed = b.ld(seed, r), rowCounter = cast(b.ld(counter, r), Scalar::I64);
  ExprRef none = B::c((double)V, F);
  auto draw = [&](bool noise) {
    std::vector<StmtRef> out = w.pass({{best, -INFINITY, KOp::Max, false}, {arg, (double)V, KOp::Min, false}}, [&](ExprRef col, ExprRef v, ExprRef valid) {
      int score = b.newLocal();
      ExprRef better = both(both(valid, ge(v, L(thr))), binary(KOp::Or, gt(L(score), L(best)), eq(L(arg), none)));
      return std::vector<StmtRef>{let(score, noise ? B::add(B::div(v, L(T)), gumbel(rowSeed, rowCounter, col)) : v),
                                  set(arg, select(better, cast(col, F), L(arg))), set(best, select(better, L(score), L(best)))};
    });
    if (warp) { // the best value over the lanes, then the first column holding it
      out.push_back(let(top, warpReduce(KOp::Max, L(best))));
      out.push_back(set(arg, warpReduce(KOp::Min, select(both(eq(L(best), L(top)), binary(KOp::Ne, L(arg), none)), L(arg), none))));
    }
    return out;
  };
  body.push_back(let(arg, none));
  body.push_back(when(b, sampled, draw(true)));
  body.push_back(when(b, unary(KOp::Not, sampled), draw(false)));
  body.push_back(set(arg, select(eq(L(arg), none), B::c(0, F), L(arg))));
  body.push_back(warp ? when(b, eq(w.lane(), B::i(0)), {b.st(y, r, cast(L(arg), Scalar::I64))}) : b.st(y, r, cast(L(arg), Scalar::I64)));
  Kernel k = b.finish(loop(e, warp ? rows * 32 : rows, true, std::move(body)));
  k.gpuOnly = warp;
  return std::vector<Kernel>{std::move(k)};
}

} // namespace

Expected<std::vector<Kernel>> lowerSample(const std::string& name, const ir::Node& n) { return lowerSampleForm(name, n, false); }

Expected<std::optional<std::vector<Kernel>>> sampleGpu(const std::string& name, const ir::Node& n) {
  auto ks = lowerSampleForm(name, n, true);
  if (!ks) return ks.takeError();
  return std::optional<std::vector<Kernel>>(std::move(*ks));
}

} // namespace sgc::kir
