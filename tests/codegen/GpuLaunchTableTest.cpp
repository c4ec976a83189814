// What a GPU step launches, as the compiler plans it: the accumulators' zeroings
// (a bias gradient's, a layer norm's dscale and dbias, before their atomic adds)
// run together in one GPU-only launch before the backward pass, only where the
// memory plan shows nothing touches their bytes in between (ZeroRun,
// codegen/FuseLaunches.h); the runtime reads such a launch; reductions of GPU
// forms run together as one horizontal kernel (CallRun), which computes what its
// parts compute and reads nothing a later launch writes; and the GPU modules
// carry exactly the kernels a GPU launches (kir::Kernel::cpuOnly).
#include "codegen/FuseLaunches.h"
#include "codegen/Package.h"
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"
#include "runtime/Program.h"
#include "tests/codegen/KernelJit.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <random>
#include <set>

using namespace sgc;

namespace {

/// Two linear layers and a layer norm over 2048 rows of 64: on a GPU the bias gradients are split
/// reductions and the layer norm's dscale and dbias sums of atomic adds, each after a zeroing.
/// With `twoHeads` a third linear layer reads the first's result too, no layer norm, and the loss
/// is the sum of the two heads' product: their bias gradients are ready together (the layer
/// norm's dscale and dbias are summed in its dx kernel, not by reductions of their own).
codegen::CompiledProgram compiled(bool twoHeads = false) {
  std::mt19937 rng(3);
  std::string text = "graph @g {\n input %x : f32[2048, 64]\n";
  for (const char* w : {"w", "w2", "w3"})
    if (twoHeads || w[1] != '3') text += std::string(" param %") + w + " : f32[64, 64] = " + ir::denseNormal(64 * 64, rng) + "\n";
  for (const char* p : {"b", "b2", "b3", "s", "c"})
    if (twoHeads ? p[0] == 'b' : p[1] != '3') text += std::string(" param %") + p + " : f32[64] = " + ir::denseNormal(64, rng) + "\n";
  text += R"( %h : ?[*] = MatMul(%x, %w)
 %hb : ?[*] = Add(%h, %b)
 %h2 : ?[*] = MatMul(%hb, %w2)
 %hb2 : ?[*] = Add(%h2, %b2)
)";
  text += twoHeads ? R"( %h3 : ?[*] = MatMul(%hb, %w3)
 %hb3 : ?[*] = Add(%h3, %b3)
 %m : ?[*] = Mul(%hb2, %hb3)
 %loss : ?[*] = ReduceSum(%m) {keepdims = 0}
 output %loss
})"
                   : R"( %n : ?[*] = LayerNormalization(%hb2, %s, %c) {axis = -1}
 %loss : ?[*] = ReduceSum(%n) {keepdims = 0}
 output %loss
})";
  auto g = ir::parse(text, "zeroings");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  EXPECT_FALSE(ir::buildTrainingStep(**g, o));
  auto p = codegen::buildProgram(**g, "test");
  EXPECT_TRUE(!!p) << errorText(p.takeError());
  return std::move(*p);
}

/// The kernel calls a GPU makes for launch `l` (before cuBLASLt's choices): its GPU form, or its
/// kernel and epilogue.
std::vector<const nlohmann::json*> gpuCalls(const nlohmann::json& l) {
  std::vector<const nlohmann::json*> calls;
  if (l.contains("gpu")) {
    for (const nlohmann::json& c : l["gpu"]) calls.push_back(&c);
    return calls;
  }
  if (l["kernel"].get<int>() >= 0) calls.push_back(&l);
  if (l.contains("epilogue")) calls.push_back(&l["epilogue"]);
  return calls;
}

/// The tensors launch `l` touches on a GPU (the written ones marked): the test's own reading.
std::vector<std::pair<int, bool>> gpuTouched(const nlohmann::json& l, const std::vector<kir::Kernel>& kernels) {
  std::vector<std::pair<int, bool>> out;
  if (l.contains("gemm"))
    for (const char* key : {"a", "b", "y"}) out.push_back({l["gemm"][key].get<int>(), key[0] == 'y'});
  for (const nlohmann::json* c : gpuCalls(l)) {
    std::vector<int> args = (*c)["args"].get<std::vector<int>>();
    for (size_t i = 0; i < args.size(); ++i) out.push_back({args[i], kernels[(*c)["kernel"].get<int>()].buffers[i].written});
  }
  return out;
}

