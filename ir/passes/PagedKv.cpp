// The paged-kv pass (see PagedKv.h).
#include "ir/passes/PagedKv.h"

#include "ir/passes/BindDims.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/Rewrite.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace sgc::ir {
namespace {

bool isGraphInput(const Graph& g, const Value* v) { return std::count(g.inputs.begin(), g.inputs.end(), v) != 0; }

/// The axis of a Concat, made non-negative.
int64_t concatAxis(const Node& n) {
  int64_t r = n.outputs[0]->type.rank(), a = n.getInt("axis", 0);
  return a < 0 ? a + r : a;
}

/// A constant's value, when it holds one floating-point number (or is a CastLike of one into
/// another float type, as the importer writes its scalars: folded only once the types are known).
std::optional<double> scalar(const Value* v) {
  const Node* p = v ? v->producer : nullptr;
  if (p && p->op == Op::CastLike && isFloat(v->type.dtype)) v = p->inputs[0];
  if (!v || v->kind != ValueKind::Const || !isFloat(v->type.dtype) || v->data->numel() != 1) return std::nullopt;
  return v->data->getF(0);
}

struct Matcher {
  Graph& g;
  std::map<const Value*, std::vector<Node*>> readers;
  std::set<const Value*> caches; ///< past inputs read by a Concat into a present output
  double scale = 1;
  const Node* rowMax = nullptr; ///< a guard's ReduceMax of the masked scores, their one other reader

  explicit Matcher(Graph& graph) : g(graph) {
    for (const auto& n : g.nodes())
      for (Value* v : n->inputs)
        if (v) readers[v].push_back(n.get());
  }

  /// The Concat of a past input with this step's keys or values into a present output.
  bool isCacheConcat(const Value* v) const {
    const Node* c = v ? v->producer : nullptr;
    return c && c->op == Op::Concat && c->inputs.size() == 2 && isGraphInput(g, c->inputs[0]) && c->outputs[0]->type.rank() == 4 &&
           concatAxis(*c) == 2;
  }

  /// Whether v is computed from graph inputs other than through their shapes (a plain model's
  /// positions, now the cache's, are part of its causal mask).
  bool readsInputs(const Value* v, std::set<const Value*>& seen) const {
    if (!v || !seen.insert(v).second) return false;
    if (v->kind == ValueKind::Input) return v->name != "sgc.kv.pos";
    if (!v->producer || v->producer->op == Op::Shape) return false;
    if (v->producer->op == Op::CastLike) return readsInputs(v->producer->inputs[0], seen); // the other operand gives only its dtype
    return std::any_of(v->producer->inputs.begin(), v->producer->inputs.end(), [&](const Value* in) { return readsInputs(in, seen); });
  }

  Error stopped(const Node& n, const std::string& expected) const {
    return makeError(describe(n) + ": attention over the key/value cache: expected " + expected);
  }

  /// From the product of queries and keys to the softmax: scales and one mask. The softmax.
  Expected<Node*> scoresToSoftmax(Node* n) {
    bool masked = false;
    for (;;) {
      Value* v = n->outputs[0];
      auto rs = readers.find(v);
      std::vector<Node*> next1;
      if (rs != readers.end())
        for (Node* r : rs->second) // a guard's row maxima, and CastLikes that take only the scores' dtype, read them too
          if (r != rowMax && !(r->op == Op::CastLike && r->inputs[0] != v)) next1.push_back(r);
      if (next1.size() != 1) return stopped(*n, "its scores to be read once, by a scale, a mask or the softmax");
      Node* next = next1[0];
      if (next->op == Op::Softmax) {
        int64_t axis = next->getInt("axis", -1);
        if (axis != -1 && axis != 3) return stopped(*next, "a softmax over the keys (the last axis)");
        if (!masked) return stopped(*next, "a causal mask before the softmax");
        return next;
      }
      Value* other = next->inputs.size() == 2 ? next->inputs[next->inputs[0] == v ? 1 : 0] : nullptr;
      std::set<const Value*> seen;
      if ((next->op == Op::Mul || next->op == Op::Div) && scalar(other)) {
        scale = next->op == Op::Mul ? scale * *scalar(other) : next->inputs[0] == v ? scale / *scalar(other) : NAN;
        if (!std::isfinite(scale)) return stopped(*next, "the scores divided by a constant");
      } else if (next->op == Op::Where && next->inputs.size() == 3 && next->inputs[2] == v && scalar(next->inputs[1]) &&
                 *scalar(next->inputs[1]) < -1e30 && !masked) {
        if (readsInputs(next->inputs[0], seen)) return stopped(*next, "a causal mask (this one reads a graph input)");
        masked = true;
      } else if (next->op == Op::Add && other && !masked) {
        if (readsInputs(other, seen)) return stopped(*next, "a causal mask (this one reads a graph input)");
        masked = true;
      } else {
        return stopped(*next, "a scale by a constant, a causal mask or the softmax of the scores");
      }
      n = next;
    }
  }

