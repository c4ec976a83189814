// The fuse-loss-grad pass (see FuseLossGrad.h).
#include "ir/passes/FuseLossGrad.h"

#include "ir/passes/InferShapes.h"

#include <map>
#include <set>

namespace sgc::ir {
namespace {

/// Whether gradient node `grad` is that of loss node `loss` (same operands and attributes), and
/// can be computed where the loss is (its upstream gradient is a constant or an input).
bool gradientOf(const Node& grad, const Node& loss) {
  if (grad.op != Op::SceLossGrad || grad.outputs.size() != 1 || grad.inputs[0] != loss.inputs[0] || grad.inputs[1] != loss.inputs[1] ||
      grad.input(3) != loss.input(2))
    return false;
  for (const char* a : {"reduction", "ignore_index"})
    if ((grad.attrs.count(a) != loss.attrs.count(a)) || (grad.attrs.count(a) && !(grad.attrs.at(a) == loss.attrs.at(a)))) return false;
  const Value* dloss = grad.inputs[2];
  return dloss && (dloss->kind == ValueKind::Const || dloss->kind == ValueKind::Input);
}

} // namespace

Error fuseLossGrad(Graph& g, int* count) {
  std::map<Node*, Node*> fused; // loss -> its gradient, which takes its place
  for (const auto& l : g.nodes()) {
    if (l->op != Op::SoftmaxCrossEntropyLoss || (l->outputs.size() > 1 && l->outputs[1])) continue; // log-probabilities read: left
    for (const auto& n : g.nodes())
      if (!fused.count(l.get()) && gradientOf(*n, *l)) fused[l.get()] = n.get();
  }
  if (count) *count = (int)fused.size();
  if (fused.empty()) return Error::success();
  std::vector<Node*> order;
  std::set<const Node*> moved;
  for (auto& [l, grad] : fused) moved.insert(grad);
  for (const auto& n : g.nodes()) {
    auto f = fused.find(n.get());
    if (f == fused.end()) {
      if (!moved.count(n.get())) order.push_back(n.get());
      continue;
    }
    Node *l = f->first, *grad = f->second;
    Value* loss = l->outputs[0]; // keeps its name and type; its producer is now the gradient
    l->outputs.clear();
    grad->outputs.push_back(loss);
    loss->producer = grad;
    if (l->attrs.count("to")) grad->attrs["to"] = l->attrs.at("to");
    order.push_back(l);
    order.push_back(grad);
  }
  g.setOrder(order);
  g.removeDeadNodes(); // the losses, which have no results left
  return inferShapes(g);
}

} // namespace sgc::ir
