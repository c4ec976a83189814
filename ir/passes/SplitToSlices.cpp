// The split-to-slices pass (see SplitToSlices.h).
#include "ir/passes/SplitToSlices.h"

#include "ir/passes/InferShapes.h"

#include <map>
#include <optional>

namespace sgc::ir {
namespace {

/// The Split's axis in [0, rank), when its input and results are static and all present.
std::optional<int64_t> staticAxis(const Node& n) {
  const Value* x = n.inputs[0];
  if (!x || !x->type.isStatic()) return std::nullopt;
  for (const Value* y : n.outputs)
    if (!y || !y->type.isStatic()) return std::nullopt;
  int64_t rank = x->type.rank(), axis = n.getInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  return axis;
}

} // namespace

Error splitToSlices(Graph& g, int* count) {
  std::map<const Node*, std::vector<Node*>> slices; // a Split -> the Slices that replace it, placed where it was
  std::vector<Node*> splits;
  for (const auto& n : g.nodes())
    if (n->op == Op::Split && staticAxis(*n)) splits.push_back(n.get());
  for (Node* n : splits) {
    int64_t axis = *staticAxis(*n), start = 0;
    for (Value* y : n->outputs) {
      int64_t size = y->type.dims[axis].value;
      Node* s = g.addNode(Op::Slice, {n->inputs[0], g.addI64s(y->name + ".start", {start}), g.addI64s(y->name + ".end", {start + size}), g.addI64s(y->name + ".axis", {axis})},
                          1, n->name + ".slice", {g.uniqueName(y->name + ".slice")});
      s->outputs[0]->type = y->type;
      g.replaceAllUses(y, s->outputs[0]);
      slices[n].push_back(s);
      start += size;
    }
  }
  if (count) *count = (int)splits.size();
  if (splits.empty()) return Error::success();
  g.placeAfter(slices);
  g.removeDeadNodes();
  return inferShapes(g);
}

} // namespace sgc::ir
