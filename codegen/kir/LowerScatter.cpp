// Lowerings of the index-driven ops: GatherElements, GatherND, the scatters
// (ScatterND, ScatterElements) and the gathers' gradients. Each result
// element is computed by the parallel iteration that owns it, which looks up
// the index tuples that reach it in a serial loop, so no two iterations
// write one element (no atomics; the same result on every target). A
// scatter without a reduction applies its updates in order: the last one
// that reaches an element wins, as in the interpreter.
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

namespace sgc::kir {
namespace {

using B = Builder;

/// `old` combined with `update` under a scatter's reduction.
ExprRef combine(const std::string& red, ExprRef old, ExprRef update) {
  if (red == "add") return old + update;
  if (red == "mul") return old * update;
  if (red == "max") return max(old, update);
  if (red == "min") return min(old, update);
  return update;
}

/// Index tuples over a tensor of shape `data` (ONNX GatherND/ScatterND): `batchDims` leading
/// dims shared with the indices [batch..., tuples..., k], then k indexed dims, then slices of
/// `inner` elements.
struct NdTuples {
  std::vector<int64_t> data;
  int64_t batchDims, k, batches = 1, tuples, inner = 1, slices = 1; ///< slices: positions of the k dims

  NdTuples(const std::vector<int64_t>& d, const ir::Value* idx, int64_t b) : data(d), batchDims(b), k(shapeOf(idx).back()) {
    for (int64_t i = 0; i < b; ++i) batches *= d[i];
    for (int64_t i = 0; i < k; ++i) slices *= d[b + i];
    for (size_t i = b + k; i < d.size(); ++i) inner *= d[i];
    tuples = numel(idx) / std::max<int64_t>(k * batches, 1);
  }
  /// The linear position, among the k indexed dims, that tuple t of batch bi picks.
  ExprRef slice(B& b, const ir::Value* idx, const ExprRef& bi, const ExprRef& t) const {
    ExprRef s = B::i(0);
    for (int64_t j = 0; j < k; ++j)
      s = s * (double)data[batchDims + j] + gatheredIndex(b, idx, (bi * (double)tuples + t) * (double)k + (double)j, data[batchDims + j]);
    return s;
  }
};

/// out[i] = value(b, flat index i), one parallel iteration each.
Kernel perElement(const std::string& name, const ir::Value* out, const std::function<std::vector<StmtRef>(B&, ExprRef, int)>& body) {
  B b(name);
  int i = b.newLoopVar(), v = b.newLocal();
  std::vector<StmtRef> s = body(b, loopVar(i), v);
  s.push_back(b.st(out, loopVar(i), local(v, computeType(out->type.dtype))));
  return b.finish(loop(i, numel(out), true, std::move(s)));
}

} // namespace

Expected<std::vector<Kernel>> lowerGatherND(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *idx = n.input(1), *y = n.outputs[0];
  NdTuples g(shapeOf(x), idx, n.getInt("batch_dims", 0));
  return std::vector<Kernel>{perElement(name, y, [&](B& b, ExprRef o, int v) {
    ExprRef e = binary(KOp::IMod, o, B::i(g.inner)), tuple = binary(KOp::IDiv, o, B::i(g.inner));
    ExprRef bi = binary(KOp::IDiv, tuple, B::i(g.tuples)), t = binary(KOp::IMod, tuple, B::i(g.tuples));
    ExprRef at = (bi * (double)g.slices + g.slice(b, idx, bi, t)) * (double)g.inner + e;
    return std::vector<StmtRef>{let(v, b.ld(x, at))};
  })};
}

/// dx[bi, s, e] = the sum of dy over the tuples of batch bi that pick slice s.
Expected<std::vector<Kernel>> lowerGatherNDGrad(const std::string& name, const ir::Node& n) {
  const ir::Value *dy = n.input(0), *idx = n.input(1), *dx = n.outputs[0];
  NdTuples g(shapeOf(dx), idx, n.getInt("batch_dims", 0));
  Scalar ty = computeType(dx->type.dtype);
  return std::vector<Kernel>{perElement(name, dx, [&](B& b, ExprRef o, int v) {
    int t = b.newLoopVar();
    ExprRef e = binary(KOp::IMod, o, B::i(g.inner)), rest = binary(KOp::IDiv, o, B::i(g.inner));
    ExprRef s = binary(KOp::IMod, rest, B::i(g.slices)), bi = binary(KOp::IDiv, rest, B::i(g.slices));
    ExprRef hit = eq(g.slice(b, idx, bi, loopVar(t)), s);
    ExprRef term = select(hit, b.ld(dy, (bi * (double)g.tuples + loopVar(t)) * (double)g.inner + e), constant(0, ty));
    return std::vector<StmtRef>{let(v, constant(0, ty)), loop(t, g.tuples, false, {set(v, local(v, ty) + term)})};
  })};
}

Expected<std::vector<Kernel>> lowerScatterND(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *idx = n.input(1), *upd = n.input(2), *y = n.outputs[0];
  NdTuples g(shapeOf(x), idx, 0);
  std::string red = n.getString("reduction", "none");
  Scalar ty = computeType(y->type.dtype);
  return std::vector<Kernel>{perElement(name, y, [&](B& b, ExprRef o, int v) {
    int t = b.newLoopVar();
    ExprRef e = binary(KOp::IMod, o, B::i(g.inner)), s = binary(KOp::IDiv, o, B::i(g.inner));
    ExprRef hit = eq(g.slice(b, idx, B::i(0), loopVar(t)), s);
    ExprRef updated = combine(red, local(v, ty), b.ld(upd, loopVar(t) * (double)g.inner + e));
    return std::vector<StmtRef>{let(v, b.ld(x, o)), loop(t, g.tuples, false, {set(v, select(hit, updated, local(v, ty)))})};
  })};
}

namespace {

/// The elements of `idx` (GatherElements/ScatterElements indices) that may reach data
/// coordinates `c`: those at c with c[axis] replaced by t, present when every other coordinate
/// lies inside the indices' shape. Returns (present, offset in idx, the index value wrapped
/// into the data's dim).
struct AxisCandidates {
  std::vector<int64_t> is;
  int64_t axis, d;
  std::tuple<ExprRef, ExprRef, ExprRef> at(B& b, const ir::Value* idx, const std::vector<ExprRef>& c, const ExprRef& t) const {
    ExprRef present = constant(1, Scalar::I1);
    std::vector<ExprRef> ic = c;
    for (size_t q = 0; q < c.size(); ++q) {
      if ((int64_t)q == axis) continue;
      present = binary(KOp::And, present, lt(c[q], (double)is[q]));
      ic[q] = B::clamp(c[q], is[q]);
    }
    ic[axis] = t;
    ExprRef off = B::offset(ic, is);
    return {present, off, gatheredIndex(b, idx, off, d)};
  }
};

} // namespace

Expected<std::vector<Kernel>> lowerScatterElements(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *idx = n.input(1), *upd = n.input(2), *y = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(x);
  AxisCandidates ac{shapeOf(idx), axisOf(n, (int64_t)xs.size()), 0};
  ac.d = xs[ac.axis];
  std::string red = n.getString("reduction", "none");
  Scalar ty = computeType(y->type.dtype);
  return std::vector<Kernel>{perElement(name, y, [&](B& b, ExprRef o, int v) {
    int t = b.newLoopVar();
    auto c = B::coords(o, xs);
    auto [present, off, j] = ac.at(b, idx, c, loopVar(t));
    ExprRef hit = binary(KOp::And, present, eq(j, c[ac.axis]));
    ExprRef updated = combine(red, local(v, ty), b.ld(upd, off));
    return std::vector<StmtRef>{let(v, b.ld(x, o)), loop(t, ac.is[ac.axis], false, {set(v, select(hit, updated, local(v, ty)))})};
  })};
}

Expected<std::vector<Kernel>> lowerGatherElements(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *idx = n.input(1), *y = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(x), is = shapeOf(idx);
  int64_t axis = axisOf(n, (int64_t)xs.size());
  return std::vector<Kernel>{perElement(name, y, [&](B& b, ExprRef o, int v) {
    auto c = B::coords(o, is);
    c[axis] = gatheredIndex(b, idx, o, xs[axis]);
    return std::vector<StmtRef>{let(v, b.ld(x, B::offset(c, xs)))};
  })};
}

/// dx at c = the sum of dy over the index elements that point at c.
Expected<std::vector<Kernel>> lowerGatherElementsGrad(const std::string& name, const ir::Node& n) {
  const ir::Value *dy = n.input(0), *idx = n.input(1), *dx = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(dx);
  AxisCandidates ac{shapeOf(idx), axisOf(n, (int64_t)xs.size()), 0};
  ac.d = xs[ac.axis];
  Scalar ty = computeType(dx->type.dtype);
  return std::vector<Kernel>{perElement(name, dx, [&](B& b, ExprRef o, int v) {
    int t = b.newLoopVar();
    auto c = B::coords(o, xs);
    auto [present, off, j] = ac.at(b, idx, c, loopVar(t));
    ExprRef term = select(binary(KOp::And, present, eq(j, c[ac.axis])), b.ld(dy, off), constant(0, ty));
    return std::vector<StmtRef>{let(v, constant(0, ty)), loop(t, ac.is[ac.axis], false, {set(v, local(v, ty) + term)})};
  })};
}

} // namespace sgc::kir
