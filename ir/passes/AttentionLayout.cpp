// The attention-layout pass (see AttentionLayout.h).
#include "ir/passes/AttentionLayout.h"

#include "ir/passes/Rewrite.h"

#include <algorithm>

namespace sgc::ir {
namespace {

/// Whether `n` is a Transpose that swaps the two dims before the last, and only those.
bool swapsHeads(const Node* n) {
  if (!n || n->op != Op::Transpose) return false;
  std::vector<int64_t> perm = n->getInts("perm");
  size_t r = perm.size();
  if (r < 3) return false;
  for (size_t d = 0; d < r; ++d) {
    size_t want = d == r - 3 ? r - 2 : d == r - 2 ? r - 3 : d;
    if (perm[d] != (int64_t)want) return false;
  }
  return true;
}

} // namespace

Error attentionLayout(Graph& g, int* count) {
  std::map<const Value*, int> uses = countUses(g);
  std::map<const Value*, Node*> reader; // the last reader of each value (the only one where uses == 1)
  for (auto& n : g.nodes())
    for (const Value* in : n->inputs)
      if (in) reader[in] = n.get();
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (n.op != Op::FusedAttention || n.attrs.count("layout") || n.attrs.count("result_layout")) return std::nullopt;
    const Value *y = n.outputs[0], *lse = n.outputs[1];
    if (uses[y] != 1 || uses[lse] != 0 || !swapsHeads(reader[y])) return std::nullopt;
    const Type &q = n.inputs[0]->type, &k = n.inputs[1]->type;
    if (!q.ranked || !k.ranked || q.rank() < 3 || k.rank() != q.rank()) return std::nullopt;
    bool grouped = q.dims[q.rank() - 3] != k.dims[k.rank() - 3]; // grouped keys and values stay "bhtd"
    bool operands = !grouped && std::all_of(n.inputs.begin(), n.inputs.end(), [](const Value* v) { return swapsHeads(v->producer); });
    if (operands) {
      for (size_t i = 0; i < 3; ++i) n.inputs[i] = n.inputs[i]->producer->inputs[0];
      n.attrs["layout"] = std::string("bthd");
    } else { // operands made some other way (a rotary embedding's, grouped ones): the result alone
      n.attrs["result_layout"] = std::string("bthd");
    }
    Value* back = reader[y]->outputs[0];
    g.replaceAllUses(back, n.outputs[0]); // [..., T, H, D] already
    return std::vector<Node*>{};
  };
  return rewriteInOrder(g, rewrite, true, count);
}

} // namespace sgc::ir
