// Lowerings of data movement: copies, transposes, broadcasts, slices,
// concatenation, splits, gathers and their gradients.
#include "codegen/kir/Builder.h"
#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"
#include "ir/shapes/Shapes.h"

namespace sgc::kir {

namespace {
using B = Builder;
} // namespace

Expected<std::vector<Kernel>> lowerCopy(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  return std::vector<Kernel>{pointwise(name, y, [&](B& b, const std::vector<ExprRef>&) {
    return b.ld(x, loopVar(0));
  })};
}

namespace {

/// Index of x (shape `in`) broadcast against output coordinates `c`.
ExprRef broadcastOffset(const std::vector<ExprRef>& c, const std::vector<int64_t>& in) {
  std::vector<ExprRef> ic;
  size_t lead = c.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) ic.push_back(in[d] == 1 ? B::i(0) : c[lead + d]);
  return B::offset(ic, in);
}

/// The kernel of a movement node alone: each result element is movedElement's, from loads.
Expected<std::vector<Kernel>> movedKernel(const std::string& name, const ir::Node& n) {
  std::optional<Error> failed;
  Kernel k = pointwise(name, n.outputs[0], [&](B& b, const std::vector<ExprRef>& c) {
    auto e = movedElement(n, c, [&](size_t i, ExprRef offset) { return b.ld(n.input(i), std::move(offset)); });
    if (e) return *e;
    failed = e.takeError();
    return B::i(0);
  });
  if (failed) return std::move(*failed);
  return std::vector<Kernel>{std::move(k)};
}

} // namespace

bool isFusibleMovement(const ir::Node& n) {
  auto isStatic = [](const ir::Value* v) { return v && v->type.isStatic(); };
  if (n.outputs.size() != 1 || !isStatic(n.outputs[0]) || !isStatic(n.input(0))) return false;
  switch (n.op) {
  case ir::Op::Reshape: case ir::Op::Flatten: case ir::Op::Squeeze: case ir::Op::Unsqueeze:
  case ir::Op::Transpose: case ir::Op::Expand: return true;
  case ir::Op::Concat: return std::all_of(n.inputs.begin(), n.inputs.end(), isStatic);
  case ir::Op::Slice: return (bool)ir::sliceGeometry(knownInputs(n), shapeOf(n.input(0)));
  case ir::Op::SliceGrad: return (bool)ir::sliceGeometry(knownInputs(n, 2, 1), shapeOf(n.outputs[0]));
  default: return false;
  }
}

Expected<ExprRef> movedElement(const ir::Node& n, const std::vector<ExprRef>& c, const ElementOf& input) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  switch (n.op) {
  case ir::Op::Reshape: case ir::Op::Flatten: case ir::Op::Squeeze: case ir::Op::Unsqueeze: // the same element order
    return input(0, B::offset(c, shapeOf(y)));
  case ir::Op::Transpose: {
    int64_t r = x->type.rank();
    std::vector<int64_t> perm = n.getInts("perm");
    if (perm.empty())
      for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
    std::vector<ExprRef> in(r);
    for (int64_t d = 0; d < r; ++d) in[perm[d]] = c[d];
    return input(0, B::offset(in, shapeOf(x)));
  }
  case ir::Op::Expand: return input(0, broadcastOffset(c, shapeOf(x)));
  case ir::Op::Slice: {
    auto g = ir::sliceGeometry(knownInputs(n), shapeOf(x));
    if (!g) return g.takeError();
    std::vector<ExprRef> in;
    for (size_t d = 0; d < c.size(); ++d) in.push_back(B::add(B::i((*g)[d].start), B::mul(c[d], B::i((*g)[d].step))));
    return input(0, B::offset(in, shapeOf(x)));
  }
  case ir::Op::SliceGrad: {
    // Each element of dx is dy's element where the slice read it (the coordinate lies on the
    // slice's lattice in every dim), else zero.
    auto g = ir::sliceGeometry(knownInputs(n, 2, 1), shapeOf(y)); // the forward Slice's view: (x, starts, ends, axes, steps)
    if (!g) return g.takeError();
    std::vector<ExprRef> at;
    ExprRef inside = constant(1, Scalar::I1);
    for (size_t d = 0; d < c.size(); ++d) {
      const ir::SliceDim& s = (*g)[d];
      ExprRef off = c[d] - (double)s.start, q = binary(KOp::IDiv, off, B::i(s.step));
      ExprRef on = binary(KOp::And, eq(q * (double)s.step, off), binary(KOp::And, ge(q, 0), lt(q, (double)s.count)));
      inside = binary(KOp::And, inside, on);
      at.push_back(B::within(q, std::max<int64_t>(s.count, 1)));
    }
    return select(inside, input(0, B::offset(at, shapeOf(x))), constant(0, computeType(y->type.dtype)));
  }
  case ir::Op::Concat: {
    // The last input whose range starts at or before the coordinate, built as a chain of selects;
    // every input's index is kept within it, so that the elements not chosen are read in bounds.
    int64_t axis = axisOf(n, y->type.rank()), start = 0;
    ExprRef value;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ir::Value* in = n.inputs[k];
      int64_t len = in->type.dims[axis].value;
      std::vector<ExprRef> ic = c;
      ic[axis] = B::within(B::sub(c[axis], B::i(start)), std::max<int64_t>(len, 1));
      ExprRef v = input(k, B::offset(ic, shapeOf(in)));
      value = value ? select(binary(KOp::Ge, c[axis], B::i(start)), v, value) : v;
      start += len;
    }
    return value;
  }
  default: return makeError(ir::describe(n) + ": not a data movement the code generator fuses");
  }
}

