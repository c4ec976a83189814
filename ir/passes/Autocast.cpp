// The autocast-bf16 pass (see Autocast.h).
#include "ir/passes/Autocast.h"

#include "ir/passes/InferShapes.h"

#include <algorithm>
#include <map>

namespace sgc::ir {

namespace {

/// The Add that is the only reader of MatMul `n`'s result, adding a parameter vector along its
/// last dim (a linear layer's bias), if any.
Node* biasAdd(const Node* n, const std::map<const Value*, std::vector<Node*>>& readers, const Graph& g) {
  const Value* out = n->outputs[0];
  auto it = readers.find(out);
  if (n->op != Op::MatMul || it == readers.end() || it->second.size() != 1 || std::count(g.outputs.begin(), g.outputs.end(), out))
    return nullptr;
  Node* a = it->second[0];
  if (a->op != Op::Add || a->inputs[0] == a->inputs[1]) return nullptr;
  const Value* b = a->inputs[a->inputs[0] == out ? 1 : 0];
  bool vector = b->kind == ValueKind::Param && b->type.dtype == out->type.dtype && b->type.rank() == 1 && out->type.rank() >= 1 &&
                b->type.dims[0].isStatic() && out->type.dims.back().isStatic() && b->type.dims[0].value == out->type.dims.back().value;
  return vector && a->outputs[0]->type.dims == out->type.dims ? a : nullptr;
}

} // namespace

Error autocastBf16(Graph& g, int* count) {
  std::vector<Node*> order;
  std::map<const Value*, std::vector<Node*>> readers;
  for (auto& n : g.nodes()) {
    order.push_back(n.get());
    for (const Value* in : n->inputs)
      if (in) readers[in].push_back(n.get());
  }
  std::map<const Node*, std::vector<Node*>> before, after;
  std::map<Value*, Value*> bf16; // one bf16 copy per value, made before its first reader
  int moved = 0;
  // The bf16 copy of `in`, made (before product n) for its first reader `reader`.
  auto narrow = [&](Value* in, const Node* reader, Node* n) {
    if (!bf16.count(in)) {
      Node* c = g.addNode(Op::Cast, {in}, 1, reader->name + ".to_bf16", {g.uniqueName(in->name + ".bf16")});
      c->attrs["to"] = std::string("bf16");
      bf16[in] = c->outputs[0];
      before[n].push_back(c);
    }
    return bf16[in];
  };
  for (Node* n : order) {
    if (n->op != Op::MatMul && n->op != Op::Gemm && n->op != Op::Conv && n->op != Op::FusedAttention) continue;
    Value* out = n->outputs[0];
    if (!isFloat(out->type.dtype) || out->type.dtype == DType::BF16) continue;
    for (Value*& in : n->inputs)
      if (in && isFloat(in->type.dtype) && in->type.dtype != DType::BF16) in = narrow(in, n, n);
    // A bias added to the product alone is part of it, as in nn.Linear (a Gemm's C already is):
    // added in bf16, and the sum goes back to the wide type.
    DType wide = out->type.dtype;
    Node* last = n;
    if (Node* bias = biasAdd(n, readers, g)) {
      Value*& b = bias->inputs[bias->inputs[0] == out ? 1 : 0];
      b = narrow(b, bias, n);
      last = bias;
      out = bias->outputs[0];
    }
    // The result goes back to its type: readers see what they saw before.
    Node* back = g.addNode(Op::Cast, {out}, 1, last->name + ".from_bf16", {g.uniqueName(out->name + ".f32")});
    back->attrs["to"] = std::string(dtypeName(wide));
    for (Node* m : order)
      for (Value*& in : m->inputs)
        if (in == out) in = back->outputs[0];
    for (Value*& o : g.outputs)
      if (o == out) o = back->outputs[0];
    after[last].push_back(back);
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
