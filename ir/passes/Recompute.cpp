// The recompute pass (see Recompute.h).
#include "ir/passes/Recompute.h"

#include "ir/passes/InferShapes.h"

#include <map>
#include <set>

namespace sgc::ir {
namespace {

/// --recompute selective: elementwise ops and views, transposes and broadcasts.
bool selective(Op op) {
  OpClass c = opClass(op);
  return c == OpClass::Elementwise || c == OpClass::View || c == OpClass::Layout;
}

/// --recompute full: row-wise ops (softmax, normalizations), reductions, data movement (gathers,
/// slices, concatenations, pads), pooling and dropout too; never products or convolutions.
bool full(Op op) {
  switch (opClass(op)) {
  case OpClass::Row: case OpClass::Reduction: case OpClass::Movement: case OpClass::Pool: case OpClass::Random: return true;
  default: return selective(op);
  }
}

bool elementwise(Op op) { return opClass(op) == OpClass::Elementwise && op != Op::Identity; }

struct Recomputer {
  Graph& g;
  std::string mode;
  std::set<const Node*> forward;
  std::set<const Value*> keptForBackward; ///< cheap, fused: forward values a backward node reads
  std::set<const Value*> readElsewhere;   ///< fused: forward values a non-elementwise backward node reads
  std::map<const Value*, Value*> clones; ///< forward value -> its recomputed copy
  std::vector<Node*> created;            ///< in creation order (dependencies first)

  bool eligible(const Value* v) const {
    if (!v || v->kind != ValueKind::Result || !forward.count(v->producer)) return false;
    if (mode == "full") return full(v->producer->op);
    if (mode == "selective") return selective(v->producer->op);
    // cheap: an elementwise result whose operands stay alive for the backward pass anyway;
    // fused: also read by elementwise backward nodes only, so the repeat joins their kernel.
    if (!elementwise(v->producer->op) || (mode == "fused" && readElsewhere.count(v))) return false;
    for (const Value* in : v->producer->inputs)
      if (in && in->kind == ValueKind::Result && !keptForBackward.count(in)) return false;
    return true;
  }

  /// The recomputed copy of `v` (its producer cloned; eligible inputs recomputed too).
  Value* copyOf(Value* v) {
    auto it = clones.find(v);
    if (it != clones.end()) return it->second;
    Node* p = v->producer;
    std::vector<Value*> ins;
    for (Value* in : p->inputs) ins.push_back(eligible(in) ? copyOf(in) : in);
    std::vector<std::string> names;
    for (Value* o : p->outputs) names.push_back(g.uniqueName((o ? o->name : p->name) + ".recomputed"));
    Node* c = g.addNode(p->op, ins, (int)p->outputs.size(), p->name + ".recomputed", names);
    c->attrs = p->attrs;
    for (size_t i = 0; i < p->outputs.size(); ++i) {
      if (!p->outputs[i]) {
        c->outputs[i] = nullptr;
        continue;
      }
      c->outputs[i]->type = p->outputs[i]->type;
      clones[p->outputs[i]] = c->outputs[i];
    }
    created.push_back(c);
    return clones.at(v);
  }
};

/// Nodes the loss depends on.
std::set<const Node*> forwardOf(const Graph& g) {
  std::set<const Node*> seen;
  std::vector<const Value*> work(g.outputs.begin(), g.outputs.end());
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    if (!v || !v->producer || !seen.insert(v->producer).second) continue;
    for (const Value* in : v->producer->inputs) work.push_back(in);
  }
  return seen;
}

} // namespace

Error recompute(Graph& g, const std::string& mode, int* count) {
  if (count) *count = 0;
  if (mode == "none") return Error::success();
  if (mode != "fused" && mode != "cheap" && mode != "selective" && mode != "full")
    return makeError("--recompute " + mode + ": expected none, fused, cheap, selective or full");
  if (g.outputs.size() != 1) return makeError("recompute needs a training step (one loss output)");
  Recomputer r{g, mode, forwardOf(g), {}, {}, {}, {}};
  for (auto& n : g.nodes())
    if (!r.forward.count(n.get()))
      for (const Value* in : n->inputs)
        if (in && in->kind == ValueKind::Result && r.forward.count(in->producer)) {
          r.keptForBackward.insert(in);
          if (!elementwise(n->op)) r.readElsewhere.insert(in);
        }
  // Each backward node reads recomputed copies; copies are placed right before their first reader.
  std::vector<Node*> order;
  for (auto& n : g.nodes()) order.push_back(n.get());
  std::map<const Node*, std::vector<Node*>> before;
  for (Node* n : order) {
    if (r.forward.count(n)) continue;
    size_t mark = r.created.size();
    for (Value*& in : n->inputs)
      if (r.eligible(in)) in = r.copyOf(in);
    before[n].assign(r.created.begin() + mark, r.created.end());
  }
  // The copies go just before the node that first needed them.
  std::vector<Node*> placed;
  for (Node* n : order) {
    placed.insert(placed.end(), before[n].begin(), before[n].end());
    placed.push_back(n);
  }
  g.setOrder(placed);
  if (count) *count = (int)r.created.size();
  return inferShapes(g);
}

} // namespace sgc::ir
