// The kernel schedule's pieces that the program builder also uses (internal to codegen/):
// a group of nodes that runs as one kernel, which nodes read each value, and the nodes that
// are matrix products or refreshes of a weight's bf16 copy. The schedule itself is
// kernelSchedule (Program.h), built in Schedule.cpp.
#pragma once
#include "ir/Graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace sgc::codegen {

inline bool isProduct(const ir::Node& n) {
  return (n.op == ir::Op::Gemm || n.op == ir::Op::MatMul) && n.input(0)->type.rank() >= 2 && n.input(1)->type.rank() >= 2;
}

using Group = std::vector<const ir::Node*>;
using Consumers = std::map<const ir::Value*, std::set<const ir::Node*>>;

/// Which nodes read each value, and which values outlive the step (outputs, updates).
struct Readers {
  Consumers of;
  std::set<const ir::Value*> escaping;
  explicit Readers(const ir::Graph& g) : escaping(g.outputs.begin(), g.outputs.end()) {
    for (auto& u : g.updates) escaping.insert(u.second);
    for (const auto& n : g.nodes())
      for (const ir::Value* v : n->inputs)
        if (v) of[v].insert(n.get());
  }
  /// Whether a node outside `group` reads v, or v outlives the step.
  bool outside(const ir::Value* v, const Group& group) {
    return escaping.count(v) || std::any_of(of[v].begin(), of[v].end(), [&](const ir::Node* n) { return !std::count(group.begin(), group.end(), n); });
  }
};

/// A weight's cast into its kept bf16 copy (ShadowWeights.h): a kernel alone, which the runtime
/// runs before a step when the copy may be stale, never as part of one.
inline bool isRefresh(const ir::Node& n) { return n.has("shadow"); }
inline bool hasRefresh(const Group& g) { return std::any_of(g.begin(), g.end(), [](const ir::Node* n) { return isRefresh(*n); }); }

} // namespace sgc::codegen
