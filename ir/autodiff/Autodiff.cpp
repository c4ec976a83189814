// The autodiff pass (see Autodiff.h): needsGrad-grad marking, the reverse
// walk, gradient accumulation, and the builder helpers rules use.
#include "ir/autodiff/Autodiff.h"

#include "ir/passes/InferShapes.h"

#include <set>

namespace sgc::ir {

#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) Error grad##Grad(GradCtx&);
#include "ir/Ops.def"

namespace {

bool hasGradRule(Op op) {
  switch (op) {
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) \
  case Op::N: return std::string_view(#Grad) != "None";
#include "ir/Ops.def"
  }
  return false;
}

Error dispatch(GradCtx& c) {
  switch (c.n.op) {
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) \
  case Op::N: return grad##Grad(c);
#include "ir/Ops.def"
  }
  return c.fail("no rule");
}

bool differentiable(const Value* v) { return v && isFloat(v->type.dtype); }

} // namespace

Error gradNone(GradCtx& c) { return c.fail("the op has no gradient"); }

/// Names of emitted nodes: the forward node's name (or its first result's) + ".grad".
static std::string gradName(const Node& n) {
  return (n.name.empty() && !n.outputs.empty() && n.outputs[0] ? n.outputs[0]->name : n.name) + ".grad";
}

Node* GradCtx::emitNode(Op op, std::vector<Value*> ins, int outs, std::map<std::string, Attr> attrs) {
  Node* node = g.addNode(op, std::move(ins), outs, gradName(n));
  node->attrs = std::move(attrs);
  return node;
}

Value* GradCtx::emit(Op op, std::vector<Value*> ins, std::map<std::string, Attr> attrs) {
  return emitNode(op, std::move(ins), 1, std::move(attrs))->outputs[0];
}

Value* GradCtx::shapeOf(Value* v) {
  if (v->type.isStatic()) return ints(v->type.shape());
  return emit(Op::Shape, {v});
}

Value* GradCtx::scalar(double v, DType t) {
  return g.addConst(g.uniqueName(gradName(n) + ".c"), Tensor::fromF64(t, {}, {v}));
}

Value* GradCtx::ints(const std::vector<int64_t>& v) {
  return g.addI64s(gradName(n) + ".c", v);
}

Value* GradCtx::sumTo(Value* d, Value* to, Value* from) {
  if (to->type.ranked && from->type.ranked && to->type.dims == from->type.dims &&
      std::none_of(to->type.dims.begin(), to->type.dims.end(), [](const Dim& x) { return !x.isStatic() && !x.isSymbolic(); }))
    return d;
  return emit(Op::SumTo, {d, shapeOf(to)});
}

Value* GradCtx::maskedBy(Value* mask, Value* d, DType t) { return emit(Op::Where, {mask, d, scalar(0, t)}); }

Expected<std::map<Value*, Value*>> autodiff(Graph& g, Value* loss, const std::vector<Value*>& wrt) {
  // A non-scalar target is differentiated as the sum of its elements (seed of ones).
  auto n = loss->type.staticNumel();
  if (!n || !isFloat(loss->type.dtype))
    return makeError("the differentiated value %" + loss->name + " must be floating point with a static shape, it is " +
                     toString(loss->type));
  // Values that depend on a requested one through differentiable ops.
  std::set<Value*> needsGrad(wrt.begin(), wrt.end());
  std::vector<Node*> forward;
  for (auto& node : g.nodes()) forward.push_back(node.get());
  for (Node* node : forward) {
    if (!hasGradRule(node->op)) continue;
    bool any = std::any_of(node->inputs.begin(), node->inputs.end(), [&](Value* v) { return v && needsGrad.count(v) && differentiable(v); });
    if (any)
      for (Value* o : node->outputs)
        if (differentiable(o)) needsGrad.insert(o);
  }
  std::map<Value*, Value*> grads;
  if (!needsGrad.count(loss)) return grads;
  grads[loss] = g.addConst(g.uniqueName("grad.seed"), Tensor::fromF64(loss->type.dtype, loss->type.shape(), std::vector<double>(*n, 1.0)));
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    Node* node = *it;
    if (!hasGradRule(node->op)) continue;
    GradCtx c{g, *node, {}, {}, {}};
    bool anyDy = false;
    for (Value* o : node->outputs) {
      Value* d = o && grads.count(o) ? grads[o] : nullptr;
      c.dy.push_back(d);
      anyDy |= d != nullptr;
    }
    for (Value* in : node->inputs) c.wants.push_back(in && needsGrad.count(in) && differentiable(in));
    if (!anyDy || std::none_of(c.wants.begin(), c.wants.end(), [](bool b) { return b; })) continue;
    c.dx.assign(node->inputs.size(), nullptr);
    if (Error e = dispatch(c)) return e;
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      Value* in = node->inputs[i];
      if (!c.wants[i] || !c.dx[i]) continue;
      grads[in] = grads.count(in) ? c.emit(Op::Add, {grads[in], c.dx[i]}) : c.dx[i];
    }
  }
  if (Error e = inferShapes(g)) return e;
  std::map<Value*, Value*> result;
  for (Value* v : wrt) result[v] = grads.count(v) ? grads[v] : nullptr;
  return result;
}

} // namespace sgc::ir
