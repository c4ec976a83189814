// Gradient rules of MatMul, Gemm, fused attention, convolution and pooling.
#include "ir/autodiff/Autodiff.h"

namespace sgc::ir {
namespace {
/// Swaps the last two dims of a value of rank r; of a value that is itself such a swap, its source.
Value* swapLast(GradCtx& c, Value* v, int64_t r) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[r - 1], perm[r - 2]);
  if (v->producer && v->producer->op == Op::Transpose && v->producer->getInts("perm") == perm) return v->producer->inputs[0];
  return c.emit(Op::Transpose, {v}, {{"perm", perm}});
}
} // namespace

Error gradMatMul(GradCtx& c) {
  Value *a = c.x(0), *b = c.x(1), *dy = c.dy[0];
  if (!a->type.ranked || !b->type.ranked) return c.fail("operand ranks must be known");
  // 1-D operands act as matrices [1, K] and [K, 1]; lift them and dy accordingly.
  int64_t ra = a->type.rank(), rb = b->type.rank();
  Value *a2 = a, *b2 = b, *dy2 = dy;
  if (ra == 1) a2 = c.emit(Op::Unsqueeze, {a, c.ints({0})});
  if (rb == 1) b2 = c.emit(Op::Unsqueeze, {b, c.ints({1})});
  if (ra == 1 && rb == 1) dy2 = c.emit(Op::Reshape, {dy, c.ints({1, 1})});
  else if (ra == 1) dy2 = c.emit(Op::Unsqueeze, {dy, c.ints({-2})});
  else if (rb == 1) dy2 = c.emit(Op::Unsqueeze, {dy, c.ints({-1})});
  int64_t r2a = std::max<int64_t>(ra, 2), r2b = std::max<int64_t>(rb, 2), ry = std::max(r2a, r2b);
  // Sum over broadcast batch dims, then drop the lifted dim of a 1-D operand.
  auto fit = [&](Value* d, Value* v2, Value* v, int64_t r) {
    bool same = d->type.isStatic() && v2->type.isStatic() && d->type.shape() == v2->type.shape();
    if (ry > 2 && !same) d = c.emit(Op::SumTo, {d, c.shapeOf(v2)});
    return r == 1 ? c.emit(Op::Reshape, {d, c.shapeOf(v)}) : d;
  };
  if (c.wants[0]) c.dx[0] = fit(c.emit(Op::MatMul, {dy2, swapLast(c, b2, r2b)}), a2, a, ra);
  const Dim &k = a->type.dims.back(), &n = c.y(0)->type.dims.back(); // (dy is not typed yet: y's type)
  if (c.wants[1] && rb == 2 && ra > 2 && k.isStatic() && n.isStatic()) {
    // A weight shared by a batch: its gradient is one product over all the batch's rows,
    // a^T [K, rows] x dy [rows, N], instead of a product per batch element summed afterwards.
    Value* rows = c.emit(Op::Reshape, {a, c.ints({-1, k.value})});
    Value* drows = c.emit(Op::Reshape, {dy, c.ints({-1, n.value})});
    c.dx[1] = c.emit(Op::MatMul, {swapLast(c, rows, 2), drows});
  } else if (c.wants[1]) {
    c.dx[1] = fit(c.emit(Op::MatMul, {swapLast(c, a2, r2a), dy2}), b2, b, rb);
  }
  return Error::success();
}

Error gradGemm(GradCtx& c) {
  Value *a = c.x(0), *b = c.x(1), *dy = c.dy[0];
  int64_t ta = c.n.getInt("transA", 0), tb = c.n.getInt("transB", 0);
  double alpha = c.n.getFloat("alpha", 1), beta = c.n.getFloat("beta", 1);
  auto gemm = [&](Value* l, Value* r, int64_t tl, int64_t tr) {
    return c.emit(Op::Gemm, {l, r}, {{"transA", tl}, {"transB", tr}, {"alpha", alpha}});
  };
  if (c.wants[0]) c.dx[0] = ta ? gemm(b, dy, tb, 1) : gemm(dy, b, 0, 1 - tb);
  if (c.wants[1]) c.dx[1] = tb ? gemm(dy, a, 1, ta) : gemm(a, dy, 1 - ta, 0);
  if (c.wants.size() > 2 && c.wants[2]) {
    Value* d = beta == 1 ? dy : c.emit(Op::Mul, {dy, c.scalar(beta, c.y(0)->type.dtype)});
    c.dx[2] = c.sumTo(d, c.x(2), c.y(0));
  }
  return Error::success();
}