bool overlap(const nlohmann::json& tensors, int a, int b) {
  const nlohmann::json &x = tensors[a], &y = tensors[b];
  int64_t xo = x["offset"], yo = y["offset"], xb = x["bytes"], yb = y["bytes"];
  return x["region"] == y["region"] && xo < yo + yb && yo < xo + xb;
}

/// Whether kernel `k` adds into its buffer `b` atomically.
bool accumulates(const kir::Kernel& k, size_t b) {
  std::function<bool(const kir::Stmt&)> in = [&](const kir::Stmt& s) {
    if (s.kind == kir::StmtKind::AtomicAdd && s.id == (int)b) return true;
    for (const kir::StmtRef& c : s.body)
      if (in(*c)) return true;
    return false;
  };
  return in(*k.body);
}

} // namespace

TEST(GpuLaunchTable, ZeroingsRunTogetherBeforeTheBackwardPass) {
  codegen::CompiledProgram p = compiled();
  EXPECT_EQ(p.zeroings, 4); // the bias gradients', the layer norm's dscale and dbias
  EXPECT_EQ(p.zeroLaunches, 1);
  nlohmann::json j = nlohmann::json::parse(p.programJson);
  const nlohmann::json &launches = j["launches"], &tensors = j["tensors"];
  size_t at = 0;
  while (at < launches.size() && launches[at]["forward"].get<bool>()) ++at;
  ASSERT_LT(at, launches.size());
  const nlohmann::json& zeroing = launches[at];
  ASSERT_EQ(zeroing["kernel"].get<int>(), -1) << "a GPU-only launch: a CPU's forms need no zeroing";
  ASSERT_EQ(zeroing["gpu"].size(), 1u);
  const nlohmann::json& call = zeroing["gpu"][0];
  const kir::Kernel& h = p.kernels[call["kernel"].get<int>()];
  ASSERT_TRUE(kir::isHorizontal(h));
  ASSERT_EQ(h.body->body.size(), 4u);
  std::vector<int> zeroed = call["args"].get<std::vector<int>>();
  for (size_t part = 0; part < h.body->body.size(); ++part) { // each part zeroes the whole of its tensor
    const kir::Stmt& loop = *h.body->body[part];
    ASSERT_EQ(loop.body.size(), 1u);
    EXPECT_EQ(loop.body[0]->kind, kir::StmtKind::Store);
    EXPECT_EQ(loop.body[0]->value->kind, kir::ExprKind::Const);
    EXPECT_EQ(loop.body[0]->value->value, 0.0);
    EXPECT_EQ(loop.extent, h.buffers[loop.body[0]->id].numel);
  }
  // Each zeroed tensor: accumulated later by atomic adds outside the forward pass, and touched
  // by no GPU launch or call before its first accumulation, nor zeroed again by a GPU form.
  for (int t : zeroed) {
    bool accumulated = false;
    for (size_t i = at + 1; i < launches.size() && !accumulated; ++i)
      for (const nlohmann::json* c : gpuCalls(launches[i])) {
        const kir::Kernel& k = p.kernels[(*c)["kernel"].get<int>()];
        std::vector<int> args = (*c)["args"].get<std::vector<int>>();
        for (size_t b = 0; b < args.size(); ++b) {
          if (!overlap(tensors, args[b], t)) continue;
          EXPECT_FALSE(kir::isZeroing(k)) << tensors[t]["name"] << " zeroed again at launch " << i;
          EXPECT_TRUE(accumulates(k, b)) << tensors[t]["name"] << " touched at launch " << i << " before its atomic adds";
          EXPECT_FALSE(launches[i]["forward"].get<bool>()) << tensors[t]["name"] << ": an eval step, which skips the zeroing, accumulates it";
          accumulated = accumulated || accumulates(k, b);
        }
        if (accumulated) break;
      }
    EXPECT_TRUE(accumulated) << tensors[t]["name"] << " is never accumulated";
  }
  // The runtime reads the GPU-only launch (a CPU runs nothing for it).
  std::string text = p.programJson, error;
  rt::Program parsed;
  ASSERT_TRUE(rt::parseProgram(text.data(), text.size(), p.weights.size(), parsed, error)) << error;
  EXPECT_EQ(parsed.launches[at].kernel, -1);
  ASSERT_TRUE(parsed.launches[at].gpu.has_value());
  EXPECT_EQ(parsed.launches[at].gpu->size(), 1u);
}

