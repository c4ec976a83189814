// The data-parallel pass (see DataParallel.h).
#include "ir/passes/DataParallel.h"

#include <algorithm>
#include <map>

namespace sgc::ir {

Error insertAllReduce(Graph& g, Value*& loss, std::vector<std::pair<Value*, Value*>>& grads, double bucketMb, int* buckets) {
  if (!(bucketMb > 0)) return makeError("--bucket-mb must be positive");
  std::vector<Node*> order;
  std::map<const Node*, size_t> position;
  for (auto& n : g.nodes()) {
    position[n.get()] = order.size();
    order.push_back(n.get());
  }
  auto produced = [&](const Value* v) { return v->producer ? position.at(v->producer) : 0; };
  // Gradients in the order they become ready.
  std::vector<size_t> idx(grads.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return std::make_pair(produced(grads[a].second), a) < std::make_pair(produced(grads[b].second), b);
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
  std::map<const Node*, std::vector<Node*>> after;
  for (size_t b = 0; b < groups.size(); ++b) {
    std::vector<Value*> ins;
    std::vector<std::string> names;
    size_t last = 0;
    for (size_t i : groups[b]) {
      ins.push_back(grads[i].second);
      names.push_back(g.uniqueName(grads[i].second->name + ".allreduced"));
      last = std::max(last, produced(grads[i].second));
    }
    Node* ar = g.addNode(Op::AllReduce, ins, (int)ins.size(), "allreduce.bucket" + std::to_string(b), names);
    ar->attrs = {{"bucket", (int64_t)b}, {"average", int64_t(1)}};
    for (size_t k = 0; k < groups[b].size(); ++k) {
      ar->outputs[k]->type = ins[k]->type;
      grads[groups[b][k]].second = ar->outputs[k];
    }
    after[order[last]].push_back(ar);
  }
  // The loss each rank reports is the mean over the ranks: a one-value all-reduce after it.
  Node* lossMean = g.addNode(Op::AllReduce, {loss}, 1, "allreduce.loss", {g.uniqueName(loss->name + ".mean")});
  lossMean->attrs = {{"bucket", int64_t(-1)}, {"average", int64_t(1)}};
  lossMean->outputs[0]->type = loss->type;
  std::vector<Node*>& afterLoss = after[loss->producer]; // a loss with no producer: first of all
  afterLoss.insert(afterLoss.begin(), lossMean);
  loss = lossMean->outputs[0];
  std::vector<Node*> placed = after[nullptr];
  for (Node* n : order) {
    placed.push_back(n);
    placed.insert(placed.end(), after[n].begin(), after[n].end());
  }
  g.setOrder(placed);
  if (buckets) *buckets = (int)groups.size();
  return Error::success();
}

} // namespace sgc::ir
