// Gradient rules of data-movement ops: reshapes, transposes, concatenation,
// splits, slices, gathers, broadcasts.
#include "ir/autodiff/Autodiff.h"

#include <algorithm>

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
  if (std::any_of(p.begin(), p.end(), [](int64_t v) { return v < 0; })) { // a crop somewhere: pad dy back by the opposite
    std::vector<int64_t> back;
    for (int64_t v : p) back.push_back(-v);
    c.dx[0] = c.emit(Op::Pad, {c.dy[0], c.ints(back), c.scalar(0, x->type.dtype), c.ints(axes)});
    return Error::success();
  }
  std::vector<int64_t> starts, ends;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    const Dim& d = x->type.dims[a];
    if (!d.isStatic()) return c.fail("padded dims must be static");
    starts.push_back(p[i]);
    ends.push_back(p[i] + d.value);
  }
  c.dx[0] = c.emit(Op::Slice, {c.dy[0], c.ints(starts), c.ints(ends), c.ints(axes)});
  return Error::success();
}

} // namespace sgc::ir

namespace sgc::ir {

Error gradGatherND(GradCtx& c) {
  c.dx[0] = c.emit(Op::GatherNDGrad, {c.dy[0], c.x(1), c.shapeOf(c.x(0))}, {{"batch_dims", c.n.getInt("batch_dims", 0)}});
  return Error::success();
}

/// A scatter without reduction passes dy on except where it wrote (those positions took the
/// updates), and the updates get dy at their positions; with "add" the data gets all of dy.
/// (Duplicate positions without a reduction have no defined result in ONNX: the last update
/// wins in the interpreter, and every duplicate gets dy here.)
Error gradScatter(GradCtx& c, bool nd) {
  std::string red = c.n.getString("reduction", "none");
  if (red != "none" && red != "add") return c.fail("only scatters without a reduction or with 'add' are differentiated");
  Value *idx = c.x(1), *upd = c.x(2), *dy = c.dy[0];
  std::map<std::string, Attr> axis;
  if (!nd) axis["axis"] = c.n.getInt("axis", 0);
  if (c.wants[0]) {
    Value* zeros = c.emit(Op::Expand, {c.scalar(0, upd->type.dtype), c.shapeOf(upd)});
    c.dx[0] = red == "add" ? dy : c.emit(nd ? Op::ScatterND : Op::ScatterElements, {dy, idx, zeros}, axis);
  }
  if (c.wants[2]) c.dx[2] = c.emit(nd ? Op::GatherND : Op::GatherElements, {dy, idx}, axis);
  return Error::success();
}

Error gradScatterND(GradCtx& c) { return gradScatter(c, true); }
Error gradScatterElements(GradCtx& c) { return gradScatter(c, false); }

} // namespace sgc::ir

namespace sgc::ir {

/// Resize is linear in X: its gradient scatters dy back through the same taps.
Error gradResize(GradCtx& c) {
  std::vector<Value*> ins{c.dy[0], c.shapeOf(c.x(0))};
  for (size_t i = 1; i < c.n.inputs.size(); ++i) ins.push_back(c.x(i));
  c.dx[0] = c.emit(Op::ResizeGrad, ins, c.n.attrs);
  return Error::success();
}

} // namespace sgc::ir