TEST(GpuLaunchTable, AZeroingStaysWhereItsBytesAreTouchedBefore) {
  codegen::CompiledProgram p = compiled();
  nlohmann::json j = nlohmann::json::parse(p.programJson);
  nlohmann::json& launches = j["launches"];
  // The launch table as it was before the move: each zeroing back at its form's head.
  size_t at = 0;
  while (launches[at]["forward"].get<bool>()) ++at;
  nlohmann::json zeroing = launches[at];
  launches.erase(at);
  const kir::Kernel& h = p.kernels[zeroing["gpu"][0]["kernel"].get<int>()];
  std::vector<int> zeroed = zeroing["gpu"][0]["args"].get<std::vector<int>>();
  std::vector<kir::Kernel> kernels = p.kernels;
  std::map<int, size_t> accumulatedAt; // a zeroed tensor -> the launch of its atomic adds
  for (size_t i = at; i < launches.size(); ++i)
    for (const nlohmann::json* c : gpuCalls(launches[i]))
      for (int a : (*c)["args"].get<std::vector<int>>())
        if (std::count(zeroed.begin(), zeroed.end(), a) && !accumulatedAt.count(a)) accumulatedAt[a] = i;
  ASSERT_EQ(accumulatedAt.size(), zeroed.size());
  for (size_t part = 0; part < zeroed.size(); ++part) { // a zeroing kernel of each tensor's size, first in its form
    kir::Kernel z;
    z.name = "zero" + std::to_string(part);
    int b = h.body->body[part]->body[0]->id;
    z.buffers = {h.buffers[b]};
    z.numLoopVars = 1;
    z.body = kir::loop(0, h.buffers[b].numel, true, {kir::store(0, kir::loopVar(0), kir::constant(0, kir::Scalar::F32))});
    ASSERT_TRUE(kir::isZeroing(z));
    kernels.push_back(z);
    nlohmann::json call = {{"kernel", (int)kernels.size() - 1}, {"serial", false}, {"extent", z.body->extent}, {"args", {zeroed[part]}}};
    launches[accumulatedAt[zeroed[part]]]["gpu"].insert(launches[accumulatedAt[zeroed[part]]]["gpu"].begin(), call);
  }
  auto found = codegen::zeroRun(launches, j["tensors"], kernels);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->at, at);
  EXPECT_EQ(found->calls.size(), zeroed.size());
  // The first zeroed tensor's bytes given to a tensor that a backward launch before its
  // accumulation writes: that zeroing stays, the others move.
  int first = zeroed[0];
  size_t target = accumulatedAt[first];
  std::optional<int> clash;
  for (size_t i = at; i < target && !clash; ++i)
    for (auto [t, written] : gpuTouched(launches[i], kernels))
      if (written && std::find(zeroed.begin(), zeroed.end(), t) == zeroed.end()) clash = t;
  ASSERT_TRUE(clash.has_value()) << "no backward launch writes before the first accumulation";
  nlohmann::json tensors = j["tensors"];
  tensors[*clash]["region"] = tensors[first]["region"], tensors[*clash]["offset"] = tensors[first]["offset"];
  auto kept = codegen::zeroRun(launches, tensors, kernels);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->calls.size(), zeroed.size() - 1);
  for (auto [launch, position] : kept->calls) EXPECT_NE(launches[launch]["gpu"][position]["args"][0].get<int>(), first);
}

TEST(GpuLaunchTable, GpuCodeCarriesWhatAGpuLaunches) {
  codegen::CompiledProgram p = compiled();
  nlohmann::json j = nlohmann::json::parse(p.programJson);
  std::set<int> launched;
  for (const nlohmann::json& l : j["launches"])
    for (const nlohmann::json* c : gpuCalls(l)) launched.insert((*c)["kernel"].get<int>());
  auto ptx = codegen::kernelsPtx(p, "sm_90");
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  int left = 0;
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    bool carried = ptx->find(".entry " + p.kernels[k].name + "(") != std::string::npos;
    EXPECT_EQ(carried, (bool)launched.count((int)k)) << p.kernels[k].name;
    EXPECT_EQ(p.kernels[k].cpuOnly, !launched.count((int)k)) << p.kernels[k].name;
    left += !carried;
  }
  EXPECT_GT(left, 0) << "every kernel is a GPU's too: the test shows nothing";
}

