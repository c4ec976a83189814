#include "codegen/FuseLaunches.h"

#include "codegen/kir/LowerOps.h"

#include <algorithm>
#include <string>
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

/// The tensors one kernel call (a launch's kernel, a GPU form's call, an epilogue) touches.
void callAccesses(const nlohmann::json& c, const std::vector<kir::Kernel>& kernels, std::vector<Access>& out) {
  int index = c.at("kernel").get<int>();
  if (index < 0 || index >= (int)kernels.size()) return;
  std::vector<int> args = c.at("args").get<std::vector<int>>();
  for (size_t i = 0; i < args.size() && i < kernels[index].buffers.size(); ++i) out.push_back({args[i], kernels[index].buffers[i].written});
}

/// Everything a launch may touch on a GPU or a CPU: its kernel's buffers, its GPU form's, its
/// GEMM's operands, GELU outputs and epilogue, its collective's tensors.
std::vector<Access> accesses(const nlohmann::json& l, const std::vector<kir::Kernel>& kernels) {
  std::vector<Access> out;
  callAccesses(l, kernels, out);
  if (l.contains("gpu"))
    for (const nlohmann::json& c : l["gpu"]) callAccesses(c, kernels, out);
  if (l.contains("epilogue")) callAccesses(l["epilogue"], kernels, out);
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
  if (l.contains("collective")) // read and written, in place or not
    for (int id : l["collective"].at("tensors").get<std::vector<int>>()) out.push_back({id, true});
  return out;
}

/// Whether launch `l` is an elementwise kernel a run may take: one parallel loop of stores,
/// the same kernel on a GPU as on a CPU (no GPU form, GEMM or epilogue), 256 threads a block,
/// and at most kir::kMostPartBlocks of them, one a vector. A larger kernel fills the GPU alone:
/// on the H200 joining those (the MLP's 16M-parameter updates and GELU gradients) cost 0.1 ms a
/// step, joining up to a GPT-2 layer's weights (2.4M parameters) saved 0.3 ms (bench/RESULTS.md).
std::vector<Span> spansOf(const nlohmann::json& tensors) {
  std::vector<Span> spans;
  for (const nlohmann::json& t : tensors) {
    int64_t offset = t.at("offset").get<int64_t>();
    spans.push_back({t.at("region").get<int64_t>(), offset, offset + t.at("bytes").get<int64_t>()});
  }
  return spans;
}

/// Whether two sets of accesses may run in either order: neither writes bytes the other touches
/// (a tensor both only read is shared).
bool independent(const std::vector<Access>& a, const std::vector<Access>& b, const std::vector<Span>& spans) {
  for (const Access& x : a)
    for (const Access& y : b)
      if ((x.written || y.written) && spans.at(x.tensor).overlaps(spans.at(y.tensor))) return false;
  return true;
}

/// The tensor names of a call's arguments, as a horizontal part names them.
std::vector<std::string> argNames(const nlohmann::json& call, const nlohmann::json& tensors) {
  std::vector<std::string> names;
  for (int id : call.at("args").get<std::vector<int>>()) names.push_back(tensors.at(id).at("name").get<std::string>());
  return names;
}

bool joinable(const nlohmann::json& l, const std::vector<kir::Kernel>& kernels) {
  if (l.contains("gpu") || l.contains("gemm") || l.contains("epilogue") || l.contains("threads") || l.contains("collective") ||
      l.contains("refresh")) // run alone, before a step, and only when its copy is stale
    return false;
  int index = l.at("kernel").get<int>();
  if (index < 0 || index >= (int)kernels.size() || l.at("serial").get<bool>()) return false;
  const kir::Kernel& k = kernels[index];
  return kir::isElementwisePart(k) && k.body->extent / kir::vectorWidthFor(k) <= kir::kMostPartBlocks * k.threads;
}

} // namespace

std::set<int64_t> geluSkips(const nlohmann::json& launches) {
  std::set<int64_t> skipped;
  for (const nlohmann::json& l : launches)
    if (l.contains("gemm") && l["gemm"].contains("gelu")) skipped.insert(l["gemm"]["gelu"]["skip"].get<int64_t>());
  return skipped;
}

std::vector<LaunchRun> elementwiseRuns(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels) {
  std::vector<Span> spans = spansOf(tensors);
  std::vector<std::vector<Access>> touched;
  for (const nlohmann::json& l : launches) touched.push_back(accesses(l, kernels));
  std::set<int64_t> skippedByGemm = geluSkips(launches);
  std::vector<bool> candidate(launches.size()), taken(launches.size(), false);
  for (size_t i = 0; i < launches.size(); ++i) candidate[i] = joinable(launches[i], kernels) && !skippedByGemm.count((int64_t)i);

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
      auto free = [&](size_t other) { return independent(touched[j], touched[other], spans); };
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
      kernelParts.push_back({&kernels[launches[j].at("kernel").get<int>()], argNames(launches[j], tensors)});
    }
    runs.push_back({parts, kir::horizontal("sgc_h" + std::to_string(i), kernelParts)});
  }
  return runs;
}

