// The data-parallel pass (see DataParallel.h).
#include "ir/passes/DataParallel.h"

#include <algorithm>
#include <map>
#include <set>

namespace sgc::ir {
namespace {

/// The graph's nodes in order, and where each stands.
struct Positions {
  std::vector<Node*> order;
  std::map<const Node*, size_t> at;
  explicit Positions(Graph& g) {
    for (auto& n : g.nodes()) {
      at[n.get()] = order.size();
      order.push_back(n.get());
    }
  }
  size_t produced(const Value* v) const { return v->producer ? at.at(v->producer) : 0; }
};

/// Gradient indices in buckets of at most `bucketMb`, in the order the gradients become ready.
std::vector<std::vector<size_t>> bucketsOf(const Positions& pos, const std::vector<std::pair<Value*, Value*>>& grads, double bucketMb) {
  std::vector<size_t> idx(grads.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return std::make_pair(pos.produced(grads[a].second), a) < std::make_pair(pos.produced(grads[b].second), b);
  });
  const double limit = bucketMb * 1024 * 1024;
  std::vector<std::vector<size_t>> groups;
  double filled = 0;
  for (size_t i : idx) {
    double bytes = (double)grads[i].second->type.staticNumel().value_or(0) * (double)dtypeSize(grads[i].second->type.dtype);
    if (groups.empty() || filled + bytes > limit) {
      groups.push_back({});
      filled = 0;
    }
    groups.back().push_back(i);
    filled += bytes;
  }
  return groups;
}

/// The node that produces the last of a bucket's gradients.
Node* lastProducer(const Positions& pos, const std::vector<std::pair<Value*, Value*>>& grads, const std::vector<size_t>& bucket) {
  size_t last = 0;
  for (size_t i : bucket) last = std::max(last, pos.produced(grads[i].second));
  return pos.order[last];
}

/// Re-orders the graph: the nodes of after[n] (added at its end) right after n, those of after[nullptr] first.
void placeAfter(Graph& g, const Positions& pos, std::map<const Node*, std::vector<Node*>>& after) {
  std::vector<Node*> placed = after[nullptr];
  for (Node* n : pos.order) {
    placed.push_back(n);
    placed.insert(placed.end(), after[n].begin(), after[n].end());
  }
  std::set<const Node*> seen(placed.begin(), placed.end());
  for (auto& n : g.nodes()) // nodes added since `pos` and not placed: at the end, in order
    if (!seen.count(n.get())) placed.push_back(n.get());
  g.setOrder(placed);
}

/// The loss each rank reports is the mean over the ranks: a one-value all-reduce after it.
Node* averageLoss(Graph& g, Value*& loss, std::map<const Node*, std::vector<Node*>>& after) {
  Node* mean = g.addNode(Op::AllReduce, {loss}, 1, "allreduce.loss", {g.uniqueName(loss->name + ".mean")});
  mean->attrs = {{"bucket", int64_t(-1)}, {"average", int64_t(1)}};
  mean->outputs[0]->type = loss->type;
  std::vector<Node*>& afterLoss = after[loss->producer]; // a loss with no producer: first of all
  afterLoss.insert(afterLoss.begin(), mean);
  loss = mean->outputs[0];
  return mean;
}

/// `v` flattened to one dimension.
Value* flat(Graph& g, Value* v, std::vector<Node*>& made) {
  Node* n = g.addNode(Op::Reshape, {v, g.addI64s(v->name + ".flat_shape", {-1})}, 1, v->name + ".flat");
  n->outputs[0]->type = Type::of(v->type.dtype, {v->type.staticNumel().value_or(0)});
  made.push_back(n);
  return n->outputs[0];
}

/// The values of `vs` flattened and concatenated, zero-padded to `padded` elements.
Value* concatenated(Graph& g, const std::vector<Value*>& vs, int64_t padded, const std::string& name, std::vector<Node*>& made) {
  std::vector<Value*> parts;
  int64_t total = 0;
  for (Value* v : vs) {
    parts.push_back(flat(g, v, made));
    total += v->type.staticNumel().value_or(0);
  }
  DType t = vs[0]->type.dtype;
  if (padded > total) parts.push_back(g.addConst(g.uniqueName(name + ".pad"), Tensor(t, {padded - total})));
  Node* n = g.addNode(Op::Concat, parts, 1, name);
  n->attrs = {{"axis", int64_t(0)}};
  n->outputs[0]->type = Type::of(t, {padded});
  made.push_back(n);
  return n->outputs[0];
}

} // namespace

