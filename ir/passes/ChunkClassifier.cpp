// The chunk-classifier pass (see ChunkClassifier.h).
#include "ir/passes/ChunkClassifier.h"

#include "ir/passes/InferShapes.h"

#include <algorithm>
#include <map>
#include <set>

namespace sgc::ir {
namespace {

using Readers = std::map<const Value*, std::vector<Node*>>;

/// Whether `n` reshapes without moving rows: static, the same elements and the same last dim
/// (or is a cast to the dtype it reads: Hugging Face's `logits.float()` in f32).
bool keepsRows(const Node& n) {
  if (n.op != Op::Reshape && n.op != Op::Identity && n.op != Op::Cast) return false;
  const Type &a = n.inputs[0]->type, &b = n.outputs[0]->type;
  return a.isStatic() && b.isStatic() && a.dtype == b.dtype && a.rank() >= 1 && b.rank() >= 1 && a.dims.back().value == b.dims.back().value &&
         a.staticNumel() == b.staticNumel();
}

/// The number of rows of static `v` whose rows are `cols` long.
int64_t rowsOf(const Value* v, int64_t cols) { return v->type.isStatic() && v->type.rank() >= 1 && v->type.dims.back().value == cols ? *v->type.staticNumel() / cols : -1; }

struct WeightGrad {
  Node* node;
  size_t ds;    ///< the operand that reads the scores' gradient
  Value* other; ///< the other operand's rows, as ready where the loss is (perhaps before a reshape)
};

/// One classifier of the form ChunkClassifier.h describes.
struct Classifier {
  Node* loss = nullptr; ///< SceLossGrad, with the loss as its second result
  Node* head = nullptr; ///< the scores' product
  int64_t rows = 0, classes = 0;
  std::vector<Node*> dataGrads;
  std::vector<WeightGrad> weightGrads;
};

/// Whether value `v` is ready before position `at`: not a node's result, or one computed earlier.
bool readyBefore(const Value* v, size_t at, const std::map<const Node*, size_t>& pos) {
  return !v || !v->producer || pos.at(v->producer) < at;
}

/// `v`, or what it reshapes (keeping rows), ready before position `at`; else null.
Value* readyRows(Value* v, size_t at, const std::map<const Node*, size_t>& pos) {
  while (!readyBefore(v, at, pos) && keepsRows(*v->producer)) v = v->producer->inputs[0];
  return readyBefore(v, at, pos) ? v : nullptr;
}

std::optional<Classifier> match(Node& loss, const Readers& readers, const std::set<const Value*>& outputs, const std::map<const Node*, size_t>& pos) {
  if (loss.op != Op::SceLossGrad || loss.outputs.size() != 2 || !loss.outputs[0] || !loss.outputs[1] || loss.input(3)) return std::nullopt;
  std::string red = loss.getString("reduction", "mean");
  const Value *s = loss.inputs[0], *t = loss.inputs[1], *seed = loss.inputs[2];
  if ((red != "mean" && red != "sum") || !s->type.isStatic() || s->type.rank() != 2 || !t->type.isStatic() || t->type.rank() != 1 ||
      !seed->type.isStatic() || seed->type.staticNumel() != 1)
    return std::nullopt;
  Classifier c;
  c.loss = &loss;
  c.rows = s->type.dims[0].value;
  c.classes = s->type.dims[1].value;
  auto readOnceBy = [&](const Value* v) { return !outputs.count(v) && readers.count(v) && readers.at(v).size() == 1; };
  // Back from the scores to their product, through reshapes read by nothing else.
  const Value* v = s;
  while (readOnceBy(v) && v->producer && keepsRows(*v->producer)) v = v->producer->inputs[0];
  Node* head = v->producer;
  if (!readOnceBy(v) || !head || head->op != Op::MatMul || head->inputs[0]->type.rank() < 2 || !head->inputs[1]->type.isStatic() ||
      head->inputs[1]->type.rank() != 2 ||
      rowsOf(v, c.classes) != c.rows || rowsOf(head->inputs[0], head->inputs[1]->type.dims[0].value) != c.rows)
    return std::nullopt;
  c.head = head;
  // Forward from the gradient to the products that read it, through reshapes that keep rows.
  std::vector<const Value*> work{loss.outputs[0]};
  while (!work.empty()) {
    const Value* u = work.back();
    work.pop_back();
    if (outputs.count(u) || !readers.count(u)) return std::nullopt;
    for (Node* r : readers.at(u)) {
      if (keepsRows(*r)) {
        work.push_back(r->outputs[0]);
      } else if (r->op == Op::MatMul && r->inputs[0] == u && r->inputs[1] != u && r->inputs[1]->type.isStatic() && r->inputs[1]->type.rank() == 2 &&
                 r->inputs[1]->type.dims[0].value == c.classes && r->outputs[0]->type.isStatic()) {
        c.dataGrads.push_back(r);
      } else if (r->op == Op::Gemm && !r->input(2) && r->getInt("transA", 0) == 1 && r->getInt("transB", 0) == 0 && r->getFloat("alpha", 1) == 1 &&
                 (r->inputs[0] == u) != (r->inputs[1] == u) && u->type.rank() == 2) {
        size_t ds = r->inputs[0] == u ? 0 : 1;
        const Value* other = r->inputs[1 - ds];
        if (!other->type.isStatic() || other->type.rank() != 2 || other->type.dims[0].value != c.rows) return std::nullopt;
        Value* rows = readyRows(r->inputs[1 - ds], pos.at(&loss), pos);
        if (!rows) return std::nullopt;
        c.weightGrads.push_back({r, ds, rows});
      } else {
        return std::nullopt;
      }
    }
  }
  // What the chunks read besides the scores' gradient must be ready where the loss is.
  size_t at = pos.at(&loss);
  std::vector<const Value*> reads{head->inputs[0], head->inputs[1], t, seed};
  for (Node* d : c.dataGrads) reads.push_back(d->inputs[1]);
  for (const Value* r : reads)
    if (!readyBefore(r, at, pos)) return std::nullopt;
  return c;
}

/// Builds one classifier's chunks; the nodes it makes are listed in `made`, in order.
struct Chunker {
  Graph& g;
  const Classifier& c;
  int64_t chunkRows;
  std::vector<Node*> made = {};
  std::map<const Value*, Value*> flat = {};                      ///< a value -> its rows, as [N, cols]
  std::map<std::pair<const Value*, int64_t>, Value*> parts = {}; ///< (rows, first row) -> those rows
  std::map<int64_t, std::pair<Value*, Value*>> bounds = {};      ///< first row -> the Slices' start and end
  Value* axis0 = nullptr;