  /// Back from the softmax to the product of queries and keys (through its scales and mask), or null.
  static Node* scoresProduct(Node* soft) {
    Node* qk = soft;
    while (qk && qk->op != Op::MatMul) {
      Value* chain = nullptr;
      for (Value* in : qk->inputs)
        if (in && in->producer && in->type.rank() == 4 && !scalar(in) && (!chain || qk->op == Op::Where)) chain = in;
      qk = chain ? chain->producer : nullptr;
    }
    return qk;
  }

  /// x without a multiplication by a constant, which goes into `scale`.
  Value* unscaled(Value* x) {
    Node* p = x->producer;
    if (p && p->op == Op::Mul && p->inputs.size() == 2)
      for (int i = 0; i < 2; ++i)
        if (auto c = scalar(p->inputs[i])) {
          scale *= *c;
          return p->inputs[1 - i];
        }
    return x;
  }

  /// k where kT is k [b, h, n, d] with its last two axes swapped: a Transpose {0, 1, 3, 2}, or as
  /// the dynamo exporter writes it, Reshape(Transpose(Reshape(k) [b h, n, d], {0, 2, 1})). Null if not.
  static Value* untransposed(Value* kT) {
    Node* t = kT->producer;
    if (!t) return nullptr;
    if (t->op == Op::Transpose) return t->getInts("perm") == std::vector<int64_t>{0, 1, 3, 2} ? t->inputs[0] : nullptr;
    Node* mid = t->op == Op::Reshape ? t->inputs[0]->producer : nullptr;
    Node* in = mid && mid->op == Op::Transpose && mid->getInts("perm") == std::vector<int64_t>{0, 2, 1} ? mid->inputs[0]->producer : nullptr;
    if (!in || in->op != Op::Reshape || !kT->type.isStatic() || !in->inputs[0]->type.isStatic() || !in->outputs[0]->type.isStatic()) return nullptr;
    auto k = in->inputs[0]->type.shape(), flat = in->outputs[0]->type.shape(), out = kT->type.shape();
    bool swapped = k.size() == 4 && flat == std::vector<int64_t>{k[0] * k[1], k[2], k[3]} && out == std::vector<int64_t>{k[0], k[1], k[3], k[2]};
    return swapped ? in->inputs[0] : nullptr;
  }

