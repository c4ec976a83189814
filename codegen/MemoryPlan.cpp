// The memory planner (see MemoryPlan.h): liveness, in-place aliasing, then
// greedy-by-size placement of the activations, and the overlap checker.
#include "codegen/MemoryPlan.h"
#include "runtime/Program.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace sgc::codegen {

bool isView(const ir::Node& n) {
  switch (n.op) {
  case ir::Op::Reshape: case ir::Op::Flatten: case ir::Op::Squeeze: case ir::Op::Unsqueeze: case ir::Op::Identity: return true;
  case ir::Op::SumTo: // to its own shape (autodiff could not tell before the dims were bound): a copy
    return n.inputs[0]->type.isStatic() && n.outputs[0]->type.isStatic() && n.inputs[0]->type == n.outputs[0]->type;
  case ir::Op::Transpose: { // moving only dims of size 1 keeps every element where it was
    if (!n.inputs[0]->type.isStatic() || !n.has("perm")) return false;
    std::vector<int64_t> shape = n.inputs[0]->type.shape(), kept;
    for (int64_t d : n.getInts("perm"))
      if (d < 0 || d >= (int64_t)shape.size()) return false;
      else if (shape[d] != 1) kept.push_back(d);
    return std::is_sorted(kept.begin(), kept.end());
  }
  default: return false;
  }
}

namespace {

using ir::Op;
using ir::Value;
using ir::ValueKind;

int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

/// Whether each result element depends on its operands' elements at its own index alone, so
/// that the result may take the bytes of an operand that dies there.
bool isElementwise(Op op) { return ir::opClass(op) == ir::OpClass::Elementwise; }

/// Whether a node fused into an elementwise kernel reads its operand's elements at indices other
/// than its result's (a broadcast reads a smaller operand, whose bytes no result takes).
bool remaps(const ir::Node* n) {
  switch (n->op) {
  case Op::Transpose: return !isView(*n);
  case Op::Slice: case Op::SliceGrad: case Op::Concat: return true;
  default: return false;
  }
}

struct Planner {
  const ir::Graph& g;
  MemoryPlan plan;
  std::map<const Value*, size_t> index; ///< value -> buffer
  std::map<const Value*, int> lastUse;
  std::map<const ir::Node*, int> positions;
  std::set<const Value*> grads;
  std::set<int> productGroups; ///< positions of kernels led by a matrix product
  std::set<const Value*> writtenEarlier; ///< results also written before their node runs
  std::set<int> remapping;     ///< positions of fused kernels that read an element away from their own (through a movement)
  std::map<const Value*, std::pair<int, int>> bucketOrder; ///< all-reduced values: (position, operand)

  Buffer& buf(const Value* v) { return plan.buffers[index.at(v)]; }

  Region regionOf(const Value* v) const {
    switch (v->kind) {
    case ValueKind::Input: return Region::Inputs;
    case ValueKind::Param: return Region::Params;
    case ValueKind::State: return Region::State;
    case ValueKind::Const: return Region::Consts;
    default: return grads.count(v) ? Region::Grads : Region::Activations;
    }
  }

  Error collect(const std::vector<std::vector<const ir::Node*>>& schedule, const std::map<const Value*, int>& laterReads,
                const std::map<const Value*, int>& earlierWrites) {
    std::vector<const ir::Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    int end = schedule.empty() ? (int)order.size() : (int)schedule.size();
    if (schedule.empty())
      for (int i = 0; i < end; ++i) positions[order[i]] = i;
    for (int i = 0; i < (int)schedule.size(); ++i) {
      for (const ir::Node* n : schedule[i]) positions[n] = i;
      Op head = schedule[i][0]->op;
      if (schedule[i].size() > 1 && (head == Op::MatMul || head == Op::Gemm)) productGroups.insert(i);
      if (schedule[i].size() > 1 && std::any_of(schedule[i].begin(), schedule[i].end(), remaps)) remapping.insert(i);
    }
    for (const ir::Node* np : order) {
      const ir::Node& n = *np;
      int i = positions.at(np);
      for (const Value* in : n.inputs)
        if (in) lastUse[in] = std::max(lastUse.count(in) ? lastUse[in] : i, i); // a node may run before one earlier in the graph
      if ((n.op == Op::SgdUpdate || n.op == Op::AdamUpdate) && n.inputs[1]->kind == ValueKind::Result) grads.insert(n.inputs[1]);
      // What an all-reduce reads and writes stays in the grads region (never reused, so the
      // collective may run while later kernels do), each bucket back to back.
      if (n.op == Op::AllReduce || n.op == Op::ReduceScatter || n.op == Op::AllGather)
        for (size_t k = 0; k < n.inputs.size(); ++k)
          for (const Value* v : {n.inputs[k], n.outputs[k]})
            if (v->kind == ValueKind::Result) {
              grads.insert(v);
              bucketOrder.emplace(v, std::make_pair(i, (int)k));
            }
    }
    for (auto [v, at] : laterReads) lastUse[v] = std::max(lastUse[v], at);
    for (const Value* v : g.outputs) lastUse[v] = end;
    for (auto& [v, next] : g.updates) lastUse[next] = end;
    for (const auto& v : g.values()) {
      bool defined = v->kind != ValueKind::Result || (v->producer && std::count(v->producer->outputs.begin(), v->producer->outputs.end(), v.get()));
      if (!defined) continue;
      auto n = v->type.staticNumel();
      if (!n) return makeError("value %" + v->name + " has shape " + ir::toString(v->type) + "; bind its dims with --dim");
      Buffer b{v.get(), regionOf(v.get()), 0, *n * (int64_t)ir::dtypeSize(v->type.dtype), 0, end};
      if (v->kind == ValueKind::Result) {
        b.first = positions.at(v->producer);
        b.last = lastUse.count(v.get()) ? lastUse[v.get()] : b.first;
        if (auto it = earlierWrites.find(v.get()); it != earlierWrites.end()) {
          b.first = std::min(b.first, it->second);
          writtenEarlier.insert(v.get());
        }
      }
      index[v.get()] = plan.buffers.size();
      plan.buffers.push_back(b);
    }
    plan.numSteps = end;
    return Error::success();
  }