  std::string name(const std::string& what) { return c.loss->name + ".chunk." + what; }

  Value* add(Op op, std::vector<Value*> ins, const std::string& what, std::map<std::string, Attr> attrs = {}) {
    Node* n = g.addNode(op, std::move(ins), 1, name(what));
    n->attrs = std::move(attrs);
    made.push_back(n);
    return n->outputs[0];
  }

  /// Makes `n` (a node made here) the producer of `v` in place of `v`'s old producer.
  void produce(Value* v, Op op, std::vector<Value*> ins, const std::string& what, std::map<std::string, Attr> attrs = {}) {
    Node* old = v->producer;
    std::erase(old->outputs, v);
    Node* n = g.addNode(op, std::move(ins), 0, name(what));
    n->attrs = std::move(attrs);
    n->outputs.push_back(v);
    v->producer = n;
    made.push_back(n);
  }

  Value* i64s(const std::string& what, std::vector<int64_t> v) {
    return g.addI64s(name(what), v);
  }

  /// Rows [r0, r0 + chunkRows) of `v`, whose rows are `cols` long.
  Value* rows(Value* v, int64_t cols, int64_t r0) {
    Value*& f = flat[v];
    if (!f) f = v->type.rank() <= 2 ? v : add(Op::Reshape, {v, i64s("shape", {c.rows, cols})}, "rows");
    Value*& p = parts[{f, r0}];
    int64_t r1 = std::min(c.rows, r0 + chunkRows);
    if (!p) {
      auto& [start, end] = bounds[r0];
      if (!start) start = i64s("start", {r0}), end = i64s("end", {r1});
      if (!axis0) axis0 = i64s("axis", {0});
      p = add(Op::Slice, {f, start, end, axis0}, "slice");
    }
    return p;
  }

  /// The mean's divisor in dtype `t`: the targets that are not ignore_index.
  Value* count(DType t) {
    Value* labels = c.loss->inputs[1];
    if (!c.loss->has("ignore_index")) return g.addConst(g.uniqueName(name("count")), Tensor::fromF64(t, {}, {(double)c.rows}));
    Value* ignore = g.addConst(g.uniqueName(name("ignore")), Tensor::fromI64(labels->type.dtype, {}, {c.loss->getInt("ignore_index", -100)}));
    Value* kept = add(Op::Not, {add(Op::Equal, {labels, ignore}, "ignored")}, "kept");
    return add(Op::ReduceSum, {add(Op::Cast, {kept}, "kept", {{"to", std::string(dtypeName(t))}})}, "count", {{"keepdims", int64_t(0)}});
  }