Expected<std::vector<Kernel>> lowerTranspose(const std::string& name, const ir::Node& n) { return movedKernel(name, n); }
Expected<std::vector<Kernel>> lowerExpand(const std::string& name, const ir::Node& n) { return movedKernel(name, n); }
Expected<std::vector<Kernel>> lowerSlice(const std::string& name, const ir::Node& n) { return movedKernel(name, n); }
/// The gradient of a Slice: one parallel iteration per element of dx, no atomics.
Expected<std::vector<Kernel>> lowerSliceGrad(const std::string& name, const ir::Node& n) { return movedKernel(name, n); }
Expected<std::vector<Kernel>> lowerConcat(const std::string& name, const ir::Node& n) { return movedKernel(name, n); }

Expected<std::vector<Kernel>> lowerSplit(const std::string& name, const ir::Node& n) {
  const ir::Value* x = n.input(0);
  int64_t axis = axisOf(n, x->type.rank());
  std::vector<Kernel> ks;
  int64_t start = 0;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const ir::Value* y = n.outputs[k];
    if (y) {
      ks.push_back(pointwise(name + "_" + std::to_string(k), y, [&](B& b, const std::vector<ExprRef>& c) {
        std::vector<ExprRef> ic = c;
        ic[axis] = B::add(c[axis], B::i(start));
        return b.ld(x, B::offset(ic, shapeOf(x)));
      }));
      start += y->type.dims[axis].value;
    } else {
      return makeError(ir::describe(n) + ": unused results of Split are not generated yet");
    }
  }
  return ks;
}

Expected<std::vector<Kernel>> lowerGather(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *idx = n.input(1), *y = n.outputs[0];
  int64_t axis = axisOf(n, x->type.rank()), ir = idx->type.rank();
  return std::vector<Kernel>{pointwise(name, y, [&](B& b, const std::vector<ExprRef>& c) {
    std::vector<ExprRef> ic(c.begin() + axis, c.begin() + axis + ir), xc(c.begin(), c.begin() + axis);
    xc.push_back(gatheredIndex(b, idx, B::offset(ic, shapeOf(idx)), x->type.dims[axis].value));
    xc.insert(xc.end(), c.begin() + axis + ir, c.end());
    return b.ld(x, B::offset(xc, shapeOf(x)));
  })};
}