std::optional<ZeroRun> zeroRun(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels) {
  auto backward = std::find_if(launches.begin(), launches.end(), [](const nlohmann::json& l) { return !l.at("forward").get<bool>(); });
  if (backward == launches.end()) return std::nullopt;
  ZeroRun run;
  run.at = (size_t)(backward - launches.begin());
  std::vector<Span> spans = spansOf(tensors);
  std::vector<std::vector<Access>> touched;
  for (size_t i = run.at; i < launches.size(); ++i) touched.push_back(accesses(launches[i], kernels));
  std::vector<kir::HorizontalPart> parts;
  for (size_t i = run.at; i < launches.size(); ++i) {
    if (!launches[i].contains("gpu") || launches[i].at("forward").get<bool>()) continue; // an eval step runs the forward's alone
    const nlohmann::json& form = launches[i]["gpu"];
    std::vector<Access> before; // what the form's calls before this one touch
    for (size_t c = 0; c < form.size(); ++c) {
      const kir::Kernel& k = kernels.at(form[c].at("kernel").get<int>());
      std::vector<Access> mine;
      callAccesses(form[c], kernels, mine);
      bool free = kir::isZeroing(k) && independent(mine, before, spans);
      for (size_t j = run.at; free && j < i; ++j) free = independent(mine, touched[j - run.at], spans);
      if (free) {
        run.calls.push_back({i, c});
        parts.push_back({&k, argNames(form[c], tensors)});
      }
      before.insert(before.end(), mine.begin(), mine.end());
    }
  }
  if (run.calls.size() < 2) return std::nullopt;
  // One launch while the parts' pointers and blocks fit, else the next.
  std::vector<kir::HorizontalPart> launch;
  int64_t blocks = 0;
  size_t buffers = 0;
  auto flush = [&] {
    if (!launch.empty()) run.kernels.push_back(kir::horizontal("sgc_z" + std::to_string(run.kernels.size()), launch));
    launch.clear(), blocks = 0, buffers = 0;
  };
  for (const kir::HorizontalPart& part : parts) {
    int64_t own = kir::blocksAsPart(*part.kernel);
    if (blocks + own > kir::kMostGridBlocks || buffers + 1 > kMostBuffers) flush();
    launch.push_back(part), blocks += own, ++buffers;
  }
  flush();
  return run;
}

std::vector<CallRun> callRuns(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels) {
  std::vector<Span> spans = spansOf(tensors);
  auto formOf = [&](size_t i) { return launches[i].contains("gpu") ? launches[i]["gpu"] : nlohmann::json::array(); };
  std::vector<std::vector<std::vector<Access>>> calls(launches.size()); // each form call's accesses
  std::vector<std::vector<bool>> taken(launches.size());
  for (size_t i = 0; i < launches.size(); ++i)
    for (const nlohmann::json& c : formOf(i)) {
      calls[i].emplace_back();
      callAccesses(c, kernels, calls[i].back());
      taken[i].push_back(false);
    }
  auto candidate = [&](size_t i, size_t c) {
    return !taken[i][c] && kir::isHorizontalPart(kernels.at(launches[i]["gpu"][c].at("kernel").get<int>()));
  };
  auto blocksOf = [&](size_t i, size_t c) { return kir::blocksAsPart(kernels.at(launches[i]["gpu"][c].at("kernel").get<int>())); };
  auto sharedOf = [&](size_t i, size_t c) { return kir::sharedBytes(kernels.at(launches[i]["gpu"][c].at("kernel").get<int>())); };
  std::vector<CallRun> runs;
  for (size_t i = 0; i < launches.size(); ++i)
    for (size_t ci = 0; ci < calls[i].size(); ++ci) {
      if (!candidate(i, ci)) continue;
      CallRun run;
      run.calls.push_back({i, ci});
      std::vector<Access> parts = calls[i][ci], passed;
      int64_t blocks = blocksOf(i, ci), shared = sharedOf(i, ci);
      for (size_t c = ci + 1; c < calls[i].size(); ++c) passed.insert(passed.end(), calls[i][c].begin(), calls[i][c].end());
      for (size_t j = i + 1; j < launches.size() && j <= i + kMostAhead && run.calls.size() < kMostParts; ++j) {
        if (launches[j].contains("collective")) break; // its waits follow the launch order
        bool alike = launches[j].contains("gpu") && launches[j].at("forward") == launches[i].at("forward");
        std::vector<Access> before; // launch j's calls that stay ahead of a later one of its own
        for (size_t cj = 0; cj < calls[j].size(); ++cj) {
          const std::vector<Access>& mine = calls[j][cj];
          bool joins = alike && run.calls.size() < kMostParts && candidate(j, cj) && parts.size() + mine.size() <= kMostBuffers &&
                       blocks + blocksOf(j, cj) <= kir::kMostGridBlocks && shared + sharedOf(j, cj) <= kir::kMostStaticShared &&
                       independent(mine, parts, spans) &&
                       independent(mine, passed, spans) && independent(mine, before, spans);
          if (joins) {
            run.calls.push_back({j, cj});
            parts.insert(parts.end(), mine.begin(), mine.end());
            blocks += blocksOf(j, cj), shared += sharedOf(j, cj);
          } else {
            before.insert(before.end(), mine.begin(), mine.end());
          }
        }
        passed.insert(passed.end(), before.begin(), before.end());
        if (!launches[j].contains("gpu")) {
          std::vector<Access> all = accesses(launches[j], kernels);
          passed.insert(passed.end(), all.begin(), all.end());
        }
      }
      if (run.calls.size() < 2) continue;
      std::vector<kir::HorizontalPart> kernelParts;
      for (auto [l, c] : run.calls) {
        taken[l][c] = true;
        const nlohmann::json& call = launches[l]["gpu"][c];
        kernelParts.push_back({&kernels.at(call.at("kernel").get<int>()), argNames(call, tensors)});
      }
      run.kernel = kir::horizontal("sgc_r" + std::to_string(i) + "_" + std::to_string(ci), kernelParts);
      runs.push_back(std::move(run));
    }
  return runs;
}

} // namespace sgc::codegen
