// The infer-shapes pass (see InferShapes.h).
#include "ir/passes/InferShapes.h"

#include "ir/interp/Interpreter.h"
#include "ir/shapes/Shapes.h"

namespace sgc::ir {
namespace {

constexpr int64_t kFoldLimit = 1 << 22; ///< largest result (elements) folded to a constant (a 2048^2 attention mask)

bool foldable(const Node& n, const InferCtx& c) {
  if (n.op == Op::Dropout) return false; // random in training mode
  for (const Type& t : c.out) {
    auto numel = t.staticNumel();
    if (!numel || *numel > kFoldLimit) return false;
  }
  if ((n.op == Op::Shape || n.op == Op::Size) && c.in[0].isStatic()) return true;
  if (n.op == Op::CastLike && c.values[0]) return true; // the other operand gives only its dtype (SDPA's scale)
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !c.values[i]) return false;
  return true;
}

Error fold(Graph& g, Node& n, const InferCtx& c) {
  std::vector<Tensor> placeholders;
  placeholders.reserve(n.inputs.size());
  std::vector<const Tensor*> ins = c.values;
  for (size_t i = 0; i < ins.size(); ++i)
    if (n.inputs[i] && !ins[i]) { // Shape/Size read only the shape, CastLike the dtype: no data needed
      placeholders.emplace_back();
      placeholders.back().dtype = c.in[i].dtype;
      placeholders.back().shape = c.in[i].shape();
      ins[i] = &placeholders.back();
    }
  auto outs = evalNode(n, ins);
  if (!outs) return outs.takeError();
  std::vector<Value*> results = n.outputs; // makeConst may erase n
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i]) g.makeConst(results[i], std::move((*outs)[i]));
  return Error::success();
}

} // namespace

Error inferShapes(Graph& g, bool doFold) {
  std::vector<Node*> order;
  for (auto& n : g.nodes()) order.push_back(n.get());
  for (Node* n : order) {
    InferCtx c{*n, {}, {}, {}};
    for (Value* v : n->inputs) {
      c.in.push_back(v ? v->type : Type{});
      c.values.push_back(v && v->kind == ValueKind::Const ? v->data.get() : nullptr);
    }
    if (Error e = inferNode(c)) return e;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i]) n->outputs[i]->type = c.out[i];
    if (doFold && foldable(*n, c))
      if (Error e = fold(g, *n, c)) return e;
  }
  return Error::success();
}

} // namespace sgc::ir
