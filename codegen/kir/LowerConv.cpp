// Lowerings of convolution, pooling, padding and batch normalization, with
// their gradients. Windows follow ir/shapes' windowGeometry; positions
// outside the input read as zero (indices are clamped and the value selected
// away, so no load leaves its buffer).
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"
#include "ir/shapes/Shapes.h"

#include <cmath>

namespace sgc::kir {
namespace {
using B = Builder;
int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}
ExprRef all(const std::vector<ExprRef>& conds) {
  ExprRef r = constant(1, Scalar::I1);
  for (const ExprRef& c : conds) r = binary(KOp::And, r, c);
  return r;
}
ExprRef inRange(const ExprRef& x, int64_t n) { return binary(KOp::And, binary(KOp::Ge, x, B::i(0)), binary(KOp::Lt, x, B::i(n))); }

Expected<ir::Window> windowOf(const ir::Node& n, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel) {
  ir::InferCtx c{n, {}, {}, {}};
  return ir::windowGeometry(c, in, kernel);
}

/// Input positions of window `o` at kernel offset `k`, and whether each is inside.
struct Tap {
  std::vector<ExprRef> pos;
  ExprRef valid;
};
Tap tap(const ir::Window& w, const std::vector<int64_t>& in, const std::vector<ExprRef>& o, const std::vector<ExprRef>& k) {
  Tap t;
  std::vector<ExprRef> conds;
  for (size_t d = 0; d < in.size(); ++d) {
    ExprRef p = B::add(B::sub(B::mul(o[d], B::i(w.strides[d])), B::i(w.padBegin[d])), B::mul(k[d], B::i(w.dilations[d])));
    conds.push_back(inRange(p, in[d]));
    t.pos.push_back(B::clamp(p, in[d]));
  }
  t.valid = all(conds);
  return t;
}

/// The output window `o` that input position `pos` reaches at kernel offset `k`, if any.
Tap reverseTap(const ir::Window& w, const std::vector<int64_t>& out, const std::vector<ExprRef>& pos, const std::vector<ExprRef>& k) {
  Tap t;
  std::vector<ExprRef> conds;
  for (size_t d = 0; d < out.size(); ++d) {
    ExprRef num = B::sub(B::add(pos[d], B::i(w.padBegin[d])), B::mul(k[d], B::i(w.dilations[d])));
    ExprRef o = binary(KOp::IDiv, num, B::i(w.strides[d]));
    conds.push_back(binary(KOp::Ge, num, B::i(0)));
    conds.push_back(binary(KOp::Eq, binary(KOp::IMod, num, B::i(w.strides[d])), B::i(0)));
    conds.push_back(binary(KOp::Lt, o, B::i(out[d])));
    t.pos.push_back(B::clamp(o, out[d]));
  }
  t.valid = all(conds);
  return t;
}

std::vector<ExprRef> cat(std::vector<ExprRef> a, const std::vector<ExprRef>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<ExprRef> tail(const std::vector<ExprRef>& v, size_t from) { return {v.begin() + from, v.end()}; }
std::vector<int64_t> spatial(const std::vector<int64_t>& s) { return {s.begin() + 2, s.end()}; }

/// AveragePool's divisor with count_include_pad for output window `o`.
ExprRef paddedCount(const ir::Window& w, const std::vector<int64_t>& in, const std::vector<ExprRef>& o, Scalar t) {
  ExprRef count = B::i(1);
  for (size_t d = 0; d < in.size(); ++d) {
    ExprRef start = B::sub(B::mul(o[d], B::i(w.strides[d])), B::i(w.padBegin[d]));
    ExprRef end = binary(KOp::Min, B::add(start, B::i((w.kernel[d] - 1) * w.dilations[d] + 1)), B::i(in[d] + w.padEnd[d]));
    count = B::mul(count, binary(KOp::IDiv, B::add(B::sub(end, start), B::i(w.dilations[d] - 1)), B::i(w.dilations[d])));
  }
  return cast(count, t);
}

} // namespace

Expected<std::vector<Kernel>> lowerConvFamily(const std::string& name, const ir::Node& n) {
  bool gradIn = n.op == ir::Op::ConvGradInput, gradW = n.op == ir::Op::ConvGradWeight;
  const ir::Value *x = gradIn ? n.outputs[0] : n.input(0), *w = gradW ? n.outputs[0] : n.input(gradIn ? 1 : 1),
                  *y = n.op == ir::Op::Conv ? n.outputs[0] : n.input(gradW ? 1 : 0);
  std::vector<int64_t> xs = shapeOf(x), ws = shapeOf(w), ys = shapeOf(y), in = spatial(xs), ks = spatial(ws), out = spatial(ys);
  int64_t group = n.getInt("group", 1), C = xs[1], M = ws[0], cPerG = C / group, mPerG = M / group;
  auto win = windowOf(n, in, ks);
  if (!win) return win.takeError();
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int e = b.newLoopVar(), l1 = b.newLoopVar(), l2 = b.newLoopVar(), acc = b.newLocal();
  ExprRef zero = B::c(0, t);
  auto wAt = [&](ExprRef m, ExprRef ci, ExprRef kk) { return B::add(B::mul(B::add(B::mul(m, B::i(cPerG)), ci), B::i(product(ks))), kk); };
  ExprRef add;
  int64_t extent1, extent2;
  const ir::Value* result;
  ExprRef init = zero;
  if (n.op == ir::Op::Conv) { // y[nb, m, o]: over ci and kernel offsets
    result = y;
    auto c = B::coords(loopVar(e), ys);
    ExprRef g = binary(KOp::IDiv, c[1], B::i(mPerG));
    auto k = B::coords(loopVar(l2), ks);
    Tap tp = tap(*win, in, tail(c, 2), k);
    ExprRef xv = b.ld(x, B::offset(cat({c[0], B::add(B::mul(g, B::i(cPerG)), loopVar(l1))}, tp.pos), xs));
    add = B::mul(select(tp.valid, xv, zero), b.ld(w, wAt(c[1], loopVar(l1), loopVar(l2))));
    extent1 = cPerG, extent2 = product(ks);
    if (n.input(2)) init = b.ld(n.input(2), c[1]);
  } else if (gradIn) { // dx[nb, ch, pos]: over the group's output channels and kernel offsets
    result = x;
    auto c = B::coords(loopVar(e), xs);
    ExprRef m = B::add(B::mul(binary(KOp::IDiv, c[1], B::i(cPerG)), B::i(mPerG)), loopVar(l1));
    auto k = B::coords(loopVar(l2), ks);
    Tap tp = reverseTap(*win, out, tail(c, 2), k);
    ExprRef dyv = b.ld(y, B::offset(cat({c[0], m}, tp.pos), ys));
    add = B::mul(select(tp.valid, dyv, zero), b.ld(w, wAt(m, binary(KOp::IMod, c[1], B::i(cPerG)), loopVar(l2))));
    extent1 = mPerG, extent2 = product(ks);
  } else { // dw[m, ci, k]: over the batch and output positions
    result = w;
    auto c = B::coords(loopVar(e), ws);
    ExprRef g = binary(KOp::IDiv, c[0], B::i(mPerG));
    auto o = B::coords(loopVar(l2), out);
    Tap tp = tap(*win, in, o, tail(c, 2));
    ExprRef xv = b.ld(x, B::offset(cat({loopVar(l1), B::add(B::mul(g, B::i(cPerG)), c[1])}, tp.pos), xs));
    add = B::mul(select(tp.valid, xv, zero), b.ld(y, B::offset(cat({loopVar(l1), c[0]}, o), ys)));
    extent1 = xs[0], extent2 = product(out);
  }
  // Sums of float32 products accumulate in float64: a weight gradient sums over the whole batch
  // and every output position, where float32 would lose digits a BatchNormalization after it
  // then amplifies (ShuffleNetV2's step-2 loss moved by 2e-5 against PyTorch's 5e-8).
  Scalar a = accumulatorType(t);
  return std::vector<Kernel>{b.finish(loop(e, numel(result), true,
      {let(acc, cast(init, a)), loop(l1, extent1, false, {loop(l2, extent2, false, {set(acc, local(acc, a) + cast(add, a))})}),
       b.st(result, loopVar(e), local(acc, a))}))};
}

/// The flat index MaxPool reports for input position `pos` of plane `plane`: row-major over the
/// whole input, or with storage_order = 1 column-major within the plane.
ExprRef poolIndex(const std::vector<ExprRef>& pos, const std::vector<int64_t>& in, const ExprRef& plane, bool colMajor) {
  ExprRef off = B::i(0);
  if (colMajor) {
    int64_t mul = 1;
    for (size_t d = 0; d < in.size(); ++d) off = off + pos[d] * (double)mul, mul *= in[d];
  } else {
    off = B::offset(pos, in);
  }
  return plane * (double)product(in) + off;
}

Expected<std::vector<Kernel>> lowerPool(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0], *indices = n.outputs.size() > 1 ? n.outputs[1] : nullptr;
  std::vector<int64_t> xs = shapeOf(x), ys = shapeOf(y), in = spatial(xs);
  auto win = windowOf(n, in, n.getInts("kernel_shape"));
  if (!win) return win.takeError();
  bool isMax = n.op == ir::Op::MaxPool, countPad = n.getInt("count_include_pad", 0);
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int e = b.newLoopVar(), kk = b.newLoopVar(), acc = b.newLocal(), cnt = b.newLocal(), arg = b.newLocal();
  auto c = B::coords(loopVar(e), ys);
  Tap tp = tap(*win, in, tail(c, 2), B::coords(loopVar(kk), win->kernel));
  ExprRef xv = b.ld(x, B::offset(cat({c[0], c[1]}, tp.pos), xs));
  std::vector<StmtRef> inner;
  if (isMax && indices) { // the first position of the window's maximum, as the interpreter picks it
    ExprRef better = binary(KOp::And, tp.valid, binary(KOp::Or, gt(xv, local(acc, t)), lt(local(arg, Scalar::I64), 0.0)));
    ExprRef plane = c[0] * (double)xs[1] + c[1];
    inner = {set(arg, select(better, poolIndex(tp.pos, in, plane, n.getInt("storage_order", 0)), local(arg, Scalar::I64))),
             set(acc, select(better, xv, local(acc, t)))};
  } else if (isMax) inner = {set(acc, select(tp.valid, binary(KOp::Max, local(acc, t), xv), local(acc, t)))};
  else inner = {set(acc, B::add(local(acc, t), select(tp.valid, xv, B::c(0, t)))), set(cnt, B::add(local(cnt, t), cast(tp.valid, t)))};
  ExprRef result = isMax ? local(acc, t) : B::div(local(acc, t), countPad ? paddedCount(*win, in, tail(c, 2), t) : local(cnt, t));
  std::vector<StmtRef> body{let(acc, B::c(isMax ? -INFINITY : 0, t)), let(cnt, B::c(0, t)), let(arg, B::i(-1)),
                            loop(kk, product(win->kernel), false, inner), b.st(y, loopVar(e), result)};
  if (indices) body.push_back(b.st(indices, loopVar(e), local(arg, Scalar::I64)));
  return std::vector<Kernel>{b.finish(loop(e, numel(y), true, body))};
}

