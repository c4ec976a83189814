// The program builder (see Program.h).
#include "codegen/Program.h"

#include "codegen/FuseLaunches.h"
#include "codegen/GemmEpilogues.h"
#include "codegen/GemmTransposes.h"
#include "codegen/Schedule.h"
#include "codegen/kir/AttentionGeometry.h"

#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"
#include "ir/Text.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/Support/BLAKE3.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace sgc::codegen {

namespace {

const char* kindName(ir::ValueKind k) {
  switch (k) {
  case ir::ValueKind::Input: return "input";
  case ir::ValueKind::Param: return "param";
  case ir::ValueKind::State: return "state";
  case ir::ValueKind::Const: return "const";
  default: return "result";
  }
}

/// Nodes the loss depends on: what a forward-only step runs.
std::set<const ir::Node*> forwardNodes(const ir::Graph& g) {
  std::set<const ir::Node*> seen;
  std::vector<const ir::Value*> work(g.outputs.begin(), g.outputs.end());
  while (!work.empty()) {
    const ir::Value* v = work.back();
    work.pop_back();
    if (!v || !v->producer || !seen.insert(v->producer).second) continue;
    for (const ir::Value* in : v->producer->inputs) work.push_back(in);
  }
  return seen;
}

/// A launch of kernel `index` over its buffers; adds the bytes it moves to `bytes`.
nlohmann::json launchJson(const kir::Kernel& k, int index, const std::map<std::string, int>& tensorId, int64_t& bytes) {
  nlohmann::json args = nlohmann::json::array();
  for (const kir::BufferArg& a : k.buffers) {
    args.push_back(tensorId.at(a.name));
    bytes += (int64_t)a.numel * (int64_t)ir::dtypeSize(a.dtype) * (a.written ? 2 : 1);
  }
  nlohmann::json launch = {{"kernel", index}, {"serial", kir::isSerial(k)}, {"extent", kir::isSerial(k) ? 1 : kir::launchExtent(k)}, {"args", args}};
  if (int width = kir::vectorWidthFor(k); width > 1) launch["vector"] = width; // the threads the GPU needs: extent / width
  if (k.threads != 256) launch["threads"] = k.threads;                          // GPU threads per block
  if (int64_t shared = kir::dynamicSharedBytes(k)) launch["shared"] = shared;   // GPU dynamic shared memory a block
  return launch;
}

/// Optimizer state of a ZeRO-1 shard (each rank holds its part of the whole): state -> the world size.
std::map<const ir::Value*, int64_t> shardedState(const ir::Graph& g) {
  std::map<const ir::Value*, int64_t> out;
  for (auto& n : g.nodes()) {
    if (n->op != ir::Op::AdamUpdate && n->op != ir::Op::SgdUpdate) continue;
    const ir::Node* from = n->inputs[0]->producer;
    if (!from || from->op != ir::Op::Shard) continue;
    for (size_t i : n->op == ir::Op::AdamUpdate ? std::vector<size_t>{2, 3} : std::vector<size_t>{4})
      if (i < n->inputs.size() && n->inputs[i]) out[n->inputs[i]] = from->getInt("world", 1);
  }
  return out;
}

/// The values an integer input may hold where the nodes that read it index with it: a loss's class
/// labels [0, C) (and its ignore_index), a gather's indices [-d, d). The runtime refuses others as
/// they are set; kernels would clamp them. Nothing when no reader indexes.
std::optional<nlohmann::json> indexRange(const ir::Graph& g, const ir::Value* v) {
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  std::optional<int64_t> ignore;
  bool indexes = false;
  auto within = [&](int64_t a, int64_t b) { lo = std::max(lo, a), hi = std::min(hi, b), indexes = true; };
  for (const auto& n : g.nodes())
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (n->inputs[i] != v || i != 1) continue;
      const ir::Type& data = n->inputs[0]->type;
      switch (n->op) {
      case ir::Op::SoftmaxCrossEntropyLoss:
      case ir::Op::NegativeLogLikelihoodLoss:
      case ir::Op::SceLossGrad:
      case ir::Op::NllLossGrad:
        within(0, data.shape()[1] - 1);
        if (n->has("ignore_index")) ignore = n->getInt("ignore_index", 0);
        break;
      case ir::Op::Gather: {
        int64_t axis = n->getInt("axis", 0), d = data.shape()[axis < 0 ? axis + data.rank() : axis];
        within(-d, d - 1);
        break;
      }
      default: break;
      }
    }
  if (!indexes) return std::nullopt;
  nlohmann::json r = {{"min", lo}, {"max", hi}};
  if (ignore) r["ignore"] = *ignore;
  return r;
}

