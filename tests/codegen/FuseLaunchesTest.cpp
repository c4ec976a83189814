// Elementwise launches a GPU runs together (codegen/FuseLaunches, kir::horizontal):
// the horizontal kernel computes what its parts compute (run here on the CPU,
// checked against the interpreter), its PTX assembles, its parts' blocks fit in
// one grid, and the compiler joins only runs of launches whose parts are
// independent in the memory plan.
#include "codegen/FuseLaunches.h"
#include "codegen/Program.h"
#include "frontend/onnx/Importer.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"
#include "tests/codegen/KernelJit.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

using namespace sgc;
using namespace sgc::test;

namespace {

// Two AdamW updates of different sizes and a cast to bf16, sharing the learning rate and step:
// the update and cast vector widths differ (4 f32, 4 of the bf16 cast's 12), as do the extents.
const char* kParts = R"(graph @g {
  input %p : f32[24]
  input %g : f32[24]
  input %m : f32[24]
  input %v : f32[24]
  input %q : f32[40]
  input %h : f32[40]
  input %n : f32[40]
  input %u : f32[40]
  input %w : f32[12]
  input %lr : f32[]
  input %k : i64[]
  %p2 : ?[*], %m2 : ?[*], %v2 : ?[*] = AdamUpdate(%p, %g, %m, %v, %lr, %k) {decoupled = 1, weight_decay = 0.01}
  %q2 : ?[*], %n2 : ?[*], %u2 : ?[*] = AdamUpdate(%q, %h, %n, %u, %lr, %k) {decoupled = 1, weight_decay = 0.01}
  %w16 : ?[*] = Cast(%w) {to = "bf16"}
  output %p2, %m2, %v2, %q2, %n2, %u2, %w16
})";

// One AdamW update of 2^24 parameters: a large model's, too large for one GPU thread a vector.
const char* kLargeUpdate = R"(graph @large {
  input %p : f32[16777216]
  input %g : f32[16777216]
  input %m : f32[16777216]
  input %v : f32[16777216]
  input %lr : f32[]
  input %k : i64[]
  %p2 : ?[*], %m2 : ?[*], %v2 : ?[*] = AdamUpdate(%p, %g, %m, %v, %lr, %k) {decoupled = 1, weight_decay = 0.01}
  output %p2, %m2, %v2
})";

struct Lowered {
  std::unique_ptr<ir::Graph> graph;
  std::vector<kir::Kernel> kernels; // one per node
};

Lowered lowered(const char* text = kParts) {
  Lowered l;
  auto g = ir::parse(text, "parts");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  l.graph = std::move(*g);
  for (const auto& n : l.graph->nodes()) {
    auto ks = kir::lowerNode("k_" + n->outputs[0]->name, *n);
    EXPECT_TRUE(!!ks) << errorText(ks.takeError());
    EXPECT_EQ(ks->size(), 1u);
    l.kernels.push_back(std::move(ks->front()));
  }
  return l;
}

kir::Kernel horizontalOf(const std::vector<kir::Kernel>& ks) {
  std::vector<kir::HorizontalPart> parts;
  for (const kir::Kernel& k : ks) {
    std::vector<std::string> names;
    for (const kir::BufferArg& b : k.buffers) names.push_back(b.name);
    parts.push_back({&k, names});
  }
  return kir::horizontal("h", parts);
}

} // namespace

