// Gradient rules of elementwise ops. Broadcast inputs get their gradient
// summed back to their own shape (GradCtx::sumTo).
#include "ir/autodiff/Autodiff.h"

namespace sgc::ir {

Error gradUnary(GradCtx& c) {
  std::map<std::string, Attr> attrs = c.n.attrs;
  attrs["of"] = std::string(opName(c.n.op));
  // Identity and Neg have constant derivatives: their gradients do not read x (which then need
  // not live until the backward pass).
  if (c.n.op == Op::Identity) c.dx[0] = c.dy[0];
  else if (c.n.op == Op::Neg) c.dx[0] = c.emit(Op::Neg, {c.dy[0]});
  else c.dx[0] = c.emit(Op::UnaryGrad, {c.x(0), c.dy[0]}, attrs);
  return Error::success();
}

Error gradClip(GradCtx& c) {
  Value* mask = nullptr;
  if (c.x(1)) mask = c.emit(Op::GreaterOrEqual, {c.x(0), c.x(1)});
  if (c.x(2)) {
    Value* upper = c.emit(Op::LessOrEqual, {c.x(0), c.x(2)});
    mask = mask ? c.emit(Op::And, {mask, upper}) : upper;
  }
  c.dx[0] = mask ? c.maskedBy(mask, c.dy[0], c.x(0)->type.dtype) : c.dy[0];
  return Error::success();
}

Error gradCast(GradCtx& c) {
  c.dx[0] = c.emit(Op::Cast, {c.dy[0]}, {{"to", std::string(dtypeName(c.x(0)->type.dtype))}});
  return Error::success();
}

Error gradBinary(GradCtx& c) {
  Value *a = c.x(0), *b = c.x(1), *y = c.y(0), *dy = c.dy[0];
  DType t = a->type.dtype;
  Value *da = nullptr, *db = nullptr;
  switch (c.n.op) {
  case Op::Add: da = dy, db = dy; break;
  case Op::Sub: da = dy, db = c.wants[1] ? c.emit(Op::Neg, {dy}) : nullptr; break;
  case Op::Mul:
    da = c.wants[0] ? c.emit(Op::Mul, {dy, b}) : nullptr;
    db = c.wants[1] ? c.emit(Op::Mul, {dy, a}) : nullptr;
    break;
  case Op::Div:
    da = c.wants[0] ? c.emit(Op::Div, {dy, b}) : nullptr;
    db = c.wants[1] ? c.emit(Op::Neg, {c.emit(Op::Div, {c.emit(Op::Mul, {dy, y}), b})}) : nullptr;
    break;
  case Op::Pow: {
    Value* e = b->type.dtype == t ? b : c.emit(Op::Cast, {b}, {{"to", std::string(dtypeName(t))}});
    if (c.wants[0]) // b * a^(b-1) * dy
      da = c.emit(Op::Mul, {dy, c.emit(Op::Mul, {e, c.emit(Op::Pow, {a, c.emit(Op::Sub, {e, c.scalar(1, t)})})})});
    if (c.wants[1]) db = c.emit(Op::Mul, {dy, c.emit(Op::Mul, {y, c.emit(Op::Log, {a})})});
    break;
  }
  default: return c.fail("no binary rule");
  }
  if (c.wants[0]) c.dx[0] = c.sumTo(da, a, y);
  if (c.wants[1]) c.dx[1] = c.sumTo(db, b, y);
  return Error::success();
}

Error gradVariadic(GradCtx& c) {
  Value *y = c.y(0), *dy = c.dy[0];
  DType t = y->type.dtype;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    if (!c.wants[i]) continue;
    Value* x = c.x(i);
    Value* d = dy;
    if (c.n.op == Op::Mean) d = c.emit(Op::Div, {dy, c.scalar((double)c.n.inputs.size(), t)});
    if (c.n.op == Op::Min || c.n.op == Op::Max) d = c.maskedBy(c.emit(Op::Equal, {x, y}), dy, t);
    c.dx[i] = c.sumTo(d, x, y);
  }
  return Error::success();
}

Error gradWhere(GradCtx& c) {
  Value *cond = c.x(0), *y = c.y(0), *dy = c.dy[0];
  DType t = y->type.dtype;
  if (c.wants[1]) c.dx[1] = c.sumTo(c.maskedBy(cond, dy, t), c.x(1), y);
  if (c.wants[2]) c.dx[2] = c.sumTo(c.emit(Op::Where, {cond, c.scalar(0, t), dy}), c.x(2), y);
  return Error::success();
}

} // namespace sgc::ir