bool isCollective(ir::Op op) { return op == ir::Op::AllReduce || op == ir::Op::ReduceScatter || op == ir::Op::AllGather || op == ir::Op::Shard; }

/// A collective launch: no kernel (see runtime/Program.h). An all-reduce works on its results (in
/// place); the ZeRO-1 ones from their input to their result.
nlohmann::json collectiveJson(const ir::Node& n, const std::map<std::string, int>& tensorId) {
  nlohmann::json tensors = nlohmann::json::array();
  if (n.op != ir::Op::AllReduce) tensors.push_back(tensorId.at(n.inputs[0]->name));
  for (const ir::Value* v : n.outputs) tensors.push_back(tensorId.at(v->name));
  const char* op = n.op == ir::Op::AllReduce ? "allreduce" : n.op == ir::Op::ReduceScatter ? "reduce_scatter"
                   : n.op == ir::Op::AllGather ? "all_gather" : "shard";
  return {{"kernel", -1}, {"serial", true}, {"extent", 0}, {"args", nlohmann::json::array()},
          {"collective", {{"op", op}, {"average", n.getInt("average", 1) != 0}, {"world", n.getInt("world", 0)}, {"tensors", tensors}}}};
}

/// An all-reduce's copies (kernel k copies operand k to result k), but those the plan put in place.
std::vector<kir::Kernel> copiesNotInPlace(const ir::Node& n, const MemoryPlan& plan, std::vector<kir::Kernel> copies) {
  std::vector<kir::Kernel> kept;
  for (size_t k = 0; k < copies.size(); ++k) {
    bool inPlace = false;
    for (const Buffer& b : plan.buffers) inPlace = inPlace || (b.value == n.outputs[k] && b.aliasOf == n.inputs[k]);
    if (!inPlace) kept.push_back(std::move(copies[k]));
  }
  return kept;
}

nlohmann::json gemmJson(const kir::GemmShape& g, const std::map<std::string, int>& tensorId) {
  return {{"a", tensorId.at(g.a->name)}, {"b", tensorId.at(g.b->name)}, {"y", tensorId.at(g.y->name)},
          {"m", g.m}, {"n", g.n}, {"k", g.k}, {"batch", g.batch}, {"stride_a", g.strideA}, {"stride_b", g.strideB},
          {"trans_a", g.transA}, {"trans_b", g.transB}, {"dtype", std::string(ir::dtypeSafetensorsName(g.y->type.dtype))}};
}

std::string hexHash(const ir::Graph& g, const std::string& options) {
  llvm::BLAKE3 hash; // not SHA-256: GPT-2's 500 MB of weights in 0.16 s, not 2.1 s
  // The graph's text without its tensors' bytes, then the bytes of the parameters and constants in
  // their order (state starts at zero: its type says all), so that large weights and a large
  // cache are never printed as text.
  ir::PrintOptions elided;
  elided.elideDataAbove = 0;
  hash.update(ir::print(g, elided));
  for (const auto* list : {&g.params, &g.consts})
    for (const ir::Value* v : *list) {
      hash.update(v->name);
      hash.update(llvm::ArrayRef<uint8_t>(v->data->bytes.data(), v->data->bytes.size()));
    }
  hash.update(options);
  hash.update("sgc 0.1.0; LLVM " LLVM_VERSION_STRING);
  auto digest = hash.final();
  std::string hex;
  for (uint8_t b : digest) {
    static const char* d = "0123456789abcdef";
    hex += d[b >> 4];
    hex += d[b & 15];
  }
  return hex;
}

/// A group that mergeRowGroups formed, in its parts.
std::optional<kir::RowGroup> rowGroup(const Group& group, Readers& readers) {
  auto row = std::find_if(group.begin(), group.end(), [](const ir::Node* n) { return kir::isRowOp(*n); });
  if (group.size() < 2 || row == group.end()) return std::nullopt;
  kir::RowGroup g{Group(group.begin(), row), *row, Group(row + 1, group.end()), readers.outside((*row)->outputs[0], group), {}};
  for (const ir::Node* n : g.epilogue) g.storeEpilogue.push_back(n == g.epilogue.back() || readers.outside(n->outputs[0], group));
  g.storePrologue = !g.prologue.empty() && readers.outside(g.prologue.back()->outputs[0], group);
  return g;
}