  /// A plain model's block whose value product is `pv` (see PagedKv.h), rewritten; none when pv
  /// does not multiply a softmax's probabilities.
  Expected<std::optional<std::vector<Node*>>> matchPlain(Node& pv, PagedKvOptions o, std::vector<Value*>& pools) {
    using None = std::optional<std::vector<Node*>>;
    if (pv.op != Op::MatMul || (pv.inputs[0]->type.ranked && pv.inputs[0]->type.rank() != 4)) return None(); // unranked: behind a mask of unknown rank
    Node* soft = pv.inputs[0]->producer;
    if (soft && soft->op == Op::CastLike && soft->inputs[0]->type.dtype == soft->outputs[0]->type.dtype) soft = soft->inputs[0]->producer;
    rowMax = nullptr;
    if (soft && soft->op == Op::Where && soft->inputs.size() == 3 && scalar(soft->inputs[1]) == 0.0) {
      // The guards of fully masked rows: Where(IsNaN(p), 0, p) (the exporters'), or
      // Where(ReduceMax(s) == -inf, 0, Softmax(s)) (ONNX Attention's, as the importer writes it).
      Node *cond = soft->inputs[0]->producer, *p = soft->inputs[2]->producer;
      if (cond && cond->op == Op::IsNaN && cond->inputs[0] == soft->inputs[2] && p) soft = p;
      Node* max = cond && cond->op == Op::Equal ? cond->inputs[0]->producer : nullptr;
      if (max && max->op == Op::ReduceMax && scalar(cond->inputs[1]) && std::isinf(*scalar(cond->inputs[1])) && *scalar(cond->inputs[1]) < 0 &&
          p && p->op == Op::Softmax && max->inputs[0] == p->inputs[0]) {
        soft = p;
        rowMax = max; // the scores' other reader
      }
    }
    if (!soft || soft->op != Op::Softmax) return None();
    Node* qk = scoresProduct(soft);
    if (!qk) return stopped(*soft, "scores from a product of queries and keys");
    scale = 1;
    Value *q = unscaled(qk->inputs[0]), *k = untransposed(unscaled(qk->inputs[1])), *v = pv.inputs[1];
    if (!k) return stopped(*qk, "queries times the keys transposed (their last two axes swapped)");
    auto end = scoresToSoftmax(qk);
    if (!end) return end.takeError();
    if (*end != soft) return stopped(*soft, "one chain from the scores to the softmax");
    const Type& kt = k->type;
    if (!kt.isStatic() || kt.rank() != 4 || kt.dims[0].value != 1 || kt.dims[2].value != o.tokens || q->type != kt || v->type != kt)
      return stopped(pv, "queries, keys and values of one static shape [1, heads, " + std::to_string(o.tokens) + " tokens, head dim], got " +
                             toString(q->type) + ", " + toString(kt) + " and " + toString(v->type));
    int64_t heads = kt.dims[1].value, dim = kt.dims[3].value;
    DType type = o.bf16 ? DType::BF16 : kt.dtype;
    Value* pool = g.addState(g.uniqueName("kv_cache." + std::to_string(pools.size())), Tensor(type, {o.blocks, 2, o.blockSize, heads, dim}));
    pools.push_back(pool);
    std::vector<Node*> added;
    auto add = [&](Node* n) {
      added.push_back(n);
      return n->outputs[0];
    };
    auto cast = [&](Value* x, DType t) {
      if (x->type.dtype == t) return x;
      Node* c = g.addNode(Op::Cast, {x}, 1, pv.name + ".to_" + std::string(dtypeName(t)));
      c->attrs["to"] = std::string(dtypeName(t));
      return add(c);
    };
    auto swap = [&](Value* x) { // [1, H, N, D] <-> [N, H, 1, D]
      Node* t = g.addNode(Op::Transpose, {x}, 1, pv.name + ".tokens", {g.uniqueName(x->name + ".tokens")});
      t->attrs["perm"] = std::vector<int64_t>{2, 1, 0, 3};
      return add(t);
    };
    Value *tables = g.findValue("sgc.kv.tables"), *seq = g.findValue("sgc.kv.seq"), *pos = g.findValue("sgc.kv.pos");
    Value *kn = cast(swap(k), type), *vn = cast(swap(v), type), *qn = cast(swap(q), type);
    Node* w = g.addNode(Op::KvCacheWrite, {pool, kn, vn, tables, seq, pos}, 1, pv.name + ".kv_write");
    Node* a = g.addNode(Op::PagedAttention, {qn, add(w), tables, seq, pos}, 1, pv.name + ".paged");
    a->attrs["scale"] = scale;
    g.updates.push_back({pool, w->outputs[0]});
    g.replaceAllUses(pv.outputs[0], swap(cast(add(a), kt.dtype)));
    return None(added);
  }

