// Gradient rules of data-movement ops: reshapes, transposes, concatenation,
// splits, slices, gathers, broadcasts.
#include "ir/autodiff/Autodiff.h"

namespace sgc::ir {

Error gradReshape(GradCtx& c) {
  c.dx[0] = c.emit(Op::Reshape, {c.dy[0], c.shapeOf(c.x(0))});
  return Error::success();
}

Error gradTranspose(GradCtx& c) {
  int64_t r = c.x(0)->type.rank();
  std::vector<int64_t> perm = c.n.getInts("perm"), inv(r);
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  for (int64_t i = 0; i < r; ++i) inv[perm[i]] = i;
  c.dx[0] = c.emit(Op::Transpose, {c.dy[0]}, {{"perm", inv}});
  return Error::success();
}

Error gradConcat(GradCtx& c) {
  Value* y = c.y(0);
  if (!y->type.ranked) return c.fail("the result rank must be known");
  int64_t r = y->type.rank(), axis = c.n.getInt("axis", 0);
  if (axis < 0) axis += r;
  int64_t offset = 0;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const Dim& d = c.x(i)->type.dims[axis];
    if (!d.isStatic()) return c.fail("the concatenated dims must be static");
    if (c.wants[i])
      c.dx[i] = c.emit(Op::Slice, {c.dy[0], c.ints({offset}), c.ints({offset + d.value}), c.ints({axis})});
    offset += d.value;
  }
  return Error::success();
}

Error gradSplit(GradCtx& c) {
  std::vector<Value*> parts;
  for (size_t i = 0; i < c.n.outputs.size(); ++i) {
    Value* y = c.y(i);
    if (c.dy[i]) parts.push_back(c.dy[i]);
    else if (y) parts.push_back(c.emit(Op::ConstantOfShape, {c.shapeOf(y)}, {{"value", Tensor(y->type.dtype, {1})}}));
    else return c.fail("an unused result of Split leaves the gradient's shape unknown");
  }
  c.dx[0] = c.emit(Op::Concat, parts, {{"axis", c.n.getInt("axis", 0)}});
  return Error::success();
}

Error gradSlice(GradCtx& c) {
  std::vector<Value*> ins{c.dy[0], c.shapeOf(c.x(0))};
  for (size_t i = 1; i < c.n.inputs.size(); ++i) ins.push_back(c.x(i));
  c.dx[0] = c.emit(Op::SliceGrad, ins);
  return Error::success();
}

Error gradGather(GradCtx& c) {
  c.dx[0] = c.emit(Op::GatherGrad, {c.dy[0], c.x(1), c.shapeOf(c.x(0))}, {{"axis", c.n.getInt("axis", 0)}});
  return Error::success();
}

Error gradGatherElements(GradCtx& c) {
  c.dx[0] = c.emit(Op::GatherElementsGrad, {c.dy[0], c.x(1), c.shapeOf(c.x(0))}, {{"axis", c.n.getInt("axis", 0)}});
  return Error::success();
}

Error gradExpand(GradCtx& c) {
  c.dx[0] = c.sumTo(c.dy[0], c.x(0), c.y(0));
  return Error::success();
}

Error gradTrilu(GradCtx& c) {
  std::vector<Value*> ins{c.dy[0]};
  if (c.x(1)) ins.push_back(c.x(1));
  c.dx[0] = c.emit(Op::Trilu, ins, c.n.attrs);
  return Error::success();
}

Error gradPad(GradCtx& c) {
  if (c.n.getString("mode", "constant") != "constant") return c.fail("only constant-mode Pad is differentiated");
  Value *x = c.x(0), *pads = c.x(1);
  if (!x->type.ranked || pads->kind != ValueKind::Const || (c.x(3) && c.x(3)->kind != ValueKind::Const))
    return c.fail("the pads and the input rank must be known");
  // dx is dy with the padding sliced off: starts = pads before, ends = starts + dims.
  int64_t r = x->type.rank();
  std::vector<int64_t> p = pads->data->toI64(), axes;
  if (c.x(3)) axes = c.x(3)->data->toI64();
  else
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  std::vector<int64_t> starts, ends;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    const Dim& d = x->type.dims[a];
    if (!d.isStatic()) return c.fail("padded dims must be static");
    if (p[i] < 0 || p[i + axes.size()] < 0) return c.fail("negative pads are not differentiated");
    starts.push_back(p[i]);
    ends.push_back(p[i] + d.value);
  }
  c.dx[0] = c.emit(Op::Slice, {c.dy[0], c.ints(starts), c.ints(ends), c.ints(axes)});
  return Error::success();
}

} // namespace sgc::ir
