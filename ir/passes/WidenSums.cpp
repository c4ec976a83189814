// The widen-sums pass (see WidenSums.h).
#include "ir/passes/WidenSums.h"

#include "ir/passes/Rewrite.h"

namespace sgc::ir {

Error widenSums(Graph& g, int* count) {
  std::map<const Value*, int> uses = countUses(g);
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (n.op != Op::Cast || n.getString("to", "") != "f32") return std::nullopt;
    const Value* sum = n.inputs[0];
    const Node* s = sum->producer;
    if (!s || s->op != Op::SumTo || uses[sum] != 1) return std::nullopt;
    Value* x = s->inputs[0];
    if ((x->type.dtype != DType::BF16 && x->type.dtype != DType::F16) || x->type.dims == sum->type.dims) return std::nullopt; // (a copy)
    // The cast becomes the sum, reading the narrow values and summing in f32 (its result, which
    // later nodes may already hold, stays the same value); the narrow sum is left unread, for
    // dead-code elimination.
    n.op = Op::SumTo;
    n.inputs = {x, s->inputs[1]};
    n.attrs = s->attrs;
    n.attrs["to"] = std::string("f32");
    return std::vector<Node*>{};
  };
  return rewriteInOrder(g, rewrite, false, count);
}

} // namespace sgc::ir