/// Moves the zeroings of `run` out of their GPU forms into a launch of their own, before the
/// step's first launch that the forward pass does not need: GPU only (no CPU kernel; a CPU's
/// forms need no zeroing). The launches GELU epilogues skip are renumbered past it.
void insertZeroRun(ZeroRun run, nlohmann::json& launches, CompiledProgram& p, const std::map<std::string, int>& tensorId,
                   const std::function<std::pair<int, bool>(const kir::Kernel&)>& indexOf) {
  for (auto c = run.calls.rbegin(); c != run.calls.rend(); ++c) // the later of a form's calls first
    launches[c->first]["gpu"].erase(c->second);
  nlohmann::json calls = nlohmann::json::array();
  for (kir::Kernel& k : run.kernels) {
    auto [index, fresh] = indexOf(k);
    int64_t unused = 0;
    calls.push_back(launchJson(k, index, tensorId, unused));
    if (fresh) p.kernels.push_back(std::move(k));
  }
  nlohmann::json zeroing = {{"kernel", -1}, {"serial", false}, {"forward", false}, {"extent", 0}, {"args", nlohmann::json::array()},
                            {"label", "zeroing of accumulators"}, {"gpu", calls}};
  launches.insert(launches.begin() + (std::ptrdiff_t)run.at, zeroing);
  for (nlohmann::json& l : launches)
    if (l.contains("gemm") && l["gemm"].contains("gelu") && l["gemm"]["gelu"]["skip"].get<int64_t>() >= (int64_t)run.at)
      l["gemm"]["gelu"]["skip"] = l["gemm"]["gelu"]["skip"].get<int64_t>() + 1;
  p.zeroings = (int64_t)run.calls.size();
  p.zeroLaunches = (int64_t)run.kernels.size();
}

/// Notes on launch `at` the labels of the later launches whose work a GPU runs there ("with": each
/// label once, in order, with its count: "AdamUpdate x6, SumTo"), for profiles, whose time for
/// `at` is theirs too.
void noteJoined(nlohmann::json& launches, size_t at, const std::vector<size_t>& later) {
  std::vector<std::pair<std::string, int>> counts;
  for (size_t i : later) {
    if (i == at) continue;
    std::string label = launches[i].value("label", "");
    auto c = std::find_if(counts.begin(), counts.end(), [&](const auto& e) { return e.first == label; });
    if (c == counts.end())
      counts.push_back({label, 1});
    else
      ++c->second;
  }
  std::string with = launches[at].value("with", "");
  for (auto& [label, n] : counts) with += (with.empty() ? "" : ", ") + label + (n > 1 ? " x" + std::to_string(n) : "");
  if (!with.empty()) launches[at]["with"] = with;
}

/// Puts each run's horizontal kernel in place of its first call and drops its other calls from
/// their GPU forms (a form left empty: nothing for a GPU to run there).
void joinCallRuns(std::vector<CallRun> runs, nlohmann::json& launches, CompiledProgram& p, const std::map<std::string, int>& tensorId,
                  const std::function<std::pair<int, bool>(const kir::Kernel&)>& indexOf) {
  for (CallRun& run : runs) {
    auto [index, fresh] = indexOf(run.kernel);
    int64_t unused = 0;
    launches[run.calls[0].first]["gpu"][run.calls[0].second] = launchJson(run.kernel, index, tensorId, unused);
    std::vector<size_t> later;
    for (size_t c = 1; c < run.calls.size(); ++c) {
      launches[run.calls[c].first]["gpu"][run.calls[c].second] = nullptr; // dropped below
      later.push_back(run.calls[c].first);
    }
    noteJoined(launches, run.calls[0].first, later);
    if (fresh) p.kernels.push_back(std::move(run.kernel));
    p.joinedCalls += (int64_t)run.calls.size();
    ++p.callRuns;
  }
  for (nlohmann::json& l : launches)
    if (l.contains("gpu")) {
      nlohmann::json kept = nlohmann::json::array();
      for (nlohmann::json& c : l["gpu"])
        if (!c.is_null()) kept.push_back(std::move(c));
      l["gpu"] = std::move(kept);
    }
}

/// The launches of a GPU step as planned: a GPU form's kernels, or the launch's kernel, its
/// collective, or its GEMM (its epilogue too where the GEMM has no bias for cuBLASLt to add), and
/// nothing for a GELU that a GEMM's epilogue computes or a cast into a weight's kept bf16 copy.
int64_t gpuLaunchCount(const nlohmann::json& launches) {
  std::set<int64_t> skipped = geluSkips(launches);
  int64_t n = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    const nlohmann::json& l = launches[i];
    if (skipped.count((int64_t)i) || l.contains("refresh")) continue;
    n += l.contains("gpu") ? (int64_t)l["gpu"].size() : 1 + (l.contains("epilogue") && !l["gemm"].contains("bias"));
  }
  return n;
}

