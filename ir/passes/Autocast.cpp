// The autocast-bf16 pass (see Autocast.h).
#include "ir/passes/Autocast.h"

#include "ir/passes/InferShapes.h"

#include <map>

namespace sgc::ir {

Error autocastBf16(Graph& g, int* count) {
  std::vector<Node*> order;
  for (auto& n : g.nodes()) order.push_back(n.get());
  std::map<const Node*, std::vector<Node*>> before, after;
  std::map<Value*, Value*> bf16; // one bf16 copy per value, made before its first reader
  int moved = 0;
  for (Node* n : order) {
    if (n->op != Op::MatMul && n->op != Op::Gemm && n->op != Op::Conv && n->op != Op::FusedAttention) continue;
    Value* out = n->outputs[0];
    if (!isFloat(out->type.dtype) || out->type.dtype == DType::BF16) continue;
    for (Value*& in : n->inputs) {
      if (!in || !isFloat(in->type.dtype) || in->type.dtype == DType::BF16) continue;
      if (!bf16.count(in)) {
        Node* c = g.addNode(Op::Cast, {in}, 1, n->name + ".to_bf16", {g.uniqueName(in->name + ".bf16")});
        c->attrs["to"] = std::string("bf16");
        bf16[in] = c->outputs[0];
        before[n].push_back(c);
      }
      in = bf16[in];
    }
    // The result goes back to its type: readers see what they saw before.
    Node* back = g.addNode(Op::Cast, {out}, 1, n->name + ".from_bf16", {g.uniqueName(out->name + ".f32")});
    back->attrs["to"] = std::string(dtypeName(out->type.dtype));
    for (Node* m : order)
      for (Value*& in : m->inputs)
        if (in == out) in = back->outputs[0];
    for (Value*& o : g.outputs)
      if (o == out) o = back->outputs[0];
    after[n].push_back(back);
    ++moved;
  }
  std::vector<Node*> placed;
  for (Node* n : order) {
    placed.insert(placed.end(), before[n].begin(), before[n].end());
    placed.push_back(n);
    placed.insert(placed.end(), after[n].begin(), after[n].end());
  }
  g.setOrder(placed);
  if (count) *count = moved;
  return inferShapes(g);
}

} // namespace sgc::ir