TEST(FuseLaunches, HorizontalKernelComputesWhatItsPartsCompute) {
  Lowered l = lowered();
  kir::Kernel h = horizontalOf(l.kernels);
  ASSERT_TRUE(kir::isHorizontal(h));
  EXPECT_FALSE(kir::isSerial(h));
  // 9 + 9 + 2 buffers, of which lr and the step are shared: 18 tensors.
  ASSERT_EQ(h.buffers.size(), 18u);
  int written = 0;
  for (const kir::BufferArg& b : h.buffers) written += b.written;
  EXPECT_EQ(written, 7);
  EXPECT_EQ(h.numLoopVars, l.kernels[0].numLoopVars + l.kernels[1].numLoopVars + l.kernels[2].numLoopVars);
  // Each part at its own vector width, on GPU blocks of its own: one each here.
  ASSERT_EQ(h.body->body.size(), 3u);
  EXPECT_EQ(kir::loopVectorWidth(h, *h.body->body[0]), 4);
  EXPECT_EQ(kir::loopVectorWidth(h, *h.body->body[2]), 4); // 12 bf16: 8 do not divide them
  EXPECT_EQ(kir::partBlocks(h), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(kir::launchExtent(h), 3 * h.threads);

  // The same statements as one serial CPU call (a horizontal kernel is GPU-only: here its body,
  // unchanged, runs each part's loop in turn), against the interpreter.
  kir::Kernel cpu = h;
  cpu.gpuOnly = false;
  ASSERT_TRUE(kir::isSerial(cpu));
  std::map<std::string, ir::Tensor> in;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(0.1f, 1.0f);
  for (ir::Value* v : l.graph->inputs) {
    ir::Tensor t(v->type.dtype, v->type.shape());
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, v->type.dtype == ir::DType::I64 ? 3 : uni(rng));
    in.emplace(v->name, std::move(t));
  }
  auto want = ir::run(*l.graph, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  std::map<std::string, ir::Tensor> buffers = in;
  for (ir::Value* v : l.graph->outputs) buffers.emplace(v->name, ir::Tensor(v->type.dtype, v->type.shape()));
  Jit jit({cpu});
  auto fn = jit.fn("h");
  ASSERT_TRUE(fn);
  std::vector<void*> args;
  for (const kir::BufferArg& b : cpu.buffers) args.push_back(buffers.at(b.name).bytes.data());
  fn(args.data(), 0, 1);
  for (ir::Value* v : l.graph->outputs) {
    const ir::Tensor &got = buffers.at(v->name), &ref = want->at(v->name);
    for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(got.getF(i), ref.getF(i), 1e-6 * (1 + std::fabs(ref.getF(i)))) << "%" << v->name << "[" << i << "]";
  }
}

TEST(FuseLaunches, HorizontalPtxAssembles) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  Lowered l = lowered();
  kir::Kernel h = horizontalOf(l.kernels);
  llvm::LLVMContext ctx;
  auto spec = codegen::TargetSpec::nvptx("sm_90");
  auto mod = codegen::emitKernels(ctx, {h}, spec);
  ASSERT_TRUE(!!mod) << errorText(mod.takeError());
  auto ptx = codegen::compileModule(**mod, spec);
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  EXPECT_NE(ptx->find("ld.global.v4.f32"), std::string::npos) << *ptx; // each part at its own width
  auto [rc, log] = assembled(*ptx, ptxas);
  EXPECT_EQ(rc, 0) << log << *ptx;
}

// Parts too large for one thread a vector (a large model's optimizer updates) stride over
// kMostPartBlocks blocks each, so that kMostHorizontalParts of them fit in one grid: a GPU
// launch has at most kMostGridBlocks, and a part past them would not run.
TEST(FuseLaunches, LargePartsFitInOneGrid) {
  Lowered l = lowered(kLargeUpdate);
  const kir::Kernel& update = l.kernels.at(0);
  std::vector<kir::HorizontalPart> parts;
  for (size_t i = 0; i < kir::kMostHorizontalParts; ++i) {
    std::vector<std::string> names;
    for (const kir::BufferArg& b : update.buffers) names.push_back(b.name == "lr" || b.name == "k" ? b.name : b.name + std::to_string(i));
    parts.push_back({&update, names});
  }
  kir::Kernel h = kir::horizontal("h", parts);
  std::vector<int64_t> blocks = kir::partBlocks(h);
  ASSERT_EQ(blocks.size(), kir::kMostHorizontalParts);
  for (int64_t b : blocks) EXPECT_EQ(b, kir::kMostPartBlocks); // 2^24 / 4 a vector would be 16,384 blocks of 256
  EXPECT_LE(kir::launchExtent(h) / h.threads, kir::kMostGridBlocks);
}

namespace {

/// Every tensor a launch's kernel (or GEMM) reads or writes, the written ones marked: the test's
/// own reading of the launch table.
std::vector<std::pair<int, bool>> touchedBy(const nlohmann::json& l, const std::vector<kir::Kernel>& kernels) {
  std::vector<std::pair<int, bool>> out;
  if (l.contains("gemm"))
    for (const char* key : {"a", "b", "y"}) out.push_back({l["gemm"][key].get<int>(), key[0] == 'y'});
  if (l["kernel"].get<int>() < 0) return out;
  std::vector<int> args = l["args"].get<std::vector<int>>();
  for (size_t i = 0; i < args.size(); ++i) out.push_back({args[i], kernels[l["kernel"].get<int>()].buffers[i].written});
  return out;
}

bool overlap(const nlohmann::json& tensors, int a, int b) {
  const nlohmann::json &x = tensors[a], &y = tensors[b];
  int64_t xo = x["offset"], yo = y["offset"], xb = x["bytes"], yb = y["bytes"];
  return x["region"] == y["region"] && xo < yo + yb && yo < xo + xb;
}

bool conflict(const nlohmann::json& tensors, const std::vector<std::pair<int, bool>>& a, const std::vector<std::pair<int, bool>>& b) {
  for (auto [x, xw] : a)
    for (auto [y, yw] : b)
      if ((xw || yw) && overlap(tensors, x, y)) return true;
  return false;
}

} // namespace