/// Marks the kernels a GPU never launches (kir::Kernel::cpuOnly), which its modules then leave
/// out: a launch with a GPU form runs that form's kernels; any other runs its kernel (a GEMM's:
/// the runtime's fallback where cuBLASLt has no algorithm) and its epilogue.
void markCpuOnly(const nlohmann::json& launches, std::vector<kir::Kernel>& kernels) {
  std::vector<bool> launched(kernels.size(), false);
  auto mark = [&](const nlohmann::json& call) {
    if (int k = call.at("kernel").get<int>(); k >= 0) launched.at(k) = true;
  };
  for (const nlohmann::json& l : launches) {
    if (l.contains("gpu")) {
      for (const nlohmann::json& c : l["gpu"]) mark(c);
      continue;
    }
    mark(l);
    if (l.contains("epilogue")) mark(l["epilogue"]);
  }
  for (size_t k = 0; k < kernels.size(); ++k) kernels[k].cpuOnly = !launched[k];
}

} // namespace

kir::GpuArch gpuArchOf(const std::string& options) {
  std::string targets = "cpu,sm_90";
  if (size_t at = options.find("--target="); at != std::string::npos) {
    size_t end = options.find('\n', at);
    targets = options.substr(at + 9, end == std::string::npos ? std::string::npos : end - at - 9);
  }
  bool gpus = false, hopper = true;
  for (size_t start = 0; start <= targets.size();) {
    size_t end = std::min(targets.find(',', start), targets.size());
    std::string t = targets.substr(start, end - start);
    if (!t.empty() && t != "cpu") gpus = true, hopper = hopper && t == "sm_90";
    start = end + 1;
  }
  return {gpus && hopper};
}