  void build() {
    Node& loss = *c.loss;
    Value *x = c.head->inputs[0], *w = c.head->inputs[1], *seed = loss.inputs[2], *lossOut = loss.outputs[1];
    bool mean = loss.getString("reduction", "mean") == "mean";
    Value* divisor = mean ? count(lossOut->type.dtype) : nullptr;
    Value* dl = seed;
    if (mean) {
      Value* d = lossOut->type.dtype == seed->type.dtype ? divisor : add(Op::Cast, {divisor}, "count", {{"to", std::string(dtypeName(seed->type.dtype))}});
      dl = add(Op::Div, {seed, d}, "dloss");
    }
    std::vector<Value*> losses;
    std::vector<std::vector<Value*>> dx(c.dataGrads.size()), dw(c.weightGrads.size());
    for (int64_t r0 = 0; r0 < c.rows; r0 += chunkRows) {
      Value* s = add(Op::MatMul, {rows(x, w->type.dims[0].value, r0), w}, "scores");
      Node* sce = g.addNode(Op::SceLossGrad, {s, rows(loss.inputs[1], 1, r0), dl}, 2, name("loss"));
      sce->attrs = loss.attrs;
      sce->attrs["reduction"] = std::string("sum");
      made.push_back(sce);
      losses.push_back(sce->outputs[1]);
      Value* ds = sce->outputs[0];
      for (size_t i = 0; i < c.dataGrads.size(); ++i) dx[i].push_back(add(Op::MatMul, {ds, c.dataGrads[i]->inputs[1]}, "dx"));
      for (size_t i = 0; i < c.weightGrads.size(); ++i) {
        const WeightGrad& wg = c.weightGrads[i];
        std::vector<Value*> ins(2);
        ins[wg.ds] = ds;
        ins[1 - wg.ds] = rows(wg.other, wg.node->inputs[1 - wg.ds]->type.dims[1].value, r0);
        dw[i].push_back(add(Op::Gemm, ins, "dw", wg.node->attrs));
      }
    }
    if (mean) produce(lossOut, Op::Div, {add(Op::Sum, losses, "loss_sum"), divisor}, "mean");
    else produce(lossOut, Op::Sum, losses, "sum");
    for (size_t i = 0; i < c.dataGrads.size(); ++i) {
      Value* out = c.dataGrads[i]->outputs[0];
      Value* all = add(Op::Concat, dx[i], "dx_all", {{"axis", int64_t(0)}});
      produce(out, Op::Reshape, {all, i64s("dx_shape", out->type.shape())}, "dx_shaped");
    }
    for (size_t i = 0; i < c.weightGrads.size(); ++i) {
      Value* out = c.weightGrads[i].node->outputs[0];
      DType t = out->type.dtype;
      if (t == DType::F32 || t == DType::F64) {
        produce(out, Op::Sum, dw[i], "dw_sum");
        continue;
      }
      std::vector<Value*> wide;
      for (Value* part : dw[i]) wide.push_back(add(Op::Cast, {part}, "dw_f32", {{"to", std::string("f32")}}));
      produce(out, Op::Cast, {add(Op::Sum, wide, "dw_sum")}, "dw_rounded", {{"to", std::string(dtypeName(t))}});
    }
  }
};

} // namespace

Error chunkClassifier(Graph& g, int64_t maxChunkBytes, int* count) {
  if (count) *count = 0;
  if (maxChunkBytes <= 0) return Error::success();
  Readers readers;
  std::map<const Node*, size_t> pos;
  for (const auto& n : g.nodes()) {
    pos[n.get()] = pos.size();
    for (const Value* v : n->inputs)
      if (v && (readers[v].empty() || readers[v].back() != n.get())) readers[v].push_back(n.get());
  }
  std::set<const Value*> outputs(g.outputs.begin(), g.outputs.end());
  for (const auto& u : g.updates) outputs.insert(u.second);
  std::map<const Node*, std::vector<Node*>> before; // a loss -> the nodes of its chunks, placed before it
  std::vector<Node*> nodes; // as they were: chunking adds nodes
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (Node* n : nodes) {
    auto c = match(*n, readers, outputs, pos);
    if (!c) continue;
    int64_t bytes = c->rows * c->classes * (int64_t)dtypeSize(n->inputs[0]->type.dtype);
    if (bytes <= maxChunkBytes || c->rows < 2) continue;
    int64_t chunks = (bytes + maxChunkBytes - 1) / maxChunkBytes, chunkRows = (c->rows + chunks - 1) / chunks;
    Chunker k{g, *c, chunkRows};
    k.build();
    before[n] = std::move(k.made);
  }
  if (count) *count = (int)before.size();
  if (before.empty()) return Error::success();
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) {
    auto b = before.find(n.get());
    if (b != before.end()) order.insert(order.end(), b->second.begin(), b->second.end());
    if (!pos.count(n.get())) continue; // made here: placed above
    order.push_back(n.get());
  }
  g.setOrder(order);
  g.removeDeadNodes(); // the whole-scores product, loss and gradient products
  return inferShapes(g);
}

} // namespace sgc::ir