  /// The value whose bytes `v` finally uses (following aliases).
  const Value* root(const Value* v) {
    while (buf(v).aliasOf) v = buf(v).aliasOf;
    return v;
  }

  void aliasInPlace() {
    for (const auto& np : g.nodes()) {
      const ir::Node& n = *np;
      int i = positions.at(&n);
      if (n.op == Op::AllReduce) { // in place: each result takes its operand's bytes
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const Value* in = n.inputs[k];
          Buffer& out = buf(n.outputs[k]);
          if (in->kind != ValueKind::Result || buf(in).region != Region::Grads || buf(in).aliasOf || buf(in).bytes != out.bytes ||
              lastUse[in] != i)
            continue;
          out.aliasOf = in;
        }
        continue;
      }
      // (A cross-entropy gradient that also gives the loss may still write its scores' bytes.)
      if ((n.outputs.size() != 1 && n.op != Op::SceLossGrad) || !n.outputs[0] || buf(n.outputs[0]).region != Region::Activations ||
          !buf(n.outputs[0]).bytes)
        continue;
      Buffer& out = buf(n.outputs[0]);
      if (writtenEarlier.count(n.outputs[0])) continue; // its operands are read where it is written
      if (isView(n)) { // a view shares its input's bytes, which then live as long as either
        const Value* in = n.inputs[0];
        if (!in || in->kind != ValueKind::Result || buf(root(in)).region != Region::Activations || buf(root(in)).bytes != out.bytes) continue;
        out.aliasOf = root(in);
        buf(out.aliasOf).last = std::max(buf(out.aliasOf).last, out.last);
        continue;
      }
      // A cross-entropy gradient may also write over its scores: each row's scores are all read
      // (for the row's maximum and sum) before any of its gradient is written, and element by
      // element after that (CPU and GPU kernels alike).
      bool rowInPlace = n.op == Op::SceLossGrad;
      if (!isElementwise(n.op) && !rowInPlace) continue;
      // A kernel that reads elements through a movement's index map may read one after another
      // iteration stored over it: its results take no operand's bytes.
      if (remapping.count(i)) continue;
      for (const Value* in : rowInPlace ? std::vector<Value*>{n.inputs[0]} : n.inputs) {
        if (!in || in->kind != ValueKind::Result || lastUse[in] != i) continue;
        const Value* r = root(in);
        Buffer& rb = buf(r);
        // The bytes must die here: not read later through a view of them either.
        if (rb.region != Region::Activations || rb.bytes != out.bytes || in->type.dtype != n.outputs[0]->type.dtype || rb.last > i) continue;
        // A product's epilogue may not take the bytes of a value from outside its kernel: the
        // product is written (whole, on the GPU) before the epilogue reads its other operands.
        if (productGroups.count(i) && rb.first != i) continue;
        out.aliasOf = r;
        rb.last = std::max(rb.last, out.last);
        break;
      }
    }
    // A weight's bf16 cast (pass shadow-weights) writes into the state that keeps it between steps,
    // whose bytes its readers then read.
    for (const auto& n : g.nodes())
      if (n->has("shadow")) {
        const Value* copy = g.findValue(n->getString("shadow", ""));
        Buffer& cast = buf(n->outputs[0]);
        cast.aliasOf = copy;
        lastUse[copy] = std::max(lastUse.count(copy) ? lastUse[copy] : 0, cast.last); // its views' reads too
      }
    // An optimizer update (or a cache write) writes into its target when nothing reads the target after it.
    for (auto& [target, next] : g.updates) {
      if (next->kind != ValueKind::Result ||
          (next->producer->op != Op::SgdUpdate && next->producer->op != Op::AdamUpdate && next->producer->op != Op::KvCacheWrite))
        continue;
      Buffer& nb = buf(next);
      int producedAt = nb.first;
      if (lastUse.count(target) && lastUse[target] > producedAt) continue;
      if (nb.aliasOf || nb.region == Region::Grads || nb.bytes != buf(target).bytes) continue;
      nb.aliasOf = target;
    }
  }