Error insertAllReduce(Graph& g, Value*& loss, std::vector<std::pair<Value*, Value*>>& grads, double bucketMb, int* buckets) {
  if (!(bucketMb > 0)) return makeError("--bucket-mb must be positive");
  Positions pos(g);
  auto groups = bucketsOf(pos, grads, bucketMb);
  std::map<const Node*, std::vector<Node*>> after;
  for (size_t b = 0; b < groups.size(); ++b) {
    std::vector<Value*> ins;
    std::vector<std::string> names;
    for (size_t i : groups[b]) {
      ins.push_back(grads[i].second);
      names.push_back(g.uniqueName(grads[i].second->name + ".allreduced"));
    }
    Node* ar = g.addNode(Op::AllReduce, ins, (int)ins.size(), "allreduce.bucket" + std::to_string(b), names);
    ar->attrs = {{"bucket", (int64_t)b}, {"average", int64_t(1)}};
    after[lastProducer(pos, grads, groups[b])].push_back(ar);
    for (size_t k = 0; k < groups[b].size(); ++k) {
      ar->outputs[k]->type = ins[k]->type;
      grads[groups[b][k]].second = ar->outputs[k];
    }
  }
  averageLoss(g, loss, after);
  placeAfter(g, pos, after);
  if (buckets) *buckets = (int)groups.size();
  return Error::success();
}

Expected<std::vector<Zero1Bucket>> insertZero1(Graph& g, Value*& loss, const std::vector<std::pair<Value*, Value*>>& grads, double bucketMb,
                                               int64_t world) {
  if (!(bucketMb > 0)) return makeError("--bucket-mb must be positive");
  if (world < 1) return makeError("--data-parallel zero1 needs the number of ranks (--ranks N)");
  Positions pos(g);
  std::vector<Zero1Bucket> out;
  std::map<const Node*, std::vector<Node*>> after;
  for (const auto& group : bucketsOf(pos, grads, bucketMb)) {
    // One dtype per bucket: split a group where the dtype changes.
    std::vector<std::vector<size_t>> runs;
    for (size_t i : group)
      if (runs.empty() || grads[runs.back().back()].second->type.dtype != grads[i].second->type.dtype) runs.push_back({i});
      else runs.back().push_back(i);
    for (const auto& run : runs) {
      Zero1Bucket b;
      int64_t total = 0;
      std::vector<Value*> gs;
      for (size_t i : run) {
        b.params.push_back(grads[i].first);
        b.offsets.push_back(total);
        total += grads[i].first->type.staticNumel().value_or(0);
        gs.push_back(grads[i].second);
      }
      b.padded = (total + world - 1) / world * world;
      std::string name = "zero1.bucket" + std::to_string(out.size());
      std::vector<Node*> made;
      Value* flatGrads = concatenated(g, gs, b.padded, name + ".grads", made);
      Node* rs = g.addNode(Op::ReduceScatter, {flatGrads}, 1, name + ".reduce_scatter", {g.uniqueName(name + ".grad_shard")});
      rs->attrs = {{"bucket", (int64_t)out.size()}, {"average", int64_t(1)}, {"world", world}};
      rs->outputs[0]->type = Type::of(flatGrads->type.dtype, {b.padded / world});
      made.push_back(rs);
      std::vector<Node*>& there = after[lastProducer(pos, grads, run)];
      there.insert(there.end(), made.begin(), made.end());
      b.gradShard = rs->outputs[0];
      std::vector<Node*> unplaced; // the parameters' shard: read where the optimizer runs, at the end
      Value* flatParams = concatenated(g, b.params, b.padded, name + ".params", unplaced);
      Node* shard = g.addNode(Op::Shard, {flatParams}, 1, name + ".shard", {g.uniqueName(name + ".param_shard")});
      shard->attrs = {{"world", world}};
      shard->outputs[0]->type = Type::of(flatParams->type.dtype, {b.padded / world});
      b.paramShard = shard->outputs[0];
      b.world = world;
      out.push_back(std::move(b));
    }
  }
  averageLoss(g, loss, after);
  placeAfter(g, pos, after);
  return out;
}

Error gatherZero1(Graph& g, const Zero1Bucket& b, Value* newShard) {
  std::string name = b.paramShard->name + ".gathered";
  Node* ag = g.addNode(Op::AllGather, {newShard}, 1, name, {g.uniqueName(name)});
  ag->attrs = {{"world", b.world}};
  ag->outputs[0]->type = Type::of(newShard->type.dtype, {b.padded});
  for (size_t k = 0; k < b.params.size(); ++k) {
    Value* p = b.params[k];
    int64_t n = p->type.staticNumel().value_or(0);
    Node* slice = g.addNode(Op::Slice, {ag->outputs[0], g.addI64s(p->name + ".start", {b.offsets[k]}), g.addI64s(p->name + ".end", {b.offsets[k] + n})},
                            1, p->name + ".gathered");
    slice->outputs[0]->type = Type::of(p->type.dtype, {n});
    std::vector<int64_t> shape = p->type.shape();
    Node* back = g.addNode(Op::Reshape, {slice->outputs[0], g.addI64s(p->name + ".shape", shape)}, 1, p->name + ".updated");
    back->outputs[0]->type = p->type;
    g.updates.push_back({p, back->outputs[0]});
  }
  return Error::success();
}

} // namespace sgc::ir
