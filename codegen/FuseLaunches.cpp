#include "codegen/FuseLaunches.h"

#include "codegen/kir/LowerOps.h"

#include <algorithm>
#include <set>

namespace sgc::codegen {
namespace {

constexpr size_t kMostParts = 15;    ///< kernels one horizontal launch runs
static_assert(kMostParts <= kir::kMostHorizontalParts);
constexpr size_t kMostBuffers = 128; ///< its pointer arguments, far within a kernel's 4 KiB of parameters
constexpr size_t kMostAhead = 128;   ///< launches a run looks ahead for its parts

/// The bytes a tensor occupies: its region and [begin, end).
struct Span {
  int64_t region = 0, begin = 0, end = 0;
  bool overlaps(const Span& o) const { return region == o.region && begin < o.end && o.begin < end; }
};

/// A tensor a launch reads or writes.
struct Access {
  int tensor;
  bool written;
};

/// Everything a launch may touch on a GPU or a CPU: its kernel's buffers, its GPU form's, its
/// GEMM's operands, GELU outputs and epilogue.
std::vector<Access> accesses(const nlohmann::json& l, const std::vector<kir::Kernel>& kernels) {
  std::vector<Access> out;
  auto call = [&](const nlohmann::json& c) {
    int index = c.at("kernel").get<int>();
    if (index < 0 || index >= (int)kernels.size()) return;
    std::vector<int> args = c.at("args").get<std::vector<int>>();
    for (size_t i = 0; i < args.size() && i < kernels[index].buffers.size(); ++i) out.push_back({args[i], kernels[index].buffers[i].written});
  };
  call(l);
  if (l.contains("gpu"))
    for (const nlohmann::json& c : l["gpu"]) call(c);
  if (l.contains("epilogue")) call(l["epilogue"]);
  if (l.contains("gemm")) {
    const nlohmann::json& g = l["gemm"];
    out.push_back({g.at("a").get<int>(), false});
    out.push_back({g.at("b").get<int>(), false});
    out.push_back({g.at("y").get<int>(), true});
    if (g.contains("bias")) out.push_back({g["bias"].get<int>(), false});
    if (g.contains("gelu"))
      for (const char* key : {"result", "aux", "bias"})
        if (int id = g["gelu"].at(key).get<int>(); id >= 0) out.push_back({id, key[0] != 'b'});
  }
  return out;
}

/// Whether launch `l` is an elementwise kernel a run may take: one parallel loop of stores,
/// the same kernel on a GPU as on a CPU (no GPU form, GEMM or epilogue), 256 threads a block,
/// and at most kir::kMostPartBlocks of them, one a vector. A larger kernel fills the GPU alone:
/// on the H200 joining those (the MLP's 16M-parameter updates and GELU gradients) cost 0.1 ms a
/// step, joining up to a GPT-2 layer's weights (2.4M parameters) saved 0.3 ms (bench/RESULTS.md).
bool joinable(const nlohmann::json& l, const std::vector<kir::Kernel>& kernels) {
  if (l.contains("gpu") || l.contains("gemm") || l.contains("epilogue") || l.contains("threads") || l.contains("collective")) return false;
  int index = l.at("kernel").get<int>();
  if (index < 0 || index >= (int)kernels.size() || l.at("serial").get<bool>()) return false;
  const kir::Kernel& k = kernels[index];
  return kir::isHorizontalPart(k) && k.body->extent / kir::vectorWidthFor(k) <= kir::kMostPartBlocks * k.threads;
}

} // namespace

std::vector<LaunchRun> elementwiseRuns(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels) {
  std::vector<Span> spans;
  for (const nlohmann::json& t : tensors) {
    int64_t offset = t.at("offset").get<int64_t>();
    spans.push_back({t.at("region").get<int64_t>(), offset, offset + t.at("bytes").get<int64_t>()});
  }
  std::vector<std::vector<Access>> touched;
  for (const nlohmann::json& l : launches) touched.push_back(accesses(l, kernels));
  // Whether launches a and b may run in either order: neither writes bytes the other touches
  // (a tensor both only read is shared).
  auto independent = [&](size_t a, size_t b) {
    for (const Access& x : touched[a])
      for (const Access& y : touched[b])
        if ((x.written || y.written) && spans.at(x.tensor).overlaps(spans.at(y.tensor))) return false;
    return true;
  };
  std::set<size_t> skippedByGemm; // launches a GEMM's GELU epilogue may make unneeded
  for (const nlohmann::json& l : launches)
    if (l.contains("gemm") && l["gemm"].contains("gelu")) skippedByGemm.insert(l["gemm"]["gelu"]["skip"].get<int64_t>());
  std::vector<bool> candidate(launches.size()), taken(launches.size(), false);
  for (size_t i = 0; i < launches.size(); ++i) candidate[i] = joinable(launches[i], kernels) && !skippedByGemm.count(i);

  // A run starts at a candidate not yet taken and takes later candidates that may move up
  // to it: each independent of the run's parts (they run as one kernel) and of every launch it
  // moves ahead of. A collective ends the lookahead (its waits follow the launch order).
  std::vector<LaunchRun> runs;
  for (size_t i = 0; i < launches.size(); ++i) {
    if (!candidate[i] || taken[i]) continue;
    std::vector<size_t> parts{i}, passed;
    size_t buffers = touched[i].size();
    for (size_t j = i + 1; j < launches.size() && j <= i + kMostAhead && parts.size() < kMostParts; ++j) {
      if (launches[j].contains("collective")) break;
      auto free = [&](size_t other) { return independent(j, other); };
      bool joins = candidate[j] && !taken[j] && launches[j].at("forward") == launches[i].at("forward") &&
                   buffers + touched[j].size() <= kMostBuffers && std::all_of(parts.begin(), parts.end(), free) &&
                   std::all_of(passed.begin(), passed.end(), free);
      if (joins) {
        parts.push_back(j);
        buffers += touched[j].size();
      } else {
        passed.push_back(j);
      }
    }
    if (parts.size() < 2) continue;
    std::vector<kir::HorizontalPart> kernelParts;
    for (size_t j : parts) {
      taken[j] = true;
      const nlohmann::json& l = launches[j];
      std::vector<std::string> names;
      for (int id : l.at("args").get<std::vector<int>>()) names.push_back(tensors.at(id).at("name").get<std::string>());
      kernelParts.push_back({&kernels[l.at("kernel").get<int>()], std::move(names)});
    }
    runs.push_back({parts, kir::horizontal("sgc_h" + std::to_string(i), kernelParts)});
  }
  return runs;
}

} // namespace sgc::codegen