Expected<CompiledProgram> buildProgram(const ir::Graph& g, const std::string& options, double defaultLr, Weights mode,
                                       const std::string& weightsFile, const DecodeSpec* decode) {
  if (decode && g.outputs.size() != (decode->next.empty() ? 1u : 2u))
    return makeError("a decode step has the logits for its output, and each row's greedy next token");
  if (!decode && (g.outputs.size() != 1 || g.inputs.empty())) return makeError("the graph is not a training step (build it with the training flags)");
  CompiledProgram p;
  const kir::GpuArch arch = gpuArchOf(options);
  p.schedule = kernelSchedule(g);
  AbsorbedTransposes absorbed = absorbTransposes(g, p.schedule);
  GemmGelus gelus = fuseGemmGelus(g, p.schedule);
  std::set<const ir::Value*> internals = groupInternals(g, p.schedule); // computed and read inside one kernel: never stored
  auto plan = planMemory(g, p.schedule, 64, absorbed.lastRead, internals, gelus.earlierWrites);
  if (!plan) return plan.takeError();
  if (Error e = checkPlan(*plan)) return makeError("the memory plan is unsound: " + errorText(std::move(e)));
  if (Error e = checkLiveness(g, p.schedule, *plan)) return makeError("the memory plan is unsound: " + errorText(std::move(e)));
  p.plan = std::move(*plan);
  std::map<std::string, int> tensorId;
  nlohmann::json tensors = nlohmann::json::array(), weights = nlohmann::json::array();
  std::map<const ir::Value*, int64_t> sharded = shardedState(g);
  for (const Buffer& b : p.plan.buffers) {
    if (internals.count(b.value)) continue; // no tensor: it lives in a kernel's registers
    tensorId[b.value->name] = (int)tensors.size();
    tensors.push_back({{"name", b.value->name}, {"kind", kindName(b.value->kind)}, {"region", (int)b.region}, {"offset", b.offset},
                       {"bytes", b.bytes}, {"dtype", std::string(ir::dtypeSafetensorsName(b.value->type.dtype))},
                       {"shape", b.value->type.shape()}, {"live", {b.first, b.last}}});
    if (sharded.count(b.value)) tensors.back()["shards"] = sharded[b.value];
    if (b.value->kind == ir::ValueKind::Input && !ir::isFloat(b.value->type.dtype))
      if (auto r = indexRange(g, b.value)) tensors.back()["range"] = *r;
    // Constants are always carried; parameters when embedded; state starts at zero (the arena's fill).
    bool carried = b.value->kind == ir::ValueKind::Const || (b.value->kind == ir::ValueKind::Param && mode == Weights::Embedded);
    if (b.value->kind == ir::ValueKind::State &&
        std::any_of(b.value->data->bytes.begin(), b.value->data->bytes.end(), [](uint8_t x) { return x != 0; }))
      return makeError("state %" + b.value->name + " does not start at zero");
    if (b.value->data && !b.aliasOf && carried) {
      while (p.weights.size() % 64) p.weights.push_back(0);
      weights.push_back({tensorId[b.value->name], p.weights.size()});
      p.weights.insert(p.weights.end(), b.value->data->bytes.begin(), b.value->data->bytes.end());
    }
  }
  for (const auto& n : g.nodes()) // a weight's bf16 copy, kept by the optimizer (ShadowWeights.h)
    if (n->has("shadow")) tensors.at(tensorId.at(n->getString("shadow", "")))["shadow_of"] = tensorId.at(n->inputs[0]->name);
  auto forward = forwardNodes(g);
  Readers readers(g);
  nlohmann::json launches = nlohmann::json::array();
  std::map<std::string, int> byContent; // kir::contentKey -> the kernel's index: each kernel carried once
  auto indexOf = [&](const kir::Kernel& k) {
    auto [it, fresh] = byContent.try_emplace(kir::contentKey(k), (int)p.kernels.size());
    return std::make_pair(it->second, fresh);
  };
  std::set<const ir::Value*> views; // results that share their input's bytes: nothing to run
  for (const Buffer& b : p.plan.buffers)
    if (b.aliasOf && b.value->producer && isView(*b.value->producer)) views.insert(b.value);
  std::map<size_t, const GemmGelu*> geluOf; // product position -> the GELU its GEMM computes
  for (const GemmGelu& f : gelus.fused) geluOf[f.product] = &f;
  std::map<size_t, size_t> launchOf;          // schedule position -> its (first) launch
  for (size_t gi = 0; gi < p.schedule.size(); ++gi) {
    const auto& group = p.schedule[gi];
    launchOf[gi] = launches.size();
    if (group.size() == 1 && views.count(group[0]->outputs[0])) continue;
    std::string name = "sgc_k" + std::to_string(gi);
    if (group.size() == 1 && isCollective(group[0]->op) && group[0]->op != ir::Op::AllReduce) { // the runtime's alone
      launches.push_back(collectiveJson(*group[0], tensorId));
      launches.back()["forward"] = forward.count(group[0]) != 0;
      launches.back()["label"] = std::string(ir::opName(group[0]->op));
      continue;
    }
    std::vector<kir::Kernel> ks;
    std::optional<kir::RowGroup> rows = rowGroup(group, readers);
    size_t rowFirst = 0, rowLaunches = 0; // the row op's own kernels among ks
    if (rows) { // on a CPU, the prologue, the row op and the epilogue one after another
      auto chain = [&](const Group& part, const std::string& suffix, const std::set<const ir::Value*>& stored) -> Error {
        if (part.empty()) return Error::success();
        auto k = kir::lowerElementwise(name + suffix, part, stored);
        if (!k) return k.takeError();
        ks.push_back(std::move(*k));
        return Error::success();
      };
      if (Error e = chain(rows->prologue, "_pre", {})) return e;
      auto own = kir::lowerNode(name, *rows->row);
      if (!own) return own.takeError();
      rowFirst = ks.size(), rowLaunches = own->size();
      for (kir::Kernel& k : *own) ks.push_back(std::move(k));
      std::set<const ir::Value*> stored; // the epilogue: one kernel storing each result read after it
      for (size_t k = 0; k < rows->epilogue.size(); ++k)
        if (rows->storeEpilogue[k]) stored.insert(rows->epilogue[k]->outputs[0]);
      if (Error e = chain(rows->epilogue, "_post", stored)) return e;
    } else if (group.size() > 1 && !kir::isFusible(*group[0])) {
      auto k = kir::lowerProductGroup(name, group);
      if (!k) return k.takeError();
      ks = std::move(*k);
    } else if (group.size() > 1) {
      std::set<const ir::Value*> stored;
      for (const ir::Node* n : group)
        if (!internals.count(n->outputs[0])) stored.insert(n->outputs[0]);
      auto k = kir::lowerElementwise(name, group, stored);
      if (!k) return k.takeError();
      ks.push_back(std::move(*k));
    } else {
      auto k = kir::lowerNode(name, *group[0]);
      if (!k) return k.takeError();
      ks = std::move(*k);
    }
    std::string label; // the group's ops, for profiles: "MatMul+Add+Gelu"
    for (const ir::Node* n : group) label += (label.empty() ? "" : "+") + std::string(ir::opName(n->op));
    if (group[0]->op == ir::Op::AllReduce) ks = copiesNotInPlace(*group[0], p.plan, std::move(ks));
    // A forward-only step runs the kernels that compute something the loss needs (a kernel may
    // also compute gradients whose inputs are ready then).
    bool inForward = std::any_of(group.begin(), group.end(), [&](const ir::Node* n) { return forward.count(n) != 0; });
    // A weight's bf16 cast into the copy the optimizer keeps (ShadowWeights.h): the runtime runs
    // it before a step only when the copy may be stale, so its bytes are not a step's.
    bool refresh = hasRefresh(group);
    int64_t refreshBytes = 0;
    for (kir::Kernel& k : ks) {
      auto [index, fresh] = indexOf(k);
      launches.push_back(launchJson(k, index, tensorId, refresh ? refreshBytes : p.bytesPerStep));
      launches.back()["forward"] = inForward;
      launches.back()["label"] = label;
      if (refresh) launches.back()["refresh"] = true;
      if (fresh) p.kernels.push_back(std::move(k));
    }
    p.shadowCasts += refresh;
    if (group[0]->op == ir::Op::AllReduce) { // after the copies of results not reduced in place
      launches.push_back(collectiveJson(*group[0], tensorId));
      launches.back()["forward"] = forward.count(group[0]) != 0;
      launches.back()["label"] = label;
      continue;
    }
    if (absorbed.skipped.count(group[0])) { // the GEMMs reading it transpose its source
      launches.back()["gpu"] = nlohmann::json::array();
      ++p.absorbedTransposes;
    }
    // On a GPU some nodes run as other kernels, with more parallelism: the first of the launches
    // they replace carries them, and the others (an empty list) are skipped there.
    size_t first = launches.size() - ks.size(), count = ks.size();
    Expected<std::optional<std::vector<kir::Kernel>>> gpu = std::optional<std::vector<kir::Kernel>>();
    if (rows) {
      gpu = kir::lowerRowGroupGpu(name + "_gpu", *rows);
      if (gpu && !*gpu) { // no fused form: the row op's own, alone
        gpu = kir::lowerForGpu(name + "_gpu", *rows->row, arch);
        first += rowFirst, count = rowLaunches;
      }
    } else if (group.size() == 1) {
      gpu = kir::lowerForGpu(name + "_gpu", *group[0], arch);
    }
    if (!gpu) return gpu.takeError();
    if (*gpu) {
      nlohmann::json calls = nlohmann::json::array();
      int64_t unused = 0;
      for (kir::Kernel& k : **gpu) {
        auto [index, fresh] = indexOf(k);
        calls.push_back(launchJson(k, index, tensorId, unused));
        if (fresh) p.kernels.push_back(std::move(k));
      }
      for (size_t i = first; i < first + count; ++i) launches[i]["gpu"] = i == first ? calls : nlohmann::json::array();
      ++p.gpuForms;
    }
    // A fused attention's products, on the launch that runs them (for profiles' rates; a GEMM's
    // the runtime counts from its shape).
    double attentionFlops = 0;
    for (const ir::Node* n : group)
      if (n->op == ir::Op::FusedAttention || n->op == ir::Op::FusedAttentionGrad)
        attentionFlops += kir::AttentionGeometry(*n).flops(n->op == ir::Op::FusedAttentionGrad);
    if (attentionFlops > 0) launches[first]["flops"] = attentionFlops;
    // On a GPU a product runs through the GEMM library, then its epilogue kernel.
    if (auto gemm = isProduct(*group[0]) ? kir::gemmShape(group) : std::nullopt) {
      auto epilogue = kir::lowerProductEpilogue(name + "_epilogue", group);
      if (!epilogue) return epilogue.takeError();
      for (auto [operand, trans] : {std::pair{&gemm->a, &gemm->transA}, std::pair{&gemm->b, &gemm->transB}})
        if (auto it = absorbed.source.find(*operand); it != absorbed.source.end()) {
          *operand = it->second;
          *trans = !*trans;
        }
      kir::foldBatchIntoRows(*gemm);
      nlohmann::json& launch = launches.back();
      launch["gemm"] = gemmJson(*gemm, tensorId);
      if (const ir::Value* bias = gemmBias(group, *gemm)) launch["gemm"]["bias"] = tensorId.at(bias->name);
      if (auto f = geluOf.find(gi); f != geluOf.end()) { // the launch it makes unneeded is resolved below
        const GemmGelu& e = *f->second;
        auto id = [&](const ir::Value* v) { return v ? tensorId.at(v->name) : -1; };
        launch["gemm"]["gelu"] = {{"result", id(e.result)}, {"aux", id(e.input)}, {"bias", id(e.bias)}, {"skip", e.gelu ? (int64_t)*e.gelu : -1}};
        ++p.gemmGelus;
      }
      ++p.gemms;
      if (*epilogue) {
        int64_t unused = 0;
        auto [index, fresh] = indexOf(**epilogue);
        launch["epilogue"] = launchJson(**epilogue, index, tensorId, unused);
        if (fresh) p.kernels.push_back(std::move(**epilogue));
        ++p.gemmEpilogues;
      }
    }
  }
  for (auto& launch : launches)
    if (launch.contains("gemm") && launch["gemm"].contains("gelu") && launch["gemm"]["gelu"]["skip"] >= 0)
      launch["gemm"]["gelu"]["skip"] = launchOf.at(launch["gemm"]["gelu"]["skip"].get<size_t>());
  for (LaunchRun& run : elementwiseRuns(launches, tensors, p.kernels)) { // a GPU runs each run as one launch
    auto [index, fresh] = indexOf(run.kernel);
    int64_t unused = 0;
    nlohmann::json call = launchJson(run.kernel, index, tensorId, unused);
    for (size_t i : run.launches) launches[i]["gpu"] = i == run.launches[0] ? nlohmann::json::array({call}) : nlohmann::json::array();
    noteJoined(launches, run.launches[0], run.launches);
    if (fresh) p.kernels.push_back(std::move(run.kernel));
    p.fusedLaunches += (int64_t)run.launches.size();
    ++p.horizontalLaunches;
  }
  if (std::optional<ZeroRun> zeros = zeroRun(launches, tensors, p.kernels)) insertZeroRun(std::move(*zeros), launches, p, tensorId, indexOf);
  joinCallRuns(callRuns(launches, tensors, p.kernels), launches, p, tensorId, indexOf);
  markCpuOnly(launches, p.kernels);
  p.launches = std::count_if(launches.begin(), launches.end(), [](const nlohmann::json& l) {
    return (l.at("kernel").get<int>() >= 0 || l.contains("collective")) && !l.contains("refresh");
  });
  p.gpuLaunches = gpuLaunchCount(launches);
  std::set<std::string> kernelNames; // a module resolves kernels by name: one name, one kernel
  for (const kir::Kernel& k : p.kernels)
    if (!kernelNames.insert(k.name).second) return makeError("internal error: two kernels are named " + k.name);
  nlohmann::json updates = nlohmann::json::array();
  for (auto& [target, next] : g.updates) {
    const Buffer* nb = nullptr;
    for (const Buffer& b : p.plan.buffers)
      if (b.value == next) nb = &b;
    if (!(nb && nb->aliasOf == target)) updates.push_back({tensorId.at(target->name), tensorId.at(next->name)});
  }
  const ir::Value *lr = g.findValue("sgc.lr"), *step = g.findValue("sgc.step");
  if (!decode && (!lr || !step)) return makeError("the graph is not a training step (no sgc.lr or sgc.step)");
  for (auto& [target, next] : g.updates) // a cache write changes a few rows: it must run in place
    if (next->producer && next->producer->op == ir::Op::KvCacheWrite && !std::any_of(p.plan.buffers.begin(), p.plan.buffers.end(), [&](const Buffer& b) {
          return b.value == next && b.aliasOf == target;
        }))
      return makeError(ir::describe(*next->producer) + ": the memory plan could not write the cache %" + target->name + " in place");
  p.hash = hexHash(g, options);
  nlohmann::json names = nlohmann::json::array();
  for (const kir::Kernel& k : p.kernels) names.push_back(k.name);
  nlohmann::json regions = nlohmann::json::array();
  for (int r = 0; r < kNumRegions; ++r) regions.push_back(p.plan.regionBytes[r]);
  nlohmann::json prog = {{"abi", 1}, {"hash", p.hash}, {"alignment", p.plan.alignment}, {"regions", regions},
                         {"kernels", (int)p.kernels.size()}, {"kernel_names", names}, {"tensors", tensors}, {"launches", launches}, {"updates", updates},
                         {"weights", weights}, {"loss", decode ? -1 : tensorId.at(g.outputs[0]->name)}, {"lr", decode ? -1 : tensorId.at(lr->name)},
                         {"step", decode ? -1 : tensorId.at(step->name)}, {"lr_default", defaultLr},
                         {"weights_mode", mode == Weights::Embedded ? "embedded" : mode == Weights::External ? "external" : "none"},
                         {"weights_file", weightsFile}};
  if (decode) {
    auto id = [&](const std::string& name) { return name.empty() ? -1 : tensorId.at(name); };
    nlohmann::json pools = nlohmann::json::array();
    for (const std::string& pool : decode->pools) pools.push_back(id(pool));
    prog["decode"] = {{"tokens", decode->tokens}, {"seqs", decode->seqs}, {"block_size", decode->blockSize}, {"blocks", decode->blocks},
                      {"max_blocks", decode->maxBlocks}, {"max_context", decode->maxContext}, {"ids", id(decode->ids)}, {"positions", id(decode->positions)},
                      {"logits", id(g.outputs[0]->name)}, {"tables", id("sgc.kv.tables")}, {"seq", id("sgc.kv.seq")},
                      {"pos", id("sgc.kv.pos")}, {"pools", pools}, {"next", id(decode->next)},
                      {"sample", {id("sgc.sample.temperature"), id("sgc.sample.top_k"), id("sgc.sample.top_p"), id("sgc.sample.seed")}}};
  }
  p.programJson = prog.dump();
  return p;
}