TEST(GpuLaunchTable, ReductionsAsOneKernelComputeWhatTheyDoApart) {
  // Two bias gradients' split reductions (atomic adds into zeroed results) as the parts of one
  // horizontal kernel, run here as one serial CPU call (its body unchanged: each part's loop in
  // turn), against the interpreter.
  auto g = ir::parse("graph @g { input %x : f32[2048, 64]\n input %z : bf16[4, 1024, 32]\n"
                     " const %s : i64[1] = dense<\"0x4000000000000000\">\n const %t : i64[1] = dense<\"0x2000000000000000\">\n"
                     " %y : ?[*] = SumTo(%x, %s)\n %w : ?[*] = SumTo(%z, %t) {to = \"f32\"}\n output %y, %w }",
                     "sums");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  std::vector<kir::Kernel> reductions;
  for (const auto& n : (*g)->nodes()) {
    auto gpu = kir::lowerForGpu("k_" + n->outputs[0]->name, *n);
    ASSERT_TRUE(!!gpu && gpu->has_value());
    ASSERT_EQ((*gpu)->size(), 2u); // the zeroing, then the reduction
    reductions.push_back((**gpu)[1]);
    ASSERT_TRUE(kir::isHorizontalPart(reductions.back()));
    ASSERT_FALSE(kir::isElementwisePart(reductions.back()));
  }
  std::vector<kir::HorizontalPart> parts;
  for (const kir::Kernel& k : reductions) {
    std::vector<std::string> names;
    for (const kir::BufferArg& b : k.buffers) names.push_back(b.name);
    parts.push_back({&k, names});
  }
  kir::Kernel h = kir::horizontal("h", parts);
  ASSERT_TRUE(kir::isHorizontal(h));
  kir::Kernel cpu = h;
  cpu.gpuOnly = false;
  auto in = ir::randomInputs(**g, 7);
  auto want = ir::run(**g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  std::map<std::string, ir::Tensor> buffers = in;
  for (const ir::Value* v : (*g)->outputs) buffers.emplace(v->name, ir::Tensor(v->type.dtype, v->type.shape())); // zeroed
  test::Jit jit({cpu});
  auto fn = jit.fn("h");
  ASSERT_TRUE(fn);
  std::vector<void*> args;
  for (const kir::BufferArg& b : cpu.buffers) args.push_back(buffers.at(b.name).bytes.data());
  fn(args.data(), 0, 1);
  for (const char* name : {"y", "w"}) {
    const ir::Tensor &got = buffers.at(name), &ref = want->at(name);
    for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(got.getF(i), ref.getF(i), 1e-4 * (1 + std::fabs(ref.getF(i)))) << "%" << name << "[" << i << "]";
  }
  auto ptx = test::sm90Ptx({h});
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  EXPECT_NE(ptx->find("atom.global.add.f32"), std::string::npos); // the parts' atomic adds, on the GPU too
}

TEST(GpuLaunchTable, ReductionsRunTogetherOnlyOverWhatIsReady) {
  codegen::CompiledProgram p = compiled(true);
  EXPECT_EQ(p.joinedCalls, 2); // the two heads' bias gradients
  EXPECT_EQ(p.callRuns, 1);
  nlohmann::json j = nlohmann::json::parse(p.programJson);
  const nlohmann::json &launches = j["launches"], &tensors = j["tensors"];
  int carriers = 0; // the run's launch names the one whose reduction it runs, for profiles
  for (const nlohmann::json& l : launches) carriers += l.value("with", "").find("SumTo") != std::string::npos;
  EXPECT_EQ(carriers, 1);
  int runs = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    if (!launches[i].contains("gpu")) continue;
    for (const nlohmann::json& call : launches[i]["gpu"]) {
      const kir::Kernel& k = p.kernels[call["kernel"].get<int>()];
      if (!kir::isHorizontal(k) || launches[i]["kernel"].get<int>() < 0) continue; // not a zeroing run
      bool reduction = false;
      for (const kir::StmtRef& part : k.body->body) reduction = reduction || !kir::storesOnly(*part);
      if (!reduction) continue;
      ++runs;
      std::vector<int> args = call["args"].get<std::vector<int>>();
      for (size_t b = 0; b < args.size(); ++b) {
        const nlohmann::json& t = tensors[args[b]];
        if (!k.buffers[b].written) {
          // What it reads was computed by this launch (an earlier call of its form) or before.
          EXPECT_LE(t["live"][0].get<int64_t>(), (int64_t)i) << t["name"] << " read at launch " << i << " before it is computed";
          continue;
        }
        // What it writes early: no other tensor holds those bytes from here to where the memory
        // plan starts this one.
        int64_t from = (int64_t)i, until = t["live"][0].get<int64_t>();
        for (size_t o = 0; o < tensors.size(); ++o) {
          if ((int)o == args[b] || !overlap(tensors, (int)o, args[b])) continue;
          int64_t a = tensors[o]["live"][0], e = tensors[o]["live"][1];
          EXPECT_FALSE(a < until && e >= from) << t["name"] << " written at launch " << i << " over " << tensors[o]["name"];
        }
      }
    }
  }
  EXPECT_EQ(runs, 1);
}