Expected<std::vector<Kernel>> lowerPoolGrad(const std::string& name, const ir::Node& n) {
  // dx[pos] sums dy over the windows that reach pos: for max, only where pos is
  // the window's first maximum (as the interpreter picks it).
  const ir::Value *x = n.input(0), *dy = n.input(1), *dx = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(x), ys = shapeOf(dy), in = spatial(xs), out = spatial(ys);
  auto win = windowOf(n, in, n.getInts("kernel_shape"));
  if (!win) return win.takeError();
  bool isMax = n.getString("mode", "") == "max", countPad = n.getInt("count_include_pad", 0);
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int e = b.newLoopVar(), kk = b.newLoopVar(), k2 = b.newLoopVar(), acc = b.newLocal(), best = b.newLocal(), bestAt = b.newLocal(), cnt = b.newLocal(),
      isBetter = b.newLocal();
  auto c = B::coords(loopVar(e), xs);
  Tap back = reverseTap(*win, out, tail(c, 2), B::coords(loopVar(kk), win->kernel));
  Tap fwd = tap(*win, in, back.pos, B::coords(loopVar(k2), win->kernel));
  ExprRef plane = B::add(B::mul(c[0], B::i(xs[1])), c[1]);
  ExprRef fwdAt = B::offset(fwd.pos, in), self = B::offset(tail(c, 2), in);
  ExprRef xv = b.ld(x, B::add(B::mul(plane, B::i(product(in))), fwdAt));
  ExprRef g = b.ld(dy, B::offset(cat({c[0], c[1]}, back.pos), ys));
  std::vector<StmtRef> perWindow;
  if (isMax) {
    ExprRef better = binary(KOp::And, fwd.valid, binary(KOp::Or, binary(KOp::Lt, local(bestAt, Scalar::I64), B::i(0)), binary(KOp::Gt, xv, local(best, t))));
    perWindow = {set(best, B::c(-INFINITY, t)), set(bestAt, B::i(-1)),
                 // The comparison is kept in a local: updating best first would change it.
                 loop(k2, product(win->kernel), false, {let(isBetter, better), set(best, select(local(isBetter, Scalar::I1), xv, local(best, t))),
                                                        set(bestAt, select(local(isBetter, Scalar::I1), fwdAt, local(bestAt, Scalar::I64)))}),
                 set(acc, B::add(local(acc, t), select(binary(KOp::And, back.valid, binary(KOp::Eq, local(bestAt, Scalar::I64), self)), g, B::c(0, t))))};
  } else {
    ExprRef count = countPad ? paddedCount(*win, in, back.pos, t) : local(cnt, t);
    perWindow = {set(cnt, B::c(0, t)), loop(k2, product(win->kernel), false, {set(cnt, B::add(local(cnt, t), cast(fwd.valid, t)))}),
                 set(acc, B::add(local(acc, t), select(back.valid, B::div(g, count), B::c(0, t))))};
  }
  return std::vector<Kernel>{b.finish(loop(e, numel(dx), true,
      {let(acc, B::c(0, t)), let(best, B::c(0, t)), let(bestAt, B::i(-1)), let(cnt, B::c(0, t)),
       loop(kk, product(win->kernel), false, perWindow), b.st(dx, loopVar(e), local(acc, t))}))};
}

