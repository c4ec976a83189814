// cuBLASLt's epilogues (see GemmEpilogues.h).
#include "codegen/GemmEpilogues.h"

#include "codegen/MemoryPlan.h"

namespace sgc::codegen {

const ir::Value* gemmBias(const std::vector<const ir::Node*>& group, const kir::GemmShape& s) {
  const ir::Value* bias = nullptr;
  const ir::Node& head = *group[0];
  if (group.size() == 1 && head.op == ir::Op::Gemm && head.getFloat("alpha", 1) == 1 && head.getFloat("beta", 1) == 1) bias = head.input(2);
  if (group.size() == 2 && head.op == ir::Op::MatMul && group[1]->op == ir::Op::Add) {
    const ir::Value *r = head.outputs[0], *x = group[1]->input(0), *y = group[1]->input(1);
    bias = x == r ? y : y == r ? x : nullptr;
    if (bias == r) bias = nullptr;
  }
  if (!bias || bias->type.dtype != s.y->type.dtype || bias->type.staticNumel() != s.n) return nullptr;
  std::vector<int64_t> shape = bias->type.shape();
  return !shape.empty() && shape.back() == s.n ? bias : nullptr;
}

namespace {

bool isTanhGelu(const ir::Node& n) { return n.op == ir::Op::Gelu && n.getString("approximate", "none") == "tanh"; }

/// The GELU a product group ends in: [product, (bias Add), tanh Gelu].
std::optional<GemmGelu> geluInGroup(const std::vector<const ir::Node*>& group, const kir::GemmShape& s, size_t at) {
  const ir::Node& last = *group.back();
  std::vector<const ir::Node*> before(group.begin(), group.end() - 1);
  const ir::Value* bias = before.size() == 1 ? nullptr : gemmBias(before, s);
  if (isTanhGelu(last) && (before.size() == 1 || bias)) return GemmGelu{at, std::nullopt, last.outputs[0], nullptr, bias};
  return std::nullopt;
}

} // namespace

GemmGelus fuseGemmGelus(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule) {
  std::map<const ir::Value*, std::vector<const ir::Node*>> readers;
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->inputs)
      if (v) readers[v].push_back(n.get());
  std::map<const ir::Node*, size_t> groupOf;
  for (size_t i = 0; i < schedule.size(); ++i)
    for (const ir::Node* n : schedule[i]) groupOf[n] = i;
  // A Gelu's kernel: the Gelu, then views of its result (a reshape the next product reads), of
  // which the kernel stores the last alone. That result has the GELU's elements in their order.
  auto geluKernel = [&](size_t j) -> const ir::Value* {
    const auto& group = schedule[j];
    if (!isTanhGelu(*group[0])) return nullptr;
    for (size_t k = 1; k < group.size(); ++k)
      if (!isView(*group[k]) || group[k]->input(0) != group[k - 1]->outputs[0]) return nullptr;
    for (size_t k = 0; k + 1 < group.size(); ++k)
      for (const ir::Node* r : readers[group[k]->outputs[0]])
        if (groupOf.at(r) != j) return nullptr;
    return group.back()->outputs[0];
  };
  GemmGelus out;
  for (size_t i = 0; i < schedule.size(); ++i) {
    const auto& group = schedule[i];
    if (group[0]->op != ir::Op::MatMul && group[0]->op != ir::Op::Gemm) continue;
    auto s = kir::gemmShape(group);
    if (!s) continue;
    if (group.size() > 1)
      if (auto f = geluInGroup(group, *s, i)) {
        out.fused.push_back(*f);
        continue;
      }
    if (group.size() > 1 && !gemmBias(group, *s)) continue; // a lone GELU's product adds at most a bias
    // The product's result, and the views of it (kernels of their own), for the Gelu to read.
    const ir::Value* y = group.back()->outputs[0];
    std::vector<const ir::Value*> same{y};
    for (size_t k = 0; k < same.size(); ++k)
      for (const ir::Node* r : readers[same[k]])
        if (isView(*r) && schedule[groupOf.at(r)].size() == 1) same.push_back(r->outputs[0]);
    std::optional<GemmGelu> found;
    for (const ir::Value* v : same)
      for (const ir::Node* r : readers[v]) {
        size_t j = groupOf.at(r);
        const ir::Value* result = j > i && !found ? geluKernel(j) : nullptr;
        if (result && schedule[j][0] == r && result->type.dtype == y->type.dtype && result->type.staticNumel() == y->type.staticNumel())
          found = GemmGelu{i, j, result, y, group.size() > 1 ? gemmBias(group, *s) : nullptr}; // y stays (the aux output); others may read it
      }
    if (found) out.fused.push_back(*found);
  }
  for (const GemmGelu& f : out.fused)
    if (f.gelu) out.earlierWrites[f.result] = (int)f.product;
  return out;
}

} // namespace sgc::codegen
