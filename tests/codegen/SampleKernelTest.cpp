// The Sample op's kernels (codegen/kir/LowerSample.cpp) against its reference (ir/interp/Sample.cpp):
// the same draws row by row, frequencies that fit the softmax, and a GPU form ptxas takes.
#include "tests/codegen/KernelJit.h"

#include "codegen/kir/LowerOps.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <tuple>

using namespace sgc;
using namespace sgc::test;

namespace {

/// A Sample node over R rows of V logits of `dtype`, and its inputs: each row's logits from
/// `logits(r, v)` and its parameters from `params(r)` = (temperature, top_k, top_p, seed, counter).
struct SampleRun {
  std::unique_ptr<ir::Graph> g;
  std::map<std::string, ir::Tensor> in;
};
SampleRun sampleRun(const char* dtype, int64_t R, int64_t V, const std::function<double(int64_t, int64_t)>& logits,
                    const std::function<std::tuple<double, int64_t, double, int64_t, int64_t>(int64_t)>& params) {
  std::string r = std::to_string(R);
  std::string text = std::string("graph @g { input %x : ") + dtype + "[" + r + ", " + std::to_string(V) + "]\n input %t : f32[" + r +
                     "]\n input %k : i32[" + r + "]\n input %p : f32[" + r + "]\n input %seed : i64[" + r + "]\n input %ctr : i32[" + r +
                     "]\n %y : ?[*] = Sample(%x, %t, %k, %p, %seed, %ctr)\n output %y }";
  auto g = ir::parse(text, "sample");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  SampleRun run{std::move(*g), {}};
  ir::Tensor x(ir::dtypeFromName(dtype).value(), {R, V}), t(ir::DType::F32, {R}), k(ir::DType::I32, {R}), p(ir::DType::F32, {R}),
      seed(ir::DType::I64, {R}), ctr(ir::DType::I32, {R});
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t v = 0; v < V; ++v) x.setF(i * V + v, logits(i, v));
    auto [ti, ki, pi, si, ci] = params(i);
    t.setF(i, ti), k.setI(i, ki), p.setF(i, pi), seed.setI(i, si), ctr.setI(i, ci);
  }
  run.in = {{"x", x}, {"t", t}, {"k", k}, {"p", p}, {"seed", seed}, {"ctr", ctr}};
  return run;
}

/// The run's draws by its kernels on this CPU (checked equal to the interpreter's, row by row).
std::vector<int64_t> sampled(SampleRun& run) {
  auto want = ir::run(*run.g, run.in);
  EXPECT_TRUE(!!want) << errorText(want.takeError());
  std::map<std::string, ir::Tensor> buffers = run.in;
  const ir::Value* y = run.g->outputs[0];
  buffers.emplace("y", ir::Tensor(ir::DType::I64, y->type.shape()));
  runKernels(*run.g->nodes()[0], "sample", buffers);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < y->type.staticNumel().value(); ++i) {
    ids.push_back(buffers.at("y").getI(i));
    if (want) {
      EXPECT_EQ(ids.back(), want->at("y").getI(i)) << "row " << i;
    }
  }
  return ids;
}

} // namespace

TEST(Kernel, SampleMatchesInterpreter) {
  // Rows of every kind: greedy, a temperature alone, top-k (1, 5, 50), top-p (0.9, 0.5) and both,
  // over f32 logits and over bf16 ones (many ties); the kernel's bisections must find the
  // interpreter's sorted cuts, and its noise the interpreter's.
  std::mt19937 rng(11);
  std::normal_distribution<double> logit(0, 2);
  std::vector<double> table(97 * 300);
  for (double& v : table) v = logit(rng);
  const double temps[] = {0, 0.7, 1.3};
  const int64_t ks[] = {0, 1, 5, 50};
  const double ps[] = {1, 0.9, 0.5};
  for (const char* dtype : {"f32", "bf16"}) {
    auto run = sampleRun(dtype, 97, 300, [&](int64_t r, int64_t v) { return table[r * 300 + v]; }, [&](int64_t r) {
      return std::make_tuple(temps[r % 3], ks[r / 3 % 4], ps[r / 12 % 3], (int64_t)(r * 7919), (int64_t)(r % 5));
    });
    std::vector<int64_t> ids = sampled(run);
    for (int64_t r = 0; r < 97; ++r) { // greedy rows and top-k 1 rows take the row's first maximum
      if (temps[r % 3] != 0 && ks[r / 3 % 4] != 1) continue;
      const ir::Tensor& x = run.in.at("x");
      int64_t best = 0;
      for (int64_t v = 1; v < 300; ++v)
        if (x.getF(r * 300 + v) > x.getF(r * 300 + best)) best = v;
      if (temps[r % 3] == 0 || std::string(dtype) == "f32") {
        EXPECT_EQ(ids[r], best) << dtype << " row " << r;
      }
    }
  }
}