/// Pad: constant mode fills, edge clamps, reflect mirrors about the border elements, wrap takes
/// the other side's elements.
Expected<std::vector<Kernel>> lowerPad(const std::string& name, const ir::Node& n) {
  std::string mode = n.getString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap") return makeError(ir::describe(n) + ": unknown mode '" + mode + "'");
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  ir::InferCtx ic = knownInputs(n);
  auto g = ir::padGeometry(ic, x->type.rank());
  if (!g) return g.takeError();
  std::vector<int64_t> xs = shapeOf(x);
  B b(name);
  int e = b.newLoopVar();
  auto c = B::coords(loopVar(e), shapeOf(y));
  std::vector<ExprRef> pos, conds;
  for (size_t d = 0; d < xs.size(); ++d) {
    ExprRef p = B::sub(c[d], B::i(g->begin[d]));
    double last = (double)(xs[d] - 1);
    if (mode == "constant") conds.push_back(inRange(p, xs[d]));
    if (mode == "reflect" && xs[d] > 1) p = select(lt(p, 0.0), -p, select(gt(p, last), 2 * last - p, p));
    if (mode == "wrap") p = binary(KOp::IMod, binary(KOp::IMod, p, B::i(xs[d])) + (double)xs[d], B::i(xs[d]));
    pos.push_back(B::clamp(p, xs[d]));
  }
  Scalar t = computeType(x->type.dtype);
  ExprRef fill = n.input(2) ? b.ld(n.input(2), B::i(0)) : B::c(0, t);
  return std::vector<Kernel>{b.finish(loop(e, numel(y), true, {b.st(y, loopVar(e), select(all(conds), b.ld(x, B::offset(pos, xs)), fill))}))};
}