std::string programStats(const CompiledProgram& p) {
  int64_t fused = 0, serial = 0, epilogues = 0;
  for (const auto& g : p.schedule) {
    fused += g.size() > 1 ? (int64_t)g.size() : 0;
    epilogues += g.size() > 1 && isProduct(*g[0]);
  }
  for (const auto& k : p.kernels) serial += kir::isSerial(k);
  int64_t arena = 0;
  for (int r = 0; r < kNumRegions; ++r) arena += p.plan.regionBytes[r];
  char buf[1024];
  snprintf(buf, sizeof buf,
           "kernels: %zu (%lld serial)\nlaunches per step: %zu\nnodes fused into multi-node kernels: %lld\n"
           "matrix products with fused epilogues: %lld\n"
           "GPU: launches per step: %lld; products through cuBLASLt: %lld (%lld followed by an epilogue kernel); transposes folded into them: %lld;\n"
           "     GELUs in their epilogues: %lld; nodes in GPU form: %lld; elementwise launches run together: %lld as %lld;\n"
           "     accumulator zeroings run together: %lld as %lld; GPU forms' reductions run together: %lld as %lld\n"
           "weights' bf16 copies kept by the optimizer: %lld (their casts run only when a copy may be stale)\n"
           "bytes moved per step: %lld\narena: %lld bytes (activations %lld, peak of %lld without reuse)\n",
           p.kernels.size(), (long long)serial, (size_t)p.launches, (long long)fused, (long long)epilogues,
           (long long)p.gpuLaunches, (long long)p.gemms, (long long)p.gemmEpilogues, (long long)p.absorbedTransposes, (long long)p.gemmGelus, (long long)p.gpuForms, (long long)p.fusedLaunches, (long long)p.horizontalLaunches, (long long)p.zeroings, (long long)p.zeroLaunches, (long long)p.joinedCalls, (long long)p.callRuns, (long long)p.shadowCasts, (long long)p.bytesPerStep, (long long)arena,
           (long long)p.plan.regionBytes[(int)Region::Activations], (long long)p.plan.activationsUnshared);
  return buf;
}

std::string printSchedule(const CompiledProgram& p) {
  std::string s;
  for (size_t i = 0; i < p.schedule.size(); ++i) {
    const auto& group = p.schedule[i];
    std::string label;
    for (const ir::Node* n : group) label += (label.empty() ? "" : "+") + std::string(ir::opName(n->op));
    s += "group " + std::to_string(i) + ": " + label + "\n";
    for (const ir::Node* n : group) {
      s += "  " + std::string(ir::opName(n->op)) + "(";
      for (size_t k = 0; k < n->inputs.size(); ++k)
        s += (k ? ", %" : "%") + (n->inputs[k] ? n->inputs[k]->name : std::string("-"));
      s += ") ->";
      for (const ir::Value* o : n->outputs) s += o ? " %" + o->name + " " + ir::toString(o->type) : std::string(" _"); // _: a result not computed
      s += "\n";
    }
  }
  return s;
}

} // namespace sgc::codegen