  void placeActivations() {
    std::vector<Buffer*> roots;
    for (Buffer& b : plan.buffers)
      if (b.region == Region::Activations && !b.aliasOf) {
        roots.push_back(&b);
        plan.activationsUnshared += alignUp(b.bytes, plan.alignment);
      }
    // Largest first; ties by first use then name, so the plan is deterministic.
    std::sort(roots.begin(), roots.end(), [](const Buffer* a, const Buffer* b) {
      if (a->bytes != b->bytes) return a->bytes > b->bytes;
      if (a->first != b->first) return a->first < b->first;
      return a->value->name < b->value->name;
    });
    std::vector<Buffer*> placed;
    int64_t peak = 0;
    for (Buffer* b : roots) {
      std::vector<Buffer*> live;
      for (Buffer* p : placed)
        if (p->first <= b->last && b->first <= p->last) live.push_back(p);
      std::sort(live.begin(), live.end(), [](const Buffer* x, const Buffer* y) { return x->offset < y->offset; });
      int64_t offset = 0;
      for (Buffer* p : live) {
        if (p->offset >= offset + b->bytes) break; // the gap before p fits
        offset = std::max(offset, alignUp(p->offset + p->bytes, plan.alignment));
      }
      b->offset = offset;
      peak = std::max(peak, alignUp(offset + b->bytes, plan.alignment));
      placed.push_back(b);
    }
    plan.regionBytes[(int)Region::Activations] = peak;
  }

  void placeOthers() {
    std::vector<Buffer*> order;
    for (Buffer& b : plan.buffers) order.push_back(&b);
    auto key = [&](const Buffer* b) { // all-reduced gradients first, by bucket and operand
      auto it = bucketOrder.find(b->value);
      return it == bucketOrder.end() ? std::make_pair(std::numeric_limits<int>::max(), 0) : it->second;
    };
    std::stable_sort(order.begin(), order.end(), [&](const Buffer* a, const Buffer* b) { return key(a) < key(b); });
    for (Buffer* bp : order) {
      Buffer& b = *bp;
      if (b.region == Region::Activations || b.aliasOf) continue;
      int64_t& used = plan.regionBytes[(int)b.region];
      b.offset = used;
      used = alignUp(used + b.bytes, plan.alignment);
    }
    for (Buffer& b : plan.buffers) // aliases take their root's place
      if (b.aliasOf) {
        const Buffer& r = buf(root(b.value));
        b.region = r.region;
        b.offset = r.offset;
      }
  }
};

} // namespace

static_assert(kNumRegions == rt::kNumRegions, "the plan's regions are the runtime's, in its order");

const char* regionName(Region r) { return rt::kRegionNames[(int)r]; }

