// Gradient rules of reductions, softmax, normalizations, dropout and losses.
#include "ir/autodiff/Autodiff.h"
#include "ir/shapes/Shapes.h"

#include <set>

namespace sgc::ir {
namespace {

/// The normalized reduction axes of a Reduce* node, when known.
std::optional<std::vector<int64_t>> reduceAxes(GradCtx& c) {
  int64_t r = c.x(0)->type.rank();
  std::vector<int64_t> axes;
  if (Value* a = c.x(1)) {
    if (a->kind != ValueKind::Const) return std::nullopt;
    axes = a->data->toI64();
  }
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  std::set<int64_t> s;
  for (int64_t a : axes) s.insert(a < 0 ? a + r : a);
  return std::vector<int64_t>(s.begin(), s.end());
}

} // namespace

Error gradReduce(GradCtx& c) {
  Value *x = c.x(0), *y = c.y(0), *dy = c.dy[0];
  DType t = x->type.dtype;
  if (!x->type.ranked) return c.fail("the input rank must be known");
  if (c.x(1) && c.x(1)->kind == ValueKind::Const && c.x(1)->data->numel() == 0 && c.n.getInt("noop_with_empty_axes", 0)) {
    c.dx[0] = dy; // identity
    return Error::success();
  }
  auto axes = reduceAxes(c);
  if (!axes) return c.fail("the reduction axes must be constant");
  // Bring dy (and y) back to the keepdims layout, then broadcast over x.
  Value *dyk = dy, *yk = y;
  if (!c.n.getInt("keepdims", 1) && !axes->empty()) {
    dyk = c.emit(Op::Unsqueeze, {dy, c.ints(*axes)});
    yk = c.emit(Op::Unsqueeze, {y, c.ints(*axes)});
  }
  Value* shape = c.shapeOf(x);
  Value* d = c.emit(Op::Expand, {dyk, shape});
  Value* ye = nullptr;
  auto yExpanded = [&] { return ye ? ye : ye = c.emit(Op::Expand, {yk, shape}); };
  switch (c.n.op) {
  case Op::ReduceSum: break;
  case Op::ReduceMean: {
    auto cast = [&](Value* v) { return c.emit(Op::Cast, {c.emit(Op::Size, {v})}, {{"to", std::string(dtypeName(t))}}); };
    d = c.emit(Op::Mul, {d, c.emit(Op::Div, {cast(y), cast(x)})});
    break;
  }
  case Op::ReduceSumSquare: d = c.emit(Op::Mul, {d, c.emit(Op::Mul, {x, c.scalar(2, t)})}); break;
  case Op::ReduceL2: d = c.emit(Op::Mul, {d, c.emit(Op::Div, {x, yExpanded()})}); break;
  case Op::ReduceL1: d = c.emit(Op::Mul, {d, c.emit(Op::Sign, {x})}); break;
  case Op::ReduceLogSum: d = c.emit(Op::Div, {d, c.emit(Op::Exp, {yExpanded()})}); break;
  case Op::ReduceLogSumExp: d = c.emit(Op::Mul, {d, c.emit(Op::Exp, {c.emit(Op::Sub, {x, yExpanded()})})}); break;
  case Op::ReduceProd: d = c.emit(Op::Mul, {d, c.emit(Op::Div, {yExpanded(), x})}); break;
  case Op::ReduceMax:
  case Op::ReduceMin: { // ties share the gradient equally
    Value* mask = c.emit(Op::Equal, {x, yExpanded()});
    Value* count = c.emit(Op::ReduceSum, {c.emit(Op::Cast, {mask}, {{"to", std::string(dtypeName(t))}}), c.ints(*axes)},
                          {{"keepdims", int64_t(1)}});
    d = c.maskedBy(mask, c.emit(Op::Div, {d, c.emit(Op::Expand, {count, shape})}), t);
    break;
  }
  default: return c.fail("no reduction rule");
  }
  c.dx[0] = d;
  return Error::success();
}

Error gradSoftmax(GradCtx& c) {
  c.dx[0] = c.emit(Op::SoftmaxGrad, {c.y(0), c.dy[0]},
                   {{"axis", c.n.getInt("axis", -1)}, {"log", int64_t(c.n.op == Op::LogSoftmax)}});
  return Error::success();
}

/// Gives the normalization `c.n` results 1 .. count - 1 (its row statistics) where it has none,
/// typed by its own shape rule, so that the gradient reuses what the forward computes.
static Error giveStatistics(GradCtx& c, size_t count) {
  while (c.n.outputs.size() < count) c.g.addResult(&c.n, c.n.name + ".stat");
  for (size_t i = 1; i < count; ++i)
    if (!c.n.outputs[i]) {
      Value* v = c.g.addResult(&c.n, c.n.name + ".stat");
      c.n.outputs.pop_back();
      c.n.outputs[i] = v;
    }
  InferCtx ic{c.n, {}, {}, {}}; // types for the new results, from the node's own rule
  for (Value* in : c.n.inputs) {
    ic.in.push_back(in ? in->type : Type{});
    ic.values.push_back(nullptr);
  }
  if (Error e = inferNode(ic)) return e;
  for (size_t i = 1; i < count; ++i) c.n.outputs[i]->type = ic.out[i];
  return Error::success();
}

Error gradLayerNorm(GradCtx& c) {
  if ((c.dy.size() > 1 && c.dy[1]) || (c.dy.size() > 2 && c.dy[2]))
    return c.fail("gradients through the Mean and InvStdDev outputs are not supported");
  if (Error e = giveStatistics(c, 3)) return e; // mean, 1 / std-dev
  Node* g = c.emitNode(Op::LayerNormGrad, {c.x(0), c.x(1), c.dy[0], c.n.outputs[1], c.n.outputs[2]}, 3,
                       {{"axis", c.n.getInt("axis", -1)}, {"epsilon", c.n.getFloat("epsilon", 1e-5)}});
  for (size_t i = 0; i < 3 && i < c.dx.size(); ++i) c.dx[i] = g->outputs[i];
  if (c.dx.size() > 2 && c.x(2) && c.x(2)->type.ranked && c.x(1)->type.ranked && !(c.x(2)->type.dims == c.x(1)->type.dims))
    c.dx[2] = c.emit(Op::SumTo, {c.dx[2], c.shapeOf(c.x(2))});
  return Error::success();
}

Error gradRmsNorm(GradCtx& c) {
  if (c.dy.size() > 1 && c.dy[1]) return c.fail("gradients through the InvStdDev output are not supported");
  if (Error e = giveStatistics(c, 2)) return e; // 1 / rms
  Node* g = c.emitNode(Op::RmsNormGrad, {c.x(0), c.x(1), c.dy[0], c.n.outputs[1]}, 2,
                       {{"axis", c.n.getInt("axis", -1)}, {"epsilon", c.n.getFloat("epsilon", 1e-5)}});
  for (size_t i = 0; i < 2 && i < c.dx.size(); ++i) c.dx[i] = g->outputs[i];
  return Error::success();
}

Error gradBatchNorm(GradCtx& c) {
  if (!c.n.getInt("training_mode", 0)) return c.fail("only training-mode BatchNormalization is differentiated");
  for (size_t i = 1; i < c.dy.size(); ++i)
    if (c.dy[i]) return c.fail("the running statistics have no gradient");
  Node* g = c.emitNode(Op::BatchNormGrad, {c.x(0), c.x(1), c.dy[0]}, 3, {{"epsilon", c.n.getFloat("epsilon", 1e-5)}});
  for (size_t i = 0; i < 3; ++i) c.dx[i] = g->outputs[i];
  return Error::success();
}

Error gradDropout(GradCtx& c) {
  // In training mode the mask is needed: give the node a mask output if it has none.
  Value* training = c.x(2);
  bool maybeTraining = training && !(training->kind == ValueKind::Const && training->data->getI(0) == 0);
  if (!maybeTraining) {
    c.dx[0] = c.dy[0];
    return Error::success();
  }
  if (c.n.outputs.size() < 2) c.g.addResult(&c.n, c.n.name + ".mask");
  if (!c.n.outputs[1]) { // an unused mask result: bring it back
    c.n.outputs.pop_back();
    c.g.addResult(&c.n, c.n.name + ".mask");
  }
  DType t = c.x(0)->type.dtype;
  Value* ratio = c.x(1) ? c.x(1) : c.scalar(0.5, t);
  if (ratio->type.dtype != t) ratio = c.emit(Op::Cast, {ratio}, {{"to", std::string(dtypeName(t))}});
  Value* scale = c.emit(Op::Div, {c.scalar(1, t), c.emit(Op::Sub, {c.scalar(1, t), ratio})});
  c.dx[0] = c.maskedBy(c.n.outputs[1], c.emit(Op::Mul, {c.dy[0], scale}), t);
  return Error::success();
}

/// Shared by both losses: (scores, labels, dloss, weights?) with the loss
/// attributes. Class weights get no gradient: like labels, they are data.
static Value* lossGrad(GradCtx& c, Op op) {
  std::vector<Value*> ins{c.x(0), c.x(1), c.dy[0]};
  if (c.x(2)) ins.push_back(c.x(2));
  std::map<std::string, Attr> attrs;
  for (const char* a : {"reduction", "ignore_index"})
    if (c.n.has(a)) attrs[a] = c.n.attrs.at(a);
  return c.emit(op, ins, attrs);
}

Error gradSceLoss(GradCtx& c) {
  Value* d = c.dy[0] ? lossGrad(c, Op::SceLossGrad) : nullptr;
  if (c.dy.size() > 1 && c.dy[1]) { // the log-probability output
    Value* dl = c.emit(Op::SoftmaxGrad, {c.y(1), c.dy[1]}, {{"axis", int64_t(1)}, {"log", int64_t(1)}});
    d = d ? c.emit(Op::Add, {d, dl}) : dl;
  }
  c.dx[0] = d;
  return Error::success();
}

Error gradNllLoss(GradCtx& c) {
  c.dx[0] = lossGrad(c, Op::NllLossGrad);
  return Error::success();
}

} // namespace sgc::ir

namespace sgc::ir {

/// CumSum's gradient is the cumulative sum of dy the other way; CumProd's, CumProdGrad.
Error gradCumulative(GradCtx& c) {
  std::map<std::string, Attr> attrs = c.n.attrs;
  if (c.n.op == Op::CumSum) {
    attrs["reverse"] = int64_t(!c.n.getInt("reverse", 0));
    c.dx[0] = c.emit(Op::CumSum, {c.dy[0], c.x(1)}, attrs);
  } else {
    c.dx[0] = c.emit(Op::CumProdGrad, {c.x(0), c.dy[0], c.x(1)}, attrs);
  }
  return Error::success();
}

} // namespace sgc::ir