TEST(Kernel, SampleFrequenciesFollowTheSoftmax) {
  // 24,000 draws (rows of one set of logits, seeds 0..23,999): the frequencies must fit the
  // softmax of logits / temperature, cut to the top 4, or to the top-p set, renormalized (a
  // chi-square test at p = 0.001); tokens cut away are never drawn.
  const std::vector<double> x = {1.0, -0.5, 2.2, 0.3, 1.7, -2.0, 0.9, 2.0, -1.1, 0.0, 1.2, -0.3};
  const int64_t R = 24000, V = (int64_t)x.size();
  const double T = 0.8;
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
  struct Cut {
    int64_t k;
    double p;
    int64_t kept;      ///< the tokens the cut keeps (the largest ones)
    double critical;   ///< chi-square at p = 0.001 for kept - 1 degrees of freedom
  } cuts[] = {{0, 1, 12, 31.26}, {4, 1, 4, 16.27}, {0, 0.7, 0, 0}, {6, 0.8, 0, 0}};
  for (Cut& c : cuts) {
    std::vector<double> w(V);
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += w[v] = std::exp(x[v] / T);
    if (c.kept == 0) { // top-p over the top-k set: the smallest prefix reaching p
      int64_t limit = c.k ? c.k : V;
      double zk = 0, acc = 0;
      for (int64_t i = 0; i < limit; ++i) zk += w[order[i]];
      while (c.kept < limit && acc < c.p * zk) acc += w[order[c.kept++]];
      const double table[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26};
      c.critical = table[c.kept - 1];
    }
    SCOPED_TRACE("top_k " + std::to_string(c.k) + ", top_p " + std::to_string(c.p) + ": " + std::to_string(c.kept) + " tokens kept");
    ASSERT_GE(c.kept, 3);
    auto run = sampleRun("f32", R, V, [&](int64_t, int64_t v) { return x[v]; },
                         [&](int64_t r) { return std::make_tuple(T, c.k, c.p, r, (int64_t)7); });
    std::vector<int64_t> count(V);
    for (int64_t id : sampled(run)) ++count.at(id);
    double zKept = 0, chi2 = 0;
    for (int64_t i = 0; i < c.kept; ++i) zKept += w[order[i]];
    for (int64_t i = 0; i < V; ++i) {
      int64_t v = order[i];
      if (i >= c.kept) {
        EXPECT_EQ(count[v], 0) << "token " << v << " is cut away";
        continue;
      }
      double expected = R * w[v] / zKept;
      chi2 += (count[v] - expected) * (count[v] - expected) / expected;
    }
    EXPECT_LT(chi2, c.critical);
  }
}

TEST(Kernel, SampleGpuFormAssembles) {
  // The warp-per-row form (a GPU's): ptxas takes it, and its draws are the serial form's, which
  // the GPU check compares on the device.
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  auto run = sampleRun("bf16", 64, 50257, [](int64_t, int64_t v) { return (double)(v % 97) / 10; },
                       [](int64_t r) { return std::make_tuple(1.0, (int64_t)50, 0.9, r, (int64_t)0); });
  auto ks = kir::lowerForGpu("sample_gpu", *run.g->nodes()[0]);
  ASSERT_TRUE(!!ks) << errorText(ks.takeError());
  ASSERT_TRUE(ks->has_value());
  EXPECT_TRUE((**ks)[0].gpuOnly);
  llvm::LLVMContext ctx;
  auto spec = codegen::TargetSpec::nvptx("sm_90");
  auto mod = codegen::emitKernels(ctx, **ks, spec);
  ASSERT_TRUE(!!mod) << errorText(mod.takeError());
  auto ptx = codegen::compileModule(**mod, spec);
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  auto [rc, log] = assembled(*ptx, ptxas);
  EXPECT_EQ(rc, 0) << log;
}

