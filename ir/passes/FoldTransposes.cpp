// The fold-transposes pass (see FoldTransposes.h).
#include "ir/passes/FoldTransposes.h"

#include "ir/passes/Rewrite.h"

namespace sgc::ir {
namespace {

bool narrows(const Node& cast) {
  DType to = cast.outputs[0]->type.dtype;
  return cast.inputs[0]->type.dtype == DType::F32 && (to == DType::BF16 || to == DType::F16);
}

bool isTranspose(const Node* n) { return n && n->op == Op::Transpose && n->has("perm"); }

/// Whether `n` is a Transpose of a matrix (rank 2) swapping its dims.
bool transposesMatrix(const Node* n) { return isTranspose(n) && n->getInts("perm") == std::vector<int64_t>{1, 0}; }

struct Folder {
  Graph& g;
  std::map<const Value*, int> uses;
  std::vector<Node*> made;

  Node* add(Op op, std::vector<Value*> ins, const Node& like, const std::string& suffix) {
    Node* n = g.addNode(op, std::move(ins), 1, like.name + suffix, {g.uniqueName(like.outputs[0]->name + suffix)});
    made.push_back(n);
    return n;
  }

  /// x with `perm` applied, composed with x's own transpose if it has one: x itself when they cancel.
  Value* transposed(Value* x, std::vector<int64_t> perm, const Node& like) {
    if (isTranspose(x->producer) && x->producer->getInts("perm").size() == perm.size()) {
      std::vector<int64_t> inner = x->producer->getInts("perm"), composed(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) composed[i] = inner[perm[i]];
      x = x->producer->inputs[0];
      perm = composed;
    }
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == (int64_t)i;
    if (identity) return x;
    Node* t = add(Op::Transpose, {x}, like, ".t");
    t->attrs["perm"] = perm;
    return t->outputs[0];
  }

  /// The value that replaces n's result, or null when no rule applies.
  Value* fold(Node& n) {
    if (n.op == Op::Cast && narrows(n)) { // Cast<narrow>(Transpose(x)) -> Transpose(Cast<narrow>(x))
      Node* t = producerReadOnce(n.inputs[0], Op::Transpose, uses);
      if (!isTranspose(t)) return nullptr;
      Node* c = add(Op::Cast, {t->inputs[0]}, n, ".early");
      c->attrs = n.attrs;
      return transposed(c->outputs[0], t->getInts("perm"), n);
    }
    if (!isTranspose(&n)) return nullptr;
    if (isTranspose(n.inputs[0]->producer)) return transposed(n.inputs[0], n.getInts("perm"), n);
    if (!transposesMatrix(&n)) return nullptr;
    // Transpose(Cast(MatMul(a, b))) -> Cast(Gemm(b, a) {transA, transB}), the Cast optional: the
    // Gemm reads each operand transposed unless it is itself a transpose, which it reads through.
    Node* cast = producerReadOnce(n.inputs[0], Op::Cast, uses);
    Node* mm = producerReadOnce(cast ? cast->inputs[0] : n.inputs[0], Op::MatMul, uses);
    if (!mm || mm->inputs[0]->type.rank() != 2 || mm->inputs[1]->type.rank() != 2) return nullptr;
    Value *first = mm->inputs[1], *second = mm->inputs[0];
    bool transFirst = !transposesMatrix(first->producer), transSecond = !transposesMatrix(second->producer);
    if (!transFirst) first = first->producer->inputs[0];
    if (!transSecond) second = second->producer->inputs[0];
    Node* product = add(Op::Gemm, {first, second}, *mm, ".t");
    product->attrs["transA"] = int64_t(transFirst);
    product->attrs["transB"] = int64_t(transSecond);
    if (!cast) return product->outputs[0];
    Node* c = add(Op::Cast, {product->outputs[0]}, *cast, ".t");
    c->attrs = cast->attrs;
    return c->outputs[0];
  }
};

} // namespace

Error foldTransposes(Graph& g, int* count) {
  Folder f{g, countUses(g), {}};
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    f.made.clear();
    Value* to = f.fold(n);
    if (!to) return std::nullopt;
    g.replaceAllUses(n.outputs[0], to);
    // Counts only grow (a value read once is then read by the rewrite alone).
    f.uses[to] += f.uses[n.outputs[0]];
    for (const Node* m : f.made)
      for (const Value* in : m->inputs) ++f.uses[in];
    return f.made;
  };
  return rewriteInOrder(g, rewrite, true, count);
}

} // namespace sgc::ir
