// Fused attention's kernels (and the paged cache's) against the reference interpreter on this
// CPU, and their GPU forms through ptxas: the mma.sync kernels of every GPU since sm_80 and, with
// every target Hopper, the warpgroup ones (codegen/kir/LowerAttentionGpu.cpp,
// LowerAttentionHopper.cpp). The GPU forms' numbers are checked on the device
// (bench/gpu_attention.py against PyTorch, tests/gpu/check_gpu.sh against the CPU).
#include "codegen/AttentionScratch.h"
#include "codegen/kir/LowerOps.h"
#include "codegen/llvm/Emitter.h"
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "tests/codegen/KernelJit.h"

#include <cmath>
#include <filesystem>
#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::test;

namespace {

/// A FusedAttention node and its gradient over random [2, 3, T, *] operands of `dtype` (with
/// `bthd`, [2, T, 3, *]; `packed`, tq = tk and d = dv: one [2, T, 3, 3, d] operand, layout bt3hd).
std::string attentionGraph(const char* dtype, int64_t tq, int64_t tk, bool causal, int64_t d = 8, int64_t dv = 5, bool bthd = false,
                           bool packed = false) {
  if (packed) // tq = tk, d = dv: q, k and v one tensor [2, T, 3, 3, d] (layout bt3hd), the result [2, T, 3, d]
    return "graph @g { input %x : " + std::string(dtype) + "[2, " + std::to_string(tq) + ", 3, 3, " + std::to_string(d) + "]\n input %dy : " +
           dtype + "[2, " + std::to_string(tq) + ", 3, " + std::to_string(d) + "]\n %y : ?[*], %lse : ?[*] = FusedAttention(%x, %x, %x) {causal = " +
           (causal ? "1" : "0") + ", scale = 0.4, layout = \"bt3hd\"}\n %dx : ?[*], _, _, %delta : ?[*] = FusedAttentionGrad(%x, %x, %x, %y, %lse, %dy)" +
           " {causal = " + (causal ? "1" : "0") + ", scale = 0.4, layout = \"bt3hd\"}\n output %y, %lse, %dx, %delta }";
  auto shape = [&](int64_t t, int64_t d) {
    std::string ts = std::to_string(t);
    return std::string(dtype) + (bthd ? "[2, " + ts + ", 3, " : "[2, 3, " + ts + ", ") + std::to_string(d) + "]";
  };
  std::string attrs = std::string(" {causal = ") + (causal ? "1" : "0") + ", scale = 0.4" + (bthd ? ", layout = \"bthd\"}" : "}");
  return "graph @g { input %q : " + shape(tq, d) + "\n input %k : " + shape(tk, d) + "\n input %v : " + shape(tk, dv) +
         "\n input %dy : " + shape(tq, dv) + "\n %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v)" + attrs +
         "\n %dq : ?[*], %dk : ?[*], %dv : ?[*], %delta : ?[*] = FusedAttentionGrad(%q, %k, %v, %y, %lse, %dy)" + attrs +
         "\n output %y, %lse, %dq, %dk, %dv, %delta }";
}

/// Runs each node's kernels of `g` in order on the CPU (two thread-pool halves each), on random
/// inputs (`seed`), each reading what the earlier ones wrote; every result must be within `tol`
/// (relative to 1 + |reference|) of the interpreter's (float64) values.
void kernelsMatchInterpreter(const ir::Graph& g, unsigned seed, double tol) {
  auto in = randomInputs(g, seed, -1.5, 1.5);
  auto want = ir::run(g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  std::map<std::string, ir::Tensor> buffers = in;
  for (const auto& n : g.nodes()) {
    for (const ir::Value* v : n->outputs)
      if (v) buffers.emplace(v->name, ir::Tensor(v->type.dtype, v->type.shape()));
    runKernels(*n, "k" + std::to_string(buffers.size()), buffers);
  }
  for (const ir::Value* v : g.outputs) {
    const ir::Tensor &got = buffers.at(v->name), &ref = want->at(v->name);
    for (int64_t i = 0; i < ref.numel(); ++i)
      EXPECT_NEAR(got.getF(i), ref.getF(i), tol * (1 + std::fabs(ref.getF(i)))) << ir::dtypeName(ref.dtype) << " %" << v->name << "[" << i << "]";
  }
}

} // namespace

TEST(Kernel, AttentionMatchesInterpreter) {
  struct Run {
    const char* dtype;
    int64_t tq, tk;
    bool causal;
    double tol;
    bool bthd = false, packed = false;
  };
  for (const Run& r : {Run{"f32", 7, 7, true, 1e-5}, Run{"f32", 5, 9, false, 1e-5}, Run{"f32", 4, 6, true, 1e-5}, Run{"f64", 6, 6, true, 1e-12},
                       Run{"bf16", 16, 16, true, 2e-2}, Run{"f32", 7, 7, true, 1e-5, true}, Run{"f32", 5, 9, false, 1e-5, true},
                       Run{"f32", 7, 7, true, 1e-5, false, true}, Run{"f64", 6, 6, false, 1e-12, false, true}}) {
    std::string text = attentionGraph(r.dtype, r.tq, r.tk, r.causal, 8, r.packed ? 8 : 5, r.bthd, r.packed);
    SCOPED_TRACE(text);
    auto g = ir::parse(text, "attention");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    kernelsMatchInterpreter(**g, 5, r.tol);
  }
}

// Grouped-query attention: 4 query heads over 2 key/value heads; dk and dv per query head. Also
// with the result (and dy) laid out [B, T, H, D] (result_layout), grouped or not.
TEST(Kernel, GroupedAttentionMatchesInterpreter) {
  for (bool causal : {true, false})
    for (int kvHeads : {2, 4})
      for (bool resultBthd : {false, true}) {
        if (kvHeads == 4 && !resultBthd) continue; // Kernel.AttentionMatchesInterpreter's
        std::string c = causal ? "1" : "0", kv = std::to_string(kvHeads), dy = resultBthd ? "f32[2, 6, 4, 5]" : "f32[2, 4, 6, 5]";
        std::string attrs = "{causal = " + c + ", scale = 0.4" + (resultBthd ? ", result_layout = \"bthd\"}" : "}");
        auto g = ir::parse("graph @g { input %q : f32[2, 4, 6, 8]\n input %k : f32[2, " + kv + ", 6, 8]\n input %v : f32[2, " + kv +
                               ", 6, 5]\n input %dy : " + dy + "\n %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) " + attrs + "\n"
                               " %dq : ?[*], %dk : ?[*], %dv : ?[*], %delta : ?[*] = FusedAttentionGrad(%q, %k, %v, %y, %lse, %dy) " + attrs +
                               "\n output %y, %lse, %dq, %dk, %dv, %delta }",
                           "grouped");
        ASSERT_TRUE(!!g) << errorText(g.takeError());
        ASSERT_FALSE(ir::inferShapes(**g, false));
        EXPECT_EQ((*g)->outputs[3]->type.shape(), (std::vector<int64_t>{2, 4, 6, 8})); // dk per query head
        if (resultBthd) {
          EXPECT_EQ((*g)->outputs[0]->type.shape(), (std::vector<int64_t>{2, 6, 4, 5}));
        }
        kernelsMatchInterpreter(**g, 6, 1e-5);
      }
}

TEST(Kernel, PagedCacheMatchesInterpreter) {
  // Five tokens of three sequences (two of them consecutive positions of one sequence, as a
  // prefill runs them, and one unused) write their keys and values into a pool of six pages of
  // four rows, then attend through the block tables; the kernels run in order on the CPU, the
  // cache write in place, and are compared with the interpreter.
  const char* text = "graph @g { input %pool : f32[6, 2, 4, 2, 8]\n input %k : f32[5, 2, 1, 8]\n input %v : f32[5, 2, 1, 8]\n"
                     " input %q : f32[5, 2, 1, 8]\n input %tables : i32[3, 3]\n input %seq : i32[5]\n input %pos : i32[5]\n"
                     " %w : ?[*] = KvCacheWrite(%pool, %k, %v, %tables, %seq, %pos)\n"
                     " %y : ?[*] = PagedAttention(%q, %w, %tables, %seq, %pos) {scale = 0.3}\n output %w, %y }";
  auto g = ir::parse(text, "paged");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  auto in = randomInputs(**g, 7, -1.5, 1.5);
  auto ints = [](std::vector<int64_t> v, std::vector<int64_t> shape) { return ir::Tensor::fromI64(ir::DType::I32, std::move(shape), v); };
  in["tables"] = ints({4, 1, -1, 0, 5, 2, 3, -1, -1}, {3, 3});
  in["seq"] = ints({0, 1, 1, 2, -1}, {5});
  in["pos"] = ints({5, 9, 10, 2, 0}, {5});
  auto want = ir::run(**g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  std::map<std::string, ir::Tensor> buffers = in;
  buffers["w"] = in.at("pool"); // the write runs in place
  buffers.emplace("y", ir::Tensor(ir::DType::F32, {5, 2, 1, 8}));
  for (const auto& n : (*g)->nodes()) runKernels(*n, "k_" + n->outputs[0]->name, buffers);
  for (const char* name : {"w", "y"}) {
    const ir::Tensor &got = buffers.at(name), &ref = want->at(name);
    for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(got.getF(i), ref.getF(i), 1e-5 * (1 + std::fabs(ref.getF(i)))) << "%" << name << "[" << i << "]";
  }
  for (int64_t i = 64; i < 80; ++i) EXPECT_EQ(buffers.at("y").getF(i), 0.0) << "the unused token's result";
}

TEST(Kernel, AttentionPtxAssembles) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  auto g = ir::parse(attentionGraph("bf16", 64, 64, true), "attention");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  std::vector<kir::Kernel> ks;
  for (const auto& n : (*g)->nodes()) {
    auto k = kir::lowerNode("k" + std::to_string(ks.size()), *n);
    ASSERT_TRUE(!!k) << errorText(k.takeError());
    for (auto& kk : *k) ks.push_back(std::move(kk));
  }
  auto ptx = sm90Ptx(ks);
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  auto [rc, log] = assembled(*ptx, ptxas);
  EXPECT_EQ(rc, 0) << log;
}

TEST(Kernel, AttentionTensorCoreForm) {
  // bf16 attention with sizes of multiples of 16 gets the tensor-core kernels on a GPU: mma.sync
  // products, every global load 16 bytes wide (8 bytes for operands 32 wide), registers capped
  // for 2 blocks of 128 threads an SM with at most a few spilled values. The numbers are checked
  // on the device (tests/gpu/check_gpu.sh: gptw_fused_bf16 against the CPU).
  struct Case {
    const char* dtype;
    int64_t t, d;
    bool causal, fits, bthd = false, packed = false;
  };
  for (const Case& c : {Case{"bf16", 64, 64, true, true}, Case{"bf16", 48, 32, false, true}, Case{"f32", 64, 64, true, false},
                        Case{"bf16", 40, 64, true, false}, Case{"bf16", 64, 64, true, true, true},
                        Case{"bf16", 64, 64, true, true, false, true}}) {
    std::string text = attentionGraph(c.dtype, c.t, c.t, c.causal, c.d, c.d, c.bthd, c.packed);
    SCOPED_TRACE(text);
    auto g = ir::parse(text, "attention");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    std::vector<kir::Kernel> ks;
    for (const auto& n : (*g)->nodes()) {
      auto gpu = kir::attentionGpu("k" + std::to_string(ks.size()), *n);
      ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
      ASSERT_EQ(gpu->has_value(), c.fits);
      if (c.fits) ks.insert(ks.end(), (*gpu)->begin(), (*gpu)->end());
    }
    if (!c.fits) continue;
    ASSERT_EQ(ks.size(), 3u); // forward; dq (and delta), dk and dv
    const char* ptxas = "/usr/local/cuda/bin/ptxas";
    if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
    auto ptx = sm90Ptx(ks);
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    EXPECT_NE(ptx->find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
    EXPECT_EQ(ptx->find("ld.global.u16"), std::string::npos) << *ptx;
    EXPECT_EQ(ptx->find("ld.global.u32"), std::string::npos) << *ptx;
    auto [rc, log] = assembled(*ptx, ptxas);
    EXPECT_EQ(rc, 0) << log;
    EXPECT_NE(log.find("spill stores"), std::string::npos) << log;
    for (size_t at = log.find("spill stores"); at != std::string::npos; at = log.find("spill stores", at + 1))
      EXPECT_LE(std::stoi(log.substr(log.rfind(',', at) + 2)), 128) << log;
    for (size_t at = log.find("Used "); at != std::string::npos; at = log.find("Used ", at + 1))
      EXPECT_LE(std::stoi(log.substr(at + 5)), 65536 / (128 * 2)) << log; // two blocks of 128 threads an SM
  }
}

TEST(Kernel, AttentionOnHopperIsWarpgroupProducts) {
  // With every GPU target Hopper, attention at head dims of 64 and 128 (GPT-2's and Llama's) is
  // warpgroup products: GPU blocks of 128 threads per 64 rows, run one iteration a thread; the
  // forward pass, dq and dk/dv read the other side's rows from shared memory in wgmma's layout
  // (1024-byte aligned; dynamic shared memory at 128). ptxas takes them with no serialized
  // products and no spills at 64 (dk/dv spills a little at 128: 255 registers); for other targets (sm_80)
  // attention stays mma.sync, and Hopper's kernels are refused by name. The numbers are checked
  // on the device (bench/gpu_attention.py against PyTorch, tests/gpu/check_gpu.sh against the CPU).
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  for (int64_t d : {64, 128}) {
    std::string text = attentionGraph("bf16", 128, 128, true, d, d, false, true);
    SCOPED_TRACE(text);
    auto g = ir::parse(text, "attention");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    std::vector<kir::Kernel> ks;
    for (const auto& n : (*g)->nodes()) {
      auto portable = kir::attentionGpu("p", *n);
      ASSERT_TRUE(!!portable && portable->has_value()) << (portable ? "" : errorText(portable.takeError()));
      for (const kir::Kernel& k : **portable) EXPECT_FALSE(kir::hasWgmma(k)) << k.name;
      auto hopper = kir::attentionGpu("k" + std::to_string(ks.size()), *n, kir::GpuArch{true});
      ASSERT_TRUE(!!hopper && hopper->has_value()) << (hopper ? "" : errorText(hopper.takeError()));
      ks.insert(ks.end(), (*hopper)->begin(), (*hopper)->end());
    }
    ASSERT_EQ(ks.size(), 3u); // forward; dq (and delta); dk and dv
    // Blocks of 64 rows: two stages of K and V (forward, dq) or of Q and dO (dk/dv), and at 128
    // dk/dv's K and V of its own keys too: 32, 32 and 32 KiB at 64 (static), 64, 64 and 96 at
    // 128 (dynamic shared memory).
    const int64_t kib = d == 64 ? 32 : 64;
    for (const kir::Kernel& k : ks) {
      ASSERT_TRUE(kir::hasWgmma(k)) << kir::print(k);
      EXPECT_EQ(k.threads, 128);
      EXPECT_EQ(k.body->extent, 2 * 3 * (128 / 16) * 32); // a warp per 16 rows of each of 2 x 3 problems
      int64_t tiles = 0;
      for (const kir::SharedArray& a : k.shared)
        if (a.dtype == ir::DType::BF16) {
          EXPECT_EQ(a.align, 1024);
          tiles += a.count * 2;
        }
      bool dkv = &k == &ks.back();
      EXPECT_EQ(tiles, (dkv && d == 128 ? kib + 32 : kib) << 10) << k.name;
      EXPECT_EQ(kir::dynamicSharedBytes(k) > 0, d == 128) << k.name;
    }
    if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
    llvm::LLVMContext ctx80;
    auto refused = codegen::emitKernels(ctx80, ks, codegen::TargetSpec::nvptx("sm_80"));
    ASSERT_FALSE(!!refused);
    EXPECT_NE(errorText(refused.takeError()).find("needs sm_90"), std::string::npos);
    auto ptx = sm90Ptx(ks);
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    EXPECT_NE(ptx->find("wgmma.mma_async.sync.aligned.m64n" + std::to_string(d) + "k16.f32.bf16.bf16"), std::string::npos);
    EXPECT_NE(ptx->find("fence.proxy.async.shared::cta"), std::string::npos);
    EXPECT_EQ(ptx->find("mma.sync"), std::string::npos);
    // Each softmax weight is one ex2 that flushes subnormals (without .ftz ptxas adds a compare
    // and two multiplies around each), and the forward divides once a row (a thread's two rows),
    // not once an output element.
    EXPECT_NE(ptx->find("ex2.approx.ftz.f32"), std::string::npos);
    EXPECT_EQ(ptx->find("ex2.approx.f32"), std::string::npos);
    EXPECT_EQ(ptx->find("div.rn.f32"), std::string::npos);
    int64_t reciprocals = 0;
    for (size_t at = ptx->find("rcp.rn.f32"); at != std::string::npos; at = ptx->find("rcp.rn.f32", at + 1)) ++reciprocals;
    EXPECT_EQ(reciprocals, 2);
    auto [rc, log] = assembled(*ptx, ptxas);
    EXPECT_EQ(rc, 0) << log;
    EXPECT_EQ(log.find("serialized"), std::string::npos) << log;
    EXPECT_NE(log.find("spill stores"), std::string::npos) << log;
    for (size_t at = log.find("spill stores"); at != std::string::npos; at = log.find("spill stores", at + 1))
      EXPECT_LE(std::stoi(log.substr(log.rfind(',', at) + 2)), d == 64 ? 0 : 128) << log;
  }
}

TEST(Kernel, GroupedAttentionOnHopperStoresScoreGradients) {
  // Grouped heads of 128 (Llama's) on Hopper: the gradient gets its scratch, and runs delta's
  // kernel, dK/dV storing dS^T (bf16 pairs into one 8 KiB stage in shared memory, one bulk copy a
  // block pair) and a dq kernel of one product a block pair reading it. dK/dV stays at two
  // blocks an SM (228 KiB of shared memory, 1 KiB of each block the driver's); ptxas takes the
  // bulk copies and their waits with no serialized products and no spills (each product's
  // constant offset added in its own assembly, not a descriptor a product kept live). The numbers: GpuSim's
  // AttentionGradientFromStoredScoreGradients, and on the device bench/gpu_train.py's Llama.
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  auto g = ir::parse("graph @g { input %q : bf16[1, 4, 256, 128]\n input %k : bf16[1, 2, 256, 128]\n input %v : bf16[1, 2, 256, 128]\n"
                     " input %dy : bf16[1, 4, 256, 128]\n %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.088}\n"
                     " %dq : ?[*], %dk : ?[*], %dv : ?[*], %delta : ?[*] = FusedAttentionGrad(%q, %k, %v, %y, %lse, %dy) {causal = 1, scale = 0.088}\n"
                     " output %y, %lse, %dq, %dk, %dv, %delta }",
                     "grouped");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  ASSERT_EQ(codegen::addAttentionScratch(**g, kir::GpuArch{true}), 1);
  const ir::Node& grad = *(*g)->nodes()[1];
  ASSERT_EQ(grad.outputs.size(), 5u);
  EXPECT_EQ(grad.outputs[4]->type.shape(), (std::vector<int64_t>{4 * (4 * 5 / 2) * 64 * 64})); // 4 problems, 10 block pairs each, 64 x 64 a pair
  auto ks = kir::attentionGpu("k", grad, kir::GpuArch{true});
  ASSERT_TRUE(!!ks && ks->has_value()) << (ks ? "" : errorText(ks.takeError()));
  ASSERT_EQ((*ks)->size(), 3u); // delta; dk and dv; dq
  const kir::Kernel& dkv = (**ks)[1];
  EXPECT_NE(dkv.name.find("_dkv"), std::string::npos) << dkv.name;
  EXPECT_LE(2 * (kir::dynamicSharedBytes(dkv) + 1024), 228 << 10) << kir::print(dkv);
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  auto ptx = sm90Ptx(**ks);
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  EXPECT_NE(ptx->find("cp.async.bulk.global.shared::cta.bulk_group"), std::string::npos);
  EXPECT_NE(ptx->find("cp.async.bulk.wait_group.read 0"), std::string::npos);
  EXPECT_NE(ptx->find("cp.async.bulk.wait_group 0"), std::string::npos);
  auto [rc, log] = assembled(*ptx, ptxas);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_EQ(log.find("serialized"), std::string::npos) << log;
  for (size_t at = log.find("spill stores"); at != std::string::npos; at = log.find("spill stores", at + 1))
    EXPECT_LE(std::stoi(log.substr(log.rfind(',', at) + 2)), 0) << log;
}