Expected<std::vector<Kernel>> lowerBatchNorm(const std::string& name, const ir::Node& n) {
  bool grad = n.op == ir::Op::BatchNormGrad;
  const ir::Value *x = n.input(0), *scale = n.input(1);
  std::vector<int64_t> xs = shapeOf(x);
  int64_t N = xs[0], C = xs[1], inner = numel(x) / std::max<int64_t>(N * C, 1), cnt = N * inner;
  double eps = n.getFloat("epsilon", 1e-5);
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int ch = b.newLoopVar(), j1 = b.newLoopVar(), j2 = b.newLoopVar(), j3 = b.newLoopVar(), j4 = b.newLoopVar();
  int mean = b.newLocal(), var = b.newLocal(), inv = b.newLocal(), s1 = b.newLocal(), s2 = b.newLocal();
  auto at = [&](int j) { // element j of the channel: (j / inner, ch, j % inner)
    return B::add(B::mul(B::add(B::mul(binary(KOp::IDiv, loopVar(j), B::i(inner)), B::i(C)), loopVar(ch)), B::i(inner)), binary(KOp::IMod, loopVar(j), B::i(inner)));
  };
  bool training = grad || n.getInt("training_mode", 0);
  // The channel's statistics and the gradient's sums accumulate in float64 (see lowerConvFamily).
  Scalar a = accumulatorType(t);
  auto xa = [&](int j) { return cast(b.ld(x, at(j)), a); };
  std::vector<StmtRef> body;
  if (training) {
    ExprRef dev = xa(j2) - local(mean, a);
    body = {let(mean, constant(0, a)), loop(j1, cnt, false, {set(mean, local(mean, a) + xa(j1))}),
            set(mean, local(mean, a) / (double)cnt), let(var, constant(0, a)),
            loop(j2, cnt, false, {set(var, local(var, a) + dev * dev)}), set(var, local(var, a) / (double)cnt)};
  } else {
    body = {let(mean, cast(b.ld(n.input(3), loopVar(ch)), a)), let(var, cast(b.ld(n.input(4), loopVar(ch)), a))};
  }
  body.push_back(let(inv, 1 / sqrt(local(var, a) + eps)));
  auto xhat = [&](int j) { return (xa(j) - local(mean, a)) * local(inv, a); };
  auto ld = [&](const ir::Value* v, ExprRef i) { return cast(b.ld(v, std::move(i)), a); };
  if (!grad) {
    body.push_back(loop(j3, cnt, false, {b.st(n.outputs[0], at(j3), xhat(j3) * ld(scale, loopVar(ch)) + ld(n.input(2), loopVar(ch)))}));
    double mom = n.getFloat("momentum", 0.9);
    if (training && n.outputs.size() > 1 && n.outputs[1])
      body.push_back(b.st(n.outputs[1], loopVar(ch), ld(n.input(3), loopVar(ch)) * mom + local(mean, a) * (1 - mom)));
    if (training && n.outputs.size() > 2 && n.outputs[2])
      body.push_back(b.st(n.outputs[2], loopVar(ch), ld(n.input(4), loopVar(ch)) * mom + local(var, a) * (1 - mom)));
  } else {
    const ir::Value* dy = n.input(2);
    body.push_back(let(s1, constant(0, a)));
    body.push_back(let(s2, constant(0, a)));
    body.push_back(loop(j3, cnt, false, {set(s1, local(s1, a) + ld(dy, at(j3))), set(s2, local(s2, a) + ld(dy, at(j3)) * xhat(j3))}));
    ExprRef g = ld(scale, loopVar(ch));
    double M = (double)cnt;
    ExprRef dx = local(inv, a) / M * (M * (ld(dy, at(j4)) * g) - local(s1, a) * g - xhat(j4) * (local(s2, a) * g));
    body.push_back(loop(j4, cnt, false, {b.st(n.outputs[0], at(j4), dx)}));
    body.push_back(b.st(n.outputs[1], loopVar(ch), local(s2, a)));
    body.push_back(b.st(n.outputs[2], loopVar(ch), local(s1, a)));
  }
  return std::vector<Kernel>{b.finish(loop(ch, C, true, body))};
}

Expected<std::vector<Kernel>> lowerGlobalPool(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  int64_t plane = numel(x) / std::max<int64_t>(numel(y), 1);
  bool isMax = n.op == ir::Op::GlobalMaxPool;
  Scalar t = computeType(x->type.dtype);
  B b(name);
  int e = b.newLoopVar(), j = b.newLoopVar(), acc = b.newLocal();
  ExprRef v = b.ld(x, B::add(B::mul(loopVar(e), B::i(plane)), loopVar(j)));
  ExprRef combined = isMax ? binary(KOp::Max, local(acc, t), v) : B::add(local(acc, t), v);
  ExprRef result = isMax ? local(acc, t) : B::div(local(acc, t), B::c((double)plane, t));
  return std::vector<Kernel>{b.finish(loop(e, numel(y), true, {let(acc, B::c(isMax ? -INFINITY : 0, t)), loop(j, plane, false, {set(acc, combined)}), b.st(y, loopVar(e), result)}))};
}

} // namespace sgc::kir