Error gradAttention(GradCtx& c) {
  if (c.dy.size() > 1 && c.dy[1]) return c.fail("no gradient flows through the log-sum-exp result");
  if (!c.dy[0]) return c.fail("no gradient reaches the result");
  Node* g = c.emitNode(Op::FusedAttentionGrad, {c.x(0), c.x(1), c.x(2), c.y(0), c.y(1), c.dy[0]}, 4, c.n.attrs);
  if (c.n.getString("layout", "bhtd") == "bt3hd") { // one operand, passed three times: its whole gradient once
    g->outputs[1] = g->outputs[2] = nullptr;
    c.dx[0] = g->outputs[0];
    return Error::success();
  }
  for (size_t i = 0; i < 3; ++i)
    if (c.wants[i]) c.dx[i] = g->outputs[i];
  // Grouped-query attention: dk and dv come per query head [..., H, T, D]; the keys and values
  // [..., Hkv, T, D] get each group's sum (through [..., Hkv, H / Hkv, T, D]).
  const Type &q = c.x(0)->type, &k = c.x(1)->type;
  if (c.n.getString("layout", "bhtd") != "bhtd" || !q.isStatic() || !k.isStatic() || q.rank() < 3) return Error::success();
  int64_t r = q.rank(), heads = q.dims[r - 3].value, kvHeads = k.dims[r - 3].value;
  if (heads == kvHeads) return Error::success();
  for (size_t i = 1; i < 3; ++i) {
    if (!c.dx[i]) continue;
    std::vector<int64_t> to = c.x(i)->type.shape(), grouped = to;
    grouped.insert(grouped.begin() + (r - 2), heads / kvHeads);
    std::vector<int64_t> summed = grouped;
    summed[r - 2] = 1;
    Value* perGroup = c.emit(Op::Reshape, {c.dx[i], c.ints(grouped)});
    c.dx[i] = c.emit(Op::Reshape, {c.emit(Op::SumTo, {perGroup, c.ints(summed)}), c.ints(to)});
  }
  return Error::success();
}

Error gradConv(GradCtx& c) {
  Value *x = c.x(0), *w = c.x(1), *dy = c.dy[0];
  std::map<std::string, Attr> attrs = c.n.attrs;
  if (c.wants[0]) c.dx[0] = c.emit(Op::ConvGradInput, {dy, w, c.shapeOf(x)}, attrs);
  if (c.wants[1]) c.dx[1] = c.emit(Op::ConvGradWeight, {x, dy, c.shapeOf(w)}, attrs);
  if (c.wants.size() > 2 && c.wants[2]) {
    std::vector<int64_t> axes{0};
    for (int64_t i = 2; i < x->type.rank(); ++i) axes.push_back(i);
    c.dx[2] = c.emit(Op::ReduceSum, {dy, c.ints(axes)}, {{"keepdims", int64_t(0)}});
  }
  return Error::success();
}

/// ConvGradInput (the transposed convolution, ConvTranspose's form) is linear in both operands:
/// the gradient of its dy operand is the forward convolution of the upstream gradient, that of
/// the weights the weight gradient with the two swapped.
Error gradConvGradInput(GradCtx& c) {
  Value *a = c.x(0), *w = c.x(1), *g = c.dy[0];
  std::map<std::string, Attr> attrs = c.n.attrs;
  if (c.wants[0]) c.dx[0] = c.emit(Op::Conv, {g, w}, attrs);
  if (c.wants[1]) c.dx[1] = c.emit(Op::ConvGradWeight, {g, a, c.shapeOf(w)}, attrs);
  return Error::success();
}

Error gradPool(GradCtx& c) {
  std::map<std::string, Attr> attrs = c.n.attrs;
  attrs["mode"] = std::string(c.n.op == Op::MaxPool ? "max" : "avg");
  if (c.dy.size() > 1 && c.dy[1]) return c.fail("MaxPool's indices output has no gradient");
  c.dx[0] = c.emit(Op::PoolGrad, {c.x(0), c.dy[0]}, attrs);
  return Error::success();
}

Error gradGlobalPool(GradCtx& c) {
  Value *x = c.x(0), *y = c.y(0), *dy = c.dy[0];
  DType t = x->type.dtype;
  Value* spread = c.emit(Op::Expand, {dy, c.shapeOf(x)});
  if (c.n.op == Op::GlobalMaxPool) {
    c.dx[0] = c.maskedBy(c.emit(Op::Equal, {x, c.emit(Op::Expand, {y, c.shapeOf(x)})}), spread, t);
    return Error::success();
  }
  Value* ratio = c.emit(Op::Div, {c.emit(Op::Cast, {c.emit(Op::Size, {y})}, {{"to", std::string(dtypeName(t))}}),
                                  c.emit(Op::Cast, {c.emit(Op::Size, {x})}, {{"to", std::string(dtypeName(t))}})});
  c.dx[0] = c.emit(Op::Mul, {spread, ratio});
  return Error::success();
}

} // namespace sgc::ir