Expected<std::vector<Kernel>> lowerGatherGrad(const std::string& name, const ir::Node& n) {
  // dx[a, j, i] = sum over k with indices[k] == j of dy[a, k, i]
  const ir::Value *dy = n.input(0), *idx = n.input(1), *dx = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(dx);
  int64_t axis = axisOf(n, (int64_t)xs.size()), count = numel(idx), d = xs[axis];
  int64_t inner = 1;
  for (size_t q = axis + 1; q < xs.size(); ++q) inner *= xs[q];
  B b(name);
  int o = b.newLoopVar(), k = b.newLoopVar(), acc = b.newLocal();
  Scalar t = computeType(dx->type.dtype);
  ExprRef flat = loopVar(o);
  ExprRef a = binary(KOp::IDiv, flat, B::i(d * inner)), j = binary(KOp::IMod, binary(KOp::IDiv, flat, B::i(inner)), B::i(d)),
          i = binary(KOp::IMod, flat, B::i(inner));
  ExprRef dyAt = B::add(B::mul(B::add(B::mul(a, B::i(count)), loopVar(k)), B::i(inner)), i);
  ExprRef hit = binary(KOp::Eq, gatheredIndex(b, idx, loopVar(k), d), j);
  ExprRef add = B::add(local(acc, t), select(hit, b.ld(dy, dyAt), B::c(0, t)));
  return std::vector<Kernel>{b.finish(loop(o, numel(dx), true, {let(acc, B::c(0, t)), loop(k, count, false, {set(acc, add)}), b.st(dx, flat, local(acc, t))}))};
}

/// A SumTo of at most this many terms per result is an elementwise kernel, its sum unrolled (a
/// grouped-query attention's key and value gradients: 4 heads' each).
constexpr int64_t kMostUnrolledTerms = 8;

Expected<std::vector<Kernel>> lowerSumTo(const std::string& name, const ir::Node& n) {
  // Output dims that are 1 (or missing) where the input's are not are summed away.
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  std::vector<int64_t> xs = shapeOf(x), ys = shapeOf(y);
  size_t lead = xs.size() - ys.size();
  std::vector<int64_t> keptDims, redDims;
  for (size_t d = 0; d < xs.size(); ++d) {
    bool reduced = d < lead || (ys[d - lead] == 1 && xs[d] != 1);
    (reduced ? redDims : keptDims).push_back((int64_t)d);
  }
  int64_t extent = 1;
  for (int64_t d : redDims) extent *= xs[d];
  if (extent <= kMostUnrolledTerms) { // the terms in the loop's order: the same sum
    return std::vector<Kernel>{pointwise(name, y, [&](B& b, const std::vector<ExprRef>& c) {
      Scalar t = computeType(x->type.dtype);
      std::vector<int64_t> redShape;
      for (int64_t d : redDims) redShape.push_back(xs[d]);
      ExprRef sum = B::c(0, t);
      for (int64_t r = 0; r < extent; ++r) {
        std::vector<ExprRef> xc(xs.size()), rc = B::coords(B::i(r), redShape);
        for (size_t q = 0, k = 0; q < xs.size(); ++q) xc[q] = k < redDims.size() && redDims[k] == (int64_t)q ? rc[k++] : c[q - lead];
        sum = B::add(sum, b.ld(x, B::offset(xc, xs)));
      }
      return sum;
    })};
  }
  B b(name);
  int o = b.newLoopVar(), r = b.newLoopVar(), acc = b.newLocal();
  Scalar t = computeType(x->type.dtype);
  std::vector<ExprRef> xc(xs.size());
  std::vector<int64_t> keptShape, redShape;
  for (int64_t d : keptDims) keptShape.push_back(xs[d]);
  for (int64_t d : redDims) redShape.push_back(xs[d]);
  auto kc = B::coords(loopVar(o), keptShape), rc = B::coords(loopVar(r), redShape);
  for (size_t q = 0; q < keptDims.size(); ++q) xc[keptDims[q]] = kc[q];
  for (size_t q = 0; q < redDims.size(); ++q) xc[redDims[q]] = rc[q];
  ExprRef add = B::add(local(acc, t), b.ld(x, B::offset(xc, xs)));
  return std::vector<Kernel>{b.finish(loop(o, numel(y), true, {let(acc, B::c(0, t)), loop(r, extent, false, {set(acc, add)}), b.st(y, loopVar(o), local(acc, t))}))};
}

} // namespace sgc::kir
