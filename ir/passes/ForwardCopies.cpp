// Pass forward-copies: see ForwardCopies.h.
#include "ir/passes/ForwardCopies.h"

namespace sgc::ir {
namespace {

/// Whether node `n` is a copy of its first input.
bool isCopy(const Node& n) {
  if (n.outputs.size() != 1 || !n.outputs[0] || n.inputs.empty() || !n.inputs[0]) return false;
  if (n.op == Op::Identity || (n.op == Op::Concat && n.inputs.size() == 1)) return true;
  const Type &in = n.inputs[0]->type, &out = n.outputs[0]->type;
  bool sameType = in.isStatic() && in == out;
  switch (n.op) {
  case Op::Reshape: case Op::Flatten: case Op::Squeeze: case Op::Unsqueeze: case Op::Expand:
  case Op::Cast: case Op::CastLike: case Op::SumTo: return sameType;
  default: return false;
  }
}

/// The value `v` copies (`v` itself when it is no copy), through chains of copies.
Value* copiedValue(Value* v) {
  while (v && v->producer && isCopy(*v->producer)) v = v->producer->inputs[0];
  return v;
}

} // namespace

Error forwardCopies(Graph& g, int* count) {
  bool forwarded = false;
  for (auto& n : g.nodes())
    for (Value*& in : n->inputs)
      if (Value* source = copiedValue(in); source != in) {
        in = source;
        forwarded = true;
      }
  size_t before = g.nodes().size();
  if (forwarded) g.removeDeadNodes();
  if (count) *count = int(before - g.nodes().size());
  return Error::success();
}

} // namespace sgc::ir