TEST(FuseLaunches, JoinsOnlyIndependentLaunches) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  ASSERT_FALSE(ir::buildTrainingStep(**g, o));
  auto p = codegen::buildProgram(**g, "test");
  ASSERT_TRUE(!!p) << errorText(p.takeError());
  ASSERT_EQ(p->absorbedTransposes, 0); // so every empty GPU list below is a run's
  nlohmann::json j = nlohmann::json::parse(p->programJson);
  const nlohmann::json &launches = j["launches"], &tensors = j["tensors"];
  // The launch table as it was before the runs: what the compiler joined, found again.
  nlohmann::json plain = launches;
  int carriers = 0;
  for (nlohmann::json& l : plain)
    if (l.contains("gpu") && (l["gpu"].empty() || j["kernel_names"][l["gpu"][0]["kernel"].get<int>()].get<std::string>().rfind("sgc_h", 0) == 0)) {
      carriers += !l["gpu"].empty();
      l.erase("gpu");
    }
  auto runs = codegen::elementwiseRuns(plain, tensors, p->kernels);
  ASSERT_EQ((int64_t)runs.size(), p->horizontalLaunches);
  EXPECT_EQ(carriers, p->horizontalLaunches);
  int64_t joined = 0, updates = 0;
  for (const codegen::LaunchRun& r : runs) {
    ASSERT_GE(r.launches.size(), 2u);
    joined += (int64_t)r.launches.size();
    std::set<int> args;
    for (size_t i : r.launches) {
      updates += launches[i]["label"] == "AdamUpdate";
      if (i != r.launches[0]) {
        EXPECT_EQ(launches[i]["gpu"].size(), 0u) << "launch " << i << " runs in the first";
      }
      for (int a : launches[i]["args"].get<std::vector<int>>()) args.insert(a);
    }
    // The first names the others' labels for profiles, each once with its count.
    std::map<std::string, int> others;
    for (size_t k = 1; k < r.launches.size(); ++k) ++others[launches[r.launches[k]]["label"].get<std::string>()];
    std::string with = launches[r.launches[0]].value("with", "");
    for (auto& [label, n] : others)
      EXPECT_NE(with.find(label + (n > 1 ? " x" + std::to_string(n) : "")), std::string::npos) << with << " lacks " << label;
    std::vector<int> call = launches[r.launches[0]]["gpu"][0]["args"].get<std::vector<int>>();
    EXPECT_EQ(std::set<int>(call.begin(), call.end()), args); // the parts' tensors, each once
    EXPECT_EQ(call.size(), args.size());
    // Each part may run at the first: independent of the other parts and of every launch it moves ahead of.
    for (size_t k = 1; k < r.launches.size(); ++k) {
      auto mine = touchedBy(launches[r.launches[k]], p->kernels);
      for (size_t t = r.launches[0]; t < r.launches[k]; ++t)
        EXPECT_FALSE(conflict(tensors, mine, touchedBy(launches[t], p->kernels))) << "launch " << r.launches[k] << " moved ahead of " << t;
    }
  }
  EXPECT_EQ(joined, p->fusedLaunches);
  EXPECT_EQ(updates, 8); // the sample MLP's eight AdamW updates

  // Where a part writes over what the first part touches, the two stay apart.
  const codegen::LaunchRun& r = runs.front();
  size_t firstPart = r.launches[0], second = r.launches[1];
  const kir::Kernel& k = p->kernels[launches[second]["kernel"].get<int>()];
  std::vector<int> a0 = launches[firstPart]["args"].get<std::vector<int>>(), a1 = launches[second]["args"].get<std::vector<int>>();
  size_t out = 0;
  while (out < k.buffers.size() && !k.buffers[out].written) ++out;
  ASSERT_LT(out, a1.size());
  nlohmann::json clash = tensors;
  clash[a1[out]]["region"] = clash[a0.back()]["region"], clash[a1[out]]["offset"] = clash[a0.back()]["offset"];
  for (const codegen::LaunchRun& c : codegen::elementwiseRuns(plain, clash, p->kernels)) {
    bool both = std::count(c.launches.begin(), c.launches.end(), firstPart) && std::count(c.launches.begin(), c.launches.end(), second);
    EXPECT_FALSE(both) << "joined launches " << firstPart << " and " << second << ", which overlap";
  }
}
