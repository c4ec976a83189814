// The narrow-moves pass (see NarrowMoves.h).
#include "ir/passes/NarrowMoves.h"

#include "ir/passes/Rewrite.h"

#include <map>

namespace sgc::ir {
namespace {

bool isMove(Op op) {
  switch (op) {
  case Op::Transpose: case Op::Reshape: case Op::Flatten: case Op::Squeeze: case Op::Unsqueeze: case Op::Identity:
  case Op::Split: case Op::Slice: case Op::Concat:
    return true;
  default: return false;
  }
}

/// Elementwise functions of floats: their kernels compute in f32 from their (widened) inputs and
/// round once where they store, so from narrow inputs they store the narrow result, as PyTorch's
/// autocast does for ops on bf16 tensors. (The last of a chain stores the bits of narrowing its f32
/// result; one before it rounds where the f32 graph did not, as each of PyTorch's ops does.)
bool roundsOnce(const Node& n) {
  return opClass(n.op) == OpClass::Elementwise && n.op != Op::Cast && n.op != Op::CastLike && n.outputs.size() == 1 &&
         isFloat(n.outputs[0]->type.dtype);
}

/// The inputs that narrow with it: a move's data (Concat: all; the others: the first; the rest
/// are shapes and axes), the loss gradient's scores, a function's floating-point operands (a
/// Where's condition stays).
bool narrowsWith(const Node& n, size_t i) {
  if (roundsOnce(n)) return n.inputs[i] && isFloat(n.inputs[i]->type.dtype);
  return n.op == Op::Concat || i == 0;
}

struct Narrower {
  Graph& g;
  std::map<std::pair<const Node*, DType>, Node*> copies; ///< wide moves and their narrow copies, by type
  std::vector<Node*> made; ///< the copies made for the current rewrite

  /// The narrow value holding exactly the bits of wide `v` (of type `t`), or null.
  Value* narrow(Value* v, DType t) {
    Node* p = v->producer;
    if (!p) return nullptr;
    if (p->op == Op::Cast && p->inputs[0]->type.dtype == t && v->type.dtype == DType::F32) return p->inputs[0];
    if (p->op == Op::Cast && p->inputs[0]->type.dtype == DType::F32 && v->type.dtype == DType::F32) return narrow(p->inputs[0], t);
    // The loss gradient computes in f32 from its scores and rounds once where it stores: from
    // narrow scores it stores the narrow gradient, the same bits as narrowing its f32 one.
    bool lossGrad = p->op == Op::SceLossGrad && v == p->outputs[0];
    if (!isMove(p->op) && !lossGrad && !roundsOnce(*p)) return nullptr;
    Node*& copy = copies[{p, t}];
    if (!copy) {
      std::vector<Value*> ins = p->inputs;
      for (size_t i = 0; i < ins.size(); ++i)
        if (narrowsWith(*p, i) && (!ins[i] || !(ins[i] = narrow(ins[i], t)))) return nullptr;
      std::vector<std::string> names;
      for (const Value* o : p->outputs) names.push_back(g.uniqueName(o->name + ".narrow"));
      copy = g.addNode(p->op, ins, (int)p->outputs.size(), p->name + ".narrow", names);
      copy->attrs = p->attrs;
      for (size_t k = 0; k < p->outputs.size(); ++k) {
        copy->outputs[k]->type = p->outputs[k]->type;
        copy->outputs[k]->type.dtype = t;
      }
      made.push_back(copy);
    }
    for (size_t k = 0; k < p->outputs.size(); ++k)
      if (p->outputs[k] == v) return copy->outputs[k];
    return nullptr;
  }
};

} // namespace

Error narrowMoves(Graph& g, int* count) {
  Narrower nw{g, {}, {}};
  int narrowed = 0;
  // The cross-entropy computes in f32 from its scores as it reads them: from narrow scores it
  // computes the same, the output staying f32 ({to = f32}), and the wide copy is gone.
  auto narrowScores = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (n.attrs.count("to") || n.inputs[0]->type.dtype != DType::F32) return std::nullopt;
    std::vector<Node*> made;
    for (DType t : {DType::BF16, DType::F16}) {
      nw.made.clear();
      Value* v = nw.narrow(n.inputs[0], t);
      made.insert(made.end(), nw.made.begin(), nw.made.end());
      if (!v) continue;
      n.inputs[0] = v;
      n.attrs["to"] = std::string("f32");
      ++narrowed;
      return made;
    }
    return made.empty() ? std::nullopt : std::optional<std::vector<Node*>>(std::move(made));
  };
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (n.op == Op::SoftmaxCrossEntropyLoss) return narrowScores(n);
    if (n.op != Op::Cast || n.inputs[0]->type.dtype != DType::F32) return std::nullopt;
    DType t = n.outputs[0]->type.dtype;
    if (t != DType::BF16 && t != DType::F16) return std::nullopt;
    nw.made.clear();
    Value* v = nw.narrow(n.inputs[0], t);
    if (!v) { // what was made on the way stays (placed), for later casts that reach the same moves
      std::vector<Node*> partial = std::move(nw.made);
      return partial.empty() ? std::nullopt : std::optional<std::vector<Node*>>(std::move(partial));
    }
    g.replaceAllUses(n.outputs[0], v);
    ++narrowed;
    return std::move(nw.made);
  };
  if (Error e = rewriteInOrder(g, rewrite, false)) return e;
  if (count) *count = narrowed;
  return Error::success();
}

int readNarrowGradients(Graph& g) {
  int count = 0;
  for (auto& n : g.nodes()) {
    if (n->op != Op::SgdUpdate && n->op != Op::AdamUpdate) continue;
    const Node* c = n->inputs[1]->producer;
    if (!c || c->op != Op::Cast || n->inputs[1]->type.dtype != DType::F32) continue;
    DType t = c->inputs[0]->type.dtype;
    if (t != DType::BF16 && t != DType::F16) continue;
    n->inputs[1] = c->inputs[0];
    ++count;
  }
  return count;
}

} // namespace sgc::ir
