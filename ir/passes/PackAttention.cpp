// The pack-attention pass (see PackAttention.h).
#include "ir/passes/PackAttention.h"

#include "ir/passes/Rewrite.h"

namespace sgc::ir {
namespace {

/// The tensor [..., T, 3 H D] that q, k and v are the parts 0, 1, 2 of (split along its last
/// dim, each reshaped to [..., T, H, D]), else null.
Value* packedSource(const Node& attention) {
  const Node* split = nullptr;
  for (size_t i = 0; i < 3; ++i) {
    const Value* op = attention.inputs[i];
    const Node* reshape = op ? op->producer : nullptr;
    if (!reshape || reshape->op != Op::Reshape || !reshape->inputs[0] || !reshape->inputs[0]->producer) return nullptr;
    const Value* part = reshape->inputs[0];
    if (i == 0) split = part->producer;
    if (part->producer != split || split->op != Op::Split || split->outputs.size() != 3 || split->outputs[i] != part) return nullptr;
  }
  Value* x = split->inputs[0];
  const Type &q = attention.inputs[0]->type, &xt = x->type;
  if (!q.isStatic() || !xt.isStatic() || q.rank() < 3 || xt.rank() != q.rank() - 1) return nullptr;
  int64_t r = xt.rank(), axis = split->getInt("axis", 0);
  if (axis != r - 1 && axis != -1) return nullptr;
  std::vector<int64_t> qs = q.shape(), xs = xt.shape();
  for (size_t i = 0; i < 3; ++i)
    if (attention.inputs[i]->type.shape() != qs) return nullptr; // equal parts, each [..., T, H, D]
  for (int64_t d = 0; d + 1 < r; ++d)
    if (xs[d] != qs[d]) return nullptr;
  return xs.back() == 3 * qs[r - 1] * qs[r] ? x : nullptr;
}

} // namespace

Error packAttention(Graph& g, int* count) {
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (n.op != Op::FusedAttention || n.getString("layout", "bhtd") != "bthd") return std::nullopt;
    Value* x = packedSource(n);
    if (!x) return std::nullopt;
    std::vector<int64_t> shape = n.inputs[0]->type.shape(); // [..., T, H, D] -> [..., T, 3, H, D]
    shape.insert(shape.end() - 2, 3);
    Value* dims = g.addI64s(x->name + ".packed.shape", shape);
    Node* view = g.addNode(Op::Reshape, {x, dims}, 1, n.name + ".packed", {g.uniqueName(x->name + ".packed")});
    view->outputs[0]->type = Type::of(x->type.dtype, shape);
    n.inputs = {view->outputs[0], view->outputs[0], view->outputs[0]};
    n.attrs["layout"] = std::string("bt3hd");
    return std::vector<Node*>{view};
  };
  return rewriteInOrder(g, rewrite, true, count);
}

} // namespace sgc::ir