  /// The attention block whose value product is `pv`, rewritten; none when pv is no such product.
  Expected<std::optional<std::vector<Node*>>> match(Node& pv, PagedKvOptions o, std::vector<Value*>& pools) {
    rowMax = nullptr;
    if (o.plain) return matchPlain(pv, o, pools);
    if (pv.op != Op::MatMul || !isCacheConcat(pv.inputs[1])) return std::optional<std::vector<Node*>>();
    Node *vcat = pv.inputs[1]->producer, *soft = pv.inputs[0]->producer;
    if (!soft || soft->op != Op::Softmax) return stopped(pv, "the softmax of the scores times the cached values");
    // Back from the softmax to the product of queries and keys, then forward again to check the chain.
    Node* qk = scoresProduct(soft);
    if (!qk) return stopped(*soft, "scores from a product of queries and cached keys");
    Node* kT = qk->inputs[1]->producer;
    if (!kT || kT->op != Op::Transpose || kT->getInts("perm") != std::vector<int64_t>{0, 1, 3, 2} || !isCacheConcat(kT->inputs[0]))
      return stopped(*qk, "queries times the cached keys transposed (perm [0, 1, 3, 2])");
    Node* kcat = kT->inputs[0]->producer;
    scale = 1;
    auto end = scoresToSoftmax(qk);
    if (!end) return end.takeError();
    if (*end != soft) return stopped(*soft, "one chain from the scores to the softmax");
    const Type& past = kcat->inputs[0]->type;
    if (!past.dims[1].isStatic() || !past.dims[3].isStatic() || vcat->inputs[0]->type != past)
      return stopped(*kcat, "cached keys and values of one type with static heads and head dim");
    int64_t heads = past.dims[1].value, dim = past.dims[3].value;
    DType type = o.bf16 ? DType::BF16 : past.dtype;
    Value* pool = g.addState(g.uniqueName("kv_cache." + std::to_string(pools.size())), Tensor(type, {o.blocks, 2, o.blockSize, heads, dim}));
    pools.push_back(pool);
    std::vector<Node*> added;
    auto as = [&](Value* v, DType t) { // v in dtype t (a Cast when it is not)
      if (v->type.dtype == t) return v;
      Node* c = g.addNode(Op::Cast, {v}, 1, pv.name + ".to_" + std::string(dtypeName(t)));
      c->attrs["to"] = std::string(dtypeName(t));
      added.push_back(c);
      return c->outputs[0];
    };
    Value *tables = g.findValue("sgc.kv.tables"), *seq = g.findValue("sgc.kv.seq"), *pos = g.findValue("sgc.kv.pos");
    Value *k = as(kcat->inputs[1], type), *v = as(vcat->inputs[1], type), *q = as(qk->inputs[0], type);
    Node* w = g.addNode(Op::KvCacheWrite, {pool, k, v, tables, seq, pos}, 1, pv.name + ".kv_write");
    Node* a = g.addNode(Op::PagedAttention, {q, w->outputs[0], tables, seq, pos}, 1, pv.name + ".paged");
    a->attrs["scale"] = scale;
    added.push_back(w);
    added.push_back(a);
    g.updates.push_back({pool, w->outputs[0]});
    Value* y = a->outputs[0];
    if (type != pv.outputs[0]->type.dtype) { // the result back in the model's dtype
      Node* c = g.addNode(Op::Cast, {y}, 1, pv.name + ".from_" + std::string(dtypeName(type)));
      c->attrs["to"] = std::string(dtypeName(pv.outputs[0]->type.dtype));
      added.push_back(c);
      y = c->outputs[0];
    }
    g.replaceAllUses(pv.outputs[0], y);
    caches.insert(kcat->inputs[0]);
    caches.insert(vcat->inputs[0]);
    return std::optional<std::vector<Node*>>(added);
  }
};

/// Whether v is computed from the shape of a graph input alone (a sequence length, say).
bool fromInputShape(const Value* v) {
  for (int depth = 0; v && v->producer && depth < 8; ++depth) {
    const Node* p = v->producer;
    if (p->op == Op::Shape) return p->inputs[0]->kind == ValueKind::Input;
    if (p->op != Op::Squeeze && p->op != Op::Unsqueeze && p->op != Op::Gather && p->op != Op::Slice && p->op != Op::Reshape &&
        p->op != Op::Cast && p->op != Op::Identity)
      return false;
    v = p->inputs[0];
  }
  return false;
}

/// Whether v is arithmetic on the shapes of graph inputs and constants alone; with `past`, the
/// shape of one of those inputs among them.
bool fromShapes(const Value* v, const std::set<const Value*>* past, bool& readsPast, int depth = 0) {
  if (!v || depth > 12) return false;
  if (v->kind == ValueKind::Const) return true;
  const Node* p = v->producer;
  if (!p) return false;
  if (p->op == Op::Shape) {
    if (past && past->count(p->inputs[0])) readsPast = true;
    return p->inputs[0]->kind == ValueKind::Input;
  }
  switch (p->op) {
  case Op::Gather: case Op::Squeeze: case Op::Unsqueeze: case Op::Slice: case Op::Reshape: case Op::Cast: case Op::Identity:
  case Op::Add: case Op::Sub: case Op::Concat:
    return std::all_of(p->inputs.begin(), p->inputs.end(), [&](const Value* in) { return !in || fromShapes(in, past, readsPast, depth + 1); });
  default: return false;
  }
}

/// A cached model's positions counted from its cache's length, Range(past length, past length +
/// sequence length, 1) made a row [1, sequence] (Unsqueeze at 0, perhaps expanded to the batch):
/// that row becomes each token's position, sgc.kv.pos as [tokens, 1] (the step's layout).
Error positionsFromCacheLength(Graph& g, const std::set<const Value*>& past, int64_t tokens) {
  Value* pos = g.findValue("sgc.kv.pos");
  auto isOne = [](const Value* v) { return v->kind == ValueKind::Const && v->data->numel() == 1 && v->data->getF(0) == 1; };
  auto rewrite = [&](Node& r) -> std::optional<std::vector<Node*>> {
    bool readsPast = false, unused = false;
    if (r.op != Op::Range || r.inputs.size() != 3 || !isOne(r.inputs[2]) || !fromShapes(r.inputs[0], &past, readsPast) ||
        !readsPast || !fromShapes(r.inputs[1], nullptr, unused))
      return std::nullopt;
    Value* row = r.outputs[0];
    for (Node* next = nullptr;; row = next->outputs[0]) { // to the [1, sequence] (or [batch, sequence]) row
      next = nullptr;
      for (const auto& n : g.nodes())
        if (std::count(n->inputs.begin(), n->inputs.end(), row)) next = next ? nullptr : n.get(); // its one reader
      bool moves = next && ((next->op == Op::Unsqueeze && row->type.rank() == 1) || next->op == Op::Expand);
      if (row->type.rank() == 2 || !moves) break;
    }
    if (row->type.rank() != 2) return std::nullopt; // not positions the model embeds: left for the cache-input check
    Node* c = g.addNode(Op::Cast, {pos}, 1, r.name + ".from_cache");
    c->attrs["to"] = std::string(dtypeName(row->type.dtype));
    Value* shape = g.addConst(g.uniqueName(r.name + ".rows"), Tensor::fromI64(DType::I64, {2}, {tokens, 1}));
    Node* rows = g.addNode(Op::Reshape, {c->outputs[0], shape}, 1, r.name + ".rows");
    g.replaceAllUses(row, rows->outputs[0]);
    return std::vector<Node*>{c, rows};
  };
  return rewriteInOrder(g, rewrite, /*removeDead=*/false);
}

/// A plain model's positions, Range(0, a length from the input's shape, 1), become each token's
/// position in its sequence (see PagedKv.h).
Error positionsFromCache(Graph& g) {
  Value* pos = g.findValue("sgc.kv.pos");
  auto isConst = [](const Value* v, double x) { return v->kind == ValueKind::Const && v->data->numel() == 1 && v->data->getF(0) == x; };
  Error failed = Error::success();
  auto rewrite = [&](Node& r) -> std::optional<std::vector<Node*>> {
    if (failed || r.op != Op::Range || r.inputs.size() != 3 || !isConst(r.inputs[0], 0) || !isConst(r.inputs[2], 1) || !fromInputShape(r.inputs[1]))
      return std::nullopt;
    if (r.outputs[0]->type.rank() != 1 || (r.outputs[0]->type.dims[0].isStatic() && pos->type.dims[0] != r.outputs[0]->type.dims[0])) {
      failed = makeError(describe(r) + ": positions of the sequence, expected one per token (" + toString(pos->type) + "), are " +
                         toString(r.outputs[0]->type));
      return std::nullopt;
    }
    Node* c = g.addNode(Op::Cast, {pos}, 1, r.name + ".from_cache");
    c->attrs["to"] = std::string(dtypeName(r.outputs[0]->type.dtype));
    g.replaceAllUses(r.outputs[0], c->outputs[0]);
    return std::vector<Node*>{c};
  };
  if (Error e = rewriteInOrder(g, rewrite, /*removeDead=*/true)) return e;
  return failed;
}

} // namespace