// A profile's bytes count what each side runs (runtime/Program.h, launchTensorBytes): on a GPU a
// launch whose work moved into an earlier launch's GPU form (an elementwise run's later part)
// moves nothing, and a run's horizontal kernel moves at least the bytes of each launch it carries.
TEST(GpuLaunchTable, LaunchBytesAreWhatEachSideRuns) {
  std::string text = compiled().programJson, error;
  rt::Program p;
  ASSERT_TRUE(rt::parseProgram(text.data(), text.size(), 1 << 20, p, error)) << error;
  int emptied = 0, runs = 0;
  // Since the last launch with a GPU form: the largest CPU bytes of an emptied launch; that form's
  // GPU bytes, where it is a run's horizontal kernel ("with": its parts are those launches' kernels).
  uint64_t carried = 0, head = 0;
  bool run = false;
  auto checkRun = [&] {
    if (run) {
      EXPECT_GE(head, carried);
    }
  };
  for (const rt::Launch& l : p.launches) {
    if (l.kernel >= 0) {
      EXPECT_GT(rt::launchTensorBytes(p, l, false), 0u) << l.label;
    }
    if (l.gpu && !l.gpu->empty()) {
      checkRun();
      run = !l.with.empty(), runs += run;
      head = rt::launchTensorBytes(p, l, true), carried = 0;
    } else if (l.gpu && l.gpu->empty() && l.kernel >= 0) {
      ++emptied;
      EXPECT_EQ(rt::launchTensorBytes(p, l, true), 0u) << l.label;
      carried = std::max(carried, rt::launchTensorBytes(p, l, false));
    }
  }
  checkRun();
  EXPECT_GT(runs, 0); // the optimizer's small updates run together
  EXPECT_GT(emptied, runs);
}

// A fused attention's launch carries its products' flops (for the profile's rates): forward
// 2 products of 2 tq tk d, the gradient 5, causal halved, as bench/gpu_attention.py counts them.
TEST(GpuLaunchTable, AttentionLaunchesCountTheirFlops) {
  std::mt19937 rng(5);
  std::string text = "graph @attention {\n";
  for (const char* w : {"q", "k", "v"}) text += std::string(" param %") + w + " : f32[2, 3, 64, 16] = " + ir::denseNormal(2 * 3 * 64 * 16, rng) + "\n";
  text += " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.25}\n"
          " %loss : ?[*] = ReduceSum(%y) {keepdims = 0}\n output %loss\n}";
  auto g = ir::parse(text, "attention");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  ASSERT_FALSE(ir::buildTrainingStep(**g, ir::TrainingOptions{}));
  auto compiledStep = codegen::buildProgram(**g, "test");
  ASSERT_TRUE(!!compiledStep) << errorText(compiledStep.takeError());
  std::string json = compiledStep->programJson, error;
  rt::Program p;
  ASSERT_TRUE(rt::parseProgram(json.data(), json.size(), 1 << 20, p, error)) << error;
  double product = 2.0 * 2 * 3 * 64 * 64 * 16 / 2; // one causal product over the 6 problems
  std::map<std::string, double> flops;
  for (const rt::Launch& l : p.launches) flops[l.label] += l.flops;
  EXPECT_EQ(flops["FusedAttention"], 2 * product);
  EXPECT_EQ(flops["FusedAttentionGrad"], 5 * product);
  double total = 0;
  for (auto& [label, f] : flops) total += f;
  EXPECT_EQ(total, 7 * product); // no other launch claims any
}