Expected<MemoryPlan> planMemory(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule, int64_t alignment,
                                const std::map<const ir::Value*, int>& laterReads, const std::set<const ir::Value*>& unstored,
                                const std::map<const ir::Value*, int>& earlierWrites) {
  Planner p{g, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  p.plan.alignment = alignment;
  if (Error e = p.collect(schedule, laterReads, earlierWrites)) return e;
  for (Buffer& b : p.plan.buffers)
    if (unstored.count(b.value)) b.bytes = 0;
  p.aliasInPlace();
  p.placeActivations();
  p.placeOthers();
  return p.plan;
}

Error checkPlan(const MemoryPlan& p) {
  std::map<const ir::Value*, const Buffer*> byValue;
  for (const Buffer& b : p.buffers) byValue[b.value] = &b;
  auto rootOf = [&](const Buffer* b) {
    while (b->aliasOf) b = byValue.at(b->aliasOf);
    return b;
  };
  for (const Buffer& b : p.buffers)
    if (b.offset < 0 || b.offset + b.bytes > p.regionBytes[(int)b.region])
      return makeError("%" + b.value->name + " does not fit its region " + regionName(b.region));
  // A buffer and its aliases share their root's place: each root holds its bytes from its
  // members' first step to their last. Sweeping the steps, the roots live at once must lie apart:
  // with those kept by offset, a new one need only be compared with its neighbours.
  struct Span {
    int first, last;
    int64_t offset, end;
    const Buffer* root;
  };
  std::map<const Buffer*, Span> spans;
  for (const Buffer& b : p.buffers) {
    if (!b.bytes) continue;
    const Buffer* r = rootOf(&b);
    auto [it, fresh] = spans.try_emplace(r, Span{b.first, b.last, b.offset, b.offset + b.bytes, r});
    Span& sp = it->second;
    if (fresh) continue;
    if (b.region != r->region || b.offset != r->offset)
      return makeError("%" + b.value->name + " is in place of %" + r->value->name + " but not at its place");
    sp.first = std::min(sp.first, b.first), sp.last = std::max(sp.last, b.last), sp.end = std::max(sp.end, b.offset + b.bytes);
  }
  std::vector<const Span*> order;
  for (auto& [r, sp] : spans) order.push_back(&sp);
  std::sort(order.begin(), order.end(), [](const Span* a, const Span* b) {
    return a->first != b->first ? a->first < b->first : a->root->value->name < b->root->value->name;
  });
  std::map<int64_t, const Span*> live[kNumRegions];                  // by offset
  std::multimap<int, const Span*> ending[kNumRegions];               // by last step
  auto clash = [](const Span* a, const Span* b) {
    return makeError("%" + a->root->value->name + " and %" + b->root->value->name + " are live together and overlap in " +
                     regionName(a->root->region));
  };
  for (const Span* sp : order) {
    int r = (int)sp->root->region;
    while (!ending[r].empty() && ending[r].begin()->first < sp->first) {
      live[r].erase(ending[r].begin()->second->offset);
      ending[r].erase(ending[r].begin());
    }
    auto next = live[r].lower_bound(sp->offset);
    if (next != live[r].end() && next->second->offset < sp->end) return clash(next->second, sp);
    if (next != live[r].begin() && std::prev(next)->second->end > sp->offset) return clash(std::prev(next)->second, sp);
    live[r][sp->offset] = sp;
    ending[r].emplace(sp->last, sp);
  }
  return Error::success();
}

} // namespace sgc::codegen

namespace sgc::codegen {

Error checkLiveness(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule, const MemoryPlan& p) {
  std::map<const ir::Value*, const Buffer*> byValue;
  for (const Buffer& b : p.buffers) byValue[b.value] = &b;
  for (int i = 0; i < (int)schedule.size(); ++i)
    for (const ir::Node* n : schedule[i]) {
      std::vector<const ir::Value*> touched(n->inputs.begin(), n->inputs.end());
      touched.insert(touched.end(), n->outputs.begin(), n->outputs.end());
      for (const ir::Value* v : touched) {
        auto it = v && v->kind == ValueKind::Result ? byValue.find(v) : byValue.end();
        if (it == byValue.end() || !it->second->bytes) continue;
        if (it->second->first > i || it->second->last < i)
          return makeError("%" + v->name + " is used at step " + std::to_string(i) + " of " + g.name + " but live only over [" +
                           std::to_string(it->second->first) + ", " + std::to_string(it->second->last) + "]");
      }
    }
  return Error::success();
}

std::string printPlan(const ir::Graph& g, const MemoryPlan& p) {
  char line[512];
  std::string s;
  snprintf(line, sizeof line, "memory plan @%s: %d steps, alignment %lld\n", g.name.c_str(), p.numSteps, (long long)p.alignment);
  s += line;
  int64_t total = 0;
  for (int r = 0; r < kNumRegions; ++r) {
    total += p.regionBytes[r];
    snprintf(line, sizeof line, "  region %-12s %12lld bytes", regionName((Region)r), (long long)p.regionBytes[r]);
    s += line;
    if ((Region)r == Region::Activations) {
      snprintf(line, sizeof line, " (peak; %lld without reuse)", (long long)p.activationsUnshared);
      s += line;
    }
    s += "\n";
  }
  snprintf(line, sizeof line, "  total %lld bytes\n", (long long)total);
  s += line;
  for (const Buffer& b : p.buffers) {
    snprintf(line, sizeof line, "  %%%-24s %-12s offset %-10lld bytes %-10lld live [%d, %d]", b.value->name.c_str(),
             regionName(b.region), (long long)b.offset, (long long)b.bytes, b.first, b.last);
    s += line;
    if (b.aliasOf) s += "  in place of %" + b.aliasOf->name;
    s += "\n";
  }
  return s;
}

} // namespace sgc::codegen