Error pagedKv(Graph& g, PagedKvOptions o, std::vector<Value*>* poolsOut) {
  if (o.tokens < 1 || o.seqs < 1 || o.blockSize < 1 || o.blocks < 0 || (o.blocks == 0 && o.budgetBytes < 1) || o.maxBlocks < 1)
    return makeError("paged-kv: tokens, sequences, block size, blocks (or a budget) and blocks per sequence must be positive");
  bool fromBudget = o.blocks == 0;
  if (fromBudget) o.blocks = 1; // sized below, once the layers are known
  for (const char* name : {"sgc.kv.tables", "sgc.kv.seq", "sgc.kv.pos"})
    if (g.findValue(name)) return makeError(std::string("paged-kv: the graph already has a value named ") + name);
  g.addInput("sgc.kv.tables", Type::of(DType::I32, {o.seqs, o.maxBlocks}));
  g.addInput("sgc.kv.seq", Type::of(DType::I32, {o.tokens}));
  g.addInput("sgc.kv.pos", Type::of(DType::I32, {o.tokens}));
  if (o.plain) { // the positions while the sequence length is still the input's, then the shapes static
    if (Error e = positionsFromCache(g)) return e;
    if (Error e = bindDims(g, o.bind)) return e;
  }
  Matcher m(g);
  std::vector<Value*> pools;
  Error failed = Error::success();
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (failed) return std::nullopt;
    auto r = m.match(n, o, pools);
    if (!r) {
      failed = r.takeError();
      return std::nullopt;
    }
    return *r;
  };
  if (Error e = rewriteInOrder(g, rewrite, /*removeDead=*/false)) return e;
  if (failed) return failed;
  if (pools.empty())
    return makeError(o.plain ? "paged-kv: no causal self-attention found (a softmax of scaled, masked scores of queries and keys, times the values)"
                             : "paged-kv: no attention reads a key/value cache (a Concat of a past input and new keys or values, as torch.onnx.export writes past_key_values)");

  if (!o.plain)
    if (Error e = positionsFromCacheLength(g, m.caches, o.tokens)) return e;
  // The present outputs and past inputs go; whatever still reads a past input was not recognized.
  std::erase_if(g.outputs, [&](const Value* v) { return m.isCacheConcat(v) && m.caches.count(v->producer->inputs[0]); });
  g.removeDeadNodes();
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs)
      if (v && v->kind == ValueKind::Input && m.caches.count(v))
        return makeError(describe(*n) + ": reads the cache input %" + v->name + " outside the attention blocks paged-kv recognizes");
  for (const Value* v : m.caches) g.removeInput(const_cast<Value*>(v));
  if (fromBudget) { // as many pages as the budget holds, in every layer
    int64_t pageBytes = 0;
    for (const Value* p : pools) pageBytes += p->type.staticNumel().value() * (int64_t)dtypeSize(p->type.dtype);
    int64_t blocks = o.budgetBytes / pageBytes;
    if (blocks < o.maxBlocks)
      return makeError("paged-kv: a budget of " + std::to_string(o.budgetBytes) + " bytes holds " + std::to_string(blocks) + " pages of " +
                       std::to_string(pageBytes) + " bytes (all layers); one sequence of the longest context needs " + std::to_string(o.maxBlocks));
    for (Value* p : pools) {
      std::vector<int64_t> shape = p->type.shape();
      shape[0] = blocks;
      p->type = Type::of(p->type.dtype, shape);
      p->data = std::make_shared<const Tensor>(p->type.dtype, shape);
    }
  }
  if (poolsOut) *poolsOut = pools;
  return inferShapes(g);
}

} // namespace sgc::ir
