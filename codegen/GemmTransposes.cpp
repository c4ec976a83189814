// Transposes folded into GEMM flags (see GemmTransposes.h).
#include "codegen/GemmTransposes.h"

#include "codegen/kir/LowerOps.h"

#include <algorithm>

namespace sgc::codegen {
namespace {

/// Whether `n` is a Transpose swapping the last two dims and keeping the others in place.
bool swapsLastTwo(const ir::Node& n) {
  if (n.op != ir::Op::Transpose || !n.has("perm")) return false;
  std::vector<int64_t> perm = n.getInts("perm");
  size_t r = perm.size();
  if (r < 2 || perm[r - 2] != (int64_t)r - 1 || perm[r - 1] != (int64_t)r - 2) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != (int64_t)i) return false;
  return true;
}

} // namespace

AbsorbedTransposes absorbTransposes(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule) {
  std::map<const ir::Node*, int> position;
  std::map<const ir::Node*, bool> gemmHead; // product heads cuBLASLt runs
  for (int i = 0; i < (int)schedule.size(); ++i) {
    for (const ir::Node* n : schedule[i]) position[n] = i;
    const ir::Node& head = *schedule[i][0];
    if ((head.op == ir::Op::MatMul || head.op == ir::Op::Gemm) && kir::gemmShape(schedule[i])) gemmHead[&head] = true;
  }
  std::map<const ir::Value*, std::vector<const ir::Node*>> consumers;
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->inputs)
      if (v) consumers[v].push_back(n.get());
  std::set<const ir::Value*> escaping(g.outputs.begin(), g.outputs.end());
  for (auto& u : g.updates) escaping.insert(u.second);

  AbsorbedTransposes out;
  for (const auto& group : schedule) {
    const ir::Node& t = *group[0];
    if (group.size() != 1 || !swapsLastTwo(t) || !t.outputs[0] || escaping.count(t.outputs[0])) continue;
    const ir::Value *v = t.outputs[0], *x = t.input(0);
    int lastRead = -1;
    bool onlyOperands = !consumers[v].empty();
    for (const ir::Node* c : consumers[v]) {
      bool operand = gemmHead.count(c) && (c->inputs.size() < 3 || c->inputs[2] != v);
      onlyOperands = onlyOperands && operand;
      lastRead = std::max(lastRead, position[c]);
    }
    if (!onlyOperands) continue;
    bool kept = true; // x keeps its bytes through the last GEMM (the plan keeps results live)
    for (auto& [target, next] : g.updates)
      if (target == x && (!next->producer || position[next->producer] <= lastRead)) kept = false;
    if (!kept) continue;
    out.skipped.insert(&t);
    out.source[v] = x;
    out.lastRead[x] = std::max(out.lastRead.count(x) ? out.lastRead[x] : -1, lastRead);
  }
  return out;
}

} // namespace sgc::codegen
