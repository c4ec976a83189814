// The GPU forms of nodes (codegen/kir/LowerGpu.cpp and its neighbours) run in the GPU simulator
// (codegen/kir/Simulate.h) against the reference interpreter, at shapes where each form applies;
// and the simulator's checks, each shown to catch the mistake it is for.
#include "codegen/AttentionScratch.h"
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"
#include "codegen/kir/Simulate.h"
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "tests/codegen/KernelJit.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::test;

namespace {

/// Runs `ks` in order in the GPU simulator over `buffers` (by name): "" or the first failure;
/// `written` collects the buffers they write.
std::string simulateAll(const std::vector<kir::Kernel>& ks, std::map<std::string, ir::Tensor>& buffers, std::set<std::string>* written = nullptr) {
  for (const kir::Kernel& k : ks) {
    std::vector<void*> args;
    for (const kir::BufferArg& b : k.buffers) {
      args.push_back(buffers.at(b.name).bytes.data());
      if (written && b.written) written->insert(b.name);
    }
    if (Error e = kir::simulateGpu(k, args)) return errorText(std::move(e));
  }
  return "";
}

/// A tensor of `dtype` and `shape` whose bytes are all 0xFF: NaNs where nothing writes.
ir::Tensor unwritten(ir::DType dtype, std::vector<int64_t> shape) {
  ir::Tensor t(dtype, std::move(shape));
  std::fill(t.bytes.begin(), t.bytes.end(), (uint8_t)0xFF);
  return t;
}

struct Case {
  const char* name;
  std::string text; ///< a graph whose every value is an output
  double tol;       ///< relative to 1 + |reference|
  int64_t labels = 1000; ///< integer inputs (class labels) drawn from [0, labels)
};

/// Runs each node's GPU form (it must have one) in the simulator, on the interpreter's values of
/// its inputs, and compares every result it writes with the interpreter's.
/// With `scratch` the graph's attention gradients first get the scratch their GPU forms want
/// (codegen/AttentionScratch.h): at least one must.
void checkForms(const Case& c, kir::GpuArch arch = {}, bool scratch = false) {
  SCOPED_TRACE(c.name);
  auto g = ir::parse(c.text, c.name);
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  if (scratch) {
    ASSERT_GT(codegen::addAttentionScratch(**g, arch), 0);
  }
  auto in = randomInputs(**g, 11, -2, 2);
  for (ir::Value* v : (*g)->inputs)
    if (!ir::isFloat(v->type.dtype)) // class labels in [0, classes), one of them ignored (-100) where the loss allows it
      for (int64_t i = 0; i < in[v->name].numel(); ++i) in[v->name].setI(i, i == 3 ? -100 : (i * 7919) % c.labels);
  auto want = ir::run(**g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  for (const auto& [name, t] : in) want->emplace(name, t);
  int n = 0;
  for (const auto& node : (*g)->nodes()) {
    auto ks = kir::lowerForGpu("k" + std::to_string(n++), *node, arch);
    ASSERT_TRUE(!!ks) << errorText(ks.takeError());
    ASSERT_TRUE(ks->has_value()) << ir::describe(*node) << " has no GPU form at these shapes";
    std::map<std::string, ir::Tensor> buffers;
    for (const ir::Value* v : node->inputs)
      if (v) buffers[v->name] = v->kind == ir::ValueKind::Const ? *v->data : want->at(v->name);
    for (const ir::Value* v : node->outputs)
      if (v) buffers[v->name] = unwritten(v->type.dtype, v->type.shape());
    std::set<std::string> written;
    if (arch.hopper && node->op == ir::Op::FusedAttention) {
      EXPECT_TRUE(std::any_of((*ks)->begin(), (*ks)->end(), [](const kir::Kernel& k) { return kir::hasWgmma(k); })) << "Hopper's form";
    }
    ASSERT_EQ(simulateAll(**ks, buffers, &written), "");
    EXPECT_FALSE(written.empty());
    for (const std::string& name : written) {
      if (node->op == ir::Op::FusedAttentionGrad && node->outputs.size() > 4 && node->outputs[4]->name == name) continue; // its contents are the GPU's own
      const ir::Tensor &got = buffers.at(name), &ref = want->at(name);
      for (int64_t i = 0; i < ref.numel(); ++i)
        ASSERT_NEAR(got.getF(i), ref.getF(i), c.tol * (1 + std::fabs(ref.getF(i)))) << ir::describe(*node) << " %" << name << "[" << i << "]";
    }
  }
}

/// A layer norm (or RMS norm) over `rows` rows of d and its gradient, f32.
std::string layerNorm(bool rms, int64_t rows = 64, int64_t d = 256) {
  std::string r = std::to_string(rows), c = std::to_string(d), x = "f32[" + r + ", " + c + "]", stat = "f32[" + r + ", 1]", p = "f32[" + c + "]";
  std::string head = "graph @g { input %x : " + x + "\n input %s : " + p + "\n input %b : " + p + "\n input %dy : " + x + "\n";
  if (rms)
    return head + " %y : ?[*], %r : " + stat + " = RmsNorm(%x, %s) {axis = -1, epsilon = 1e-5}\n"
                  " %dx : ?[*], %ds : " + p + " = RmsNormGrad(%x, %s, %dy, %r) {axis = -1, epsilon = 1e-5}\n output %y, %r, %dx, %ds }";
  return head + " %y : ?[*], %m : " + stat + ", %r : " + stat + " = LayerNormalization(%x, %s, %b) {axis = -1, epsilon = 1e-5}\n"
                " %dx : ?[*], %ds : " + p + ", %db : " + p + " = LayerNormGrad(%x, %s, %dy, %m, %r) {axis = -1, epsilon = 1e-5}\n"
                " output %y, %m, %r, %dx, %ds, %db }";
}

/// The gradient of a softmax cross-entropy over `rows` x `classes` scores of `dtype`, with its loss.
std::string sceLoss(const std::string& dtype, int rows, int classes) {
  std::string r = std::to_string(rows);
  return "graph @g { input %x : " + dtype + "[" + r + ", " + std::to_string(classes) + "]\n input %t : i64[" + r +
         "]\n input %d : f32[]\n %dx : ?[*], %l : f32[] = SceLossGrad(%x, %t, %d) {ignore_index = -100" +
         (dtype == "f32" ? "" : ", to = \"f32\"") + "}\n output %dx, %l }";
}

/// Causal attention and its gradient over q of type `qs`, k and v of type `kvs` (fewer heads:
/// grouped-query attention), bf16, scale 1/8; with `resultBthd` the result (and dy, of type `dys`)
/// laid out [B, T, H, D].
std::string attention(const std::string& qs, const std::string& kvs, bool resultBthd = false, const std::string& dys = "", bool causal = true) {
  std::string attrs = std::string(causal ? "{causal = 1, scale = 0.125" : "{scale = 0.125") + (resultBthd ? ", result_layout = \"bthd\"}" : "}");
  return "graph @g { input %q : " + qs + "\n input %k : " + kvs + "\n input %v : " + kvs + "\n input %dy : " + (dys.empty() ? qs : dys) +
         "\n %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) " + attrs + "\n"
         " %dq : ?[*], %dk : ?[*], %dv : ?[*], %delta : ?[*] = FusedAttentionGrad(%q, %k, %v, %y, %lse, %dy) " + attrs + "\n"
         " output %y, %lse, %dq, %dk, %dv, %delta }";
}

} // namespace

TEST(GpuSim, FormsMatchInterpreter) {
  std::vector<Case> cases = {
      {"softmax", "graph @g { input %x : f32[64, 256]\n input %dy : f32[64, 256]\n %y : ?[*] = Softmax(%x) {axis = -1}\n"
                  " %dx : ?[*] = SoftmaxGrad(%y, %dy) {axis = -1}\n %l : ?[*] = LogSoftmax(%x) {axis = -1}\n output %y, %dx, %l }", 2e-5},
      {"softmax_bf16", "graph @g { input %x : bf16[32, 512]\n %y : ?[*] = Softmax(%x) {axis = -1}\n output %y }", 1e-2},
      {"layer_norm", layerNorm(false), 1e-4},
      {"layer_norm_bf16", "graph @g { input %x : bf16[64, 256]\n input %s : bf16[256]\n input %b : bf16[256]\n"
                          " %y : ?[*] = LayerNormalization(%x, %s, %b) {axis = -1, epsilon = 1e-5}\n output %y }", 2e-2},
      {"rms_norm", layerNorm(true), 1e-4},
      // The gradients' fused form: each warp walks 4 rows (above), 2 (48 rows) or 1 (Llama's rows
      // of 2,048); a block's last columns past a multiple of 256 (rows of 320).
      {"layer_norm_walk_2", layerNorm(false, 48, 320), 1e-4},
      {"rms_norm_walk_1", layerNorm(true, 8, 2048), 1e-4},
      {"sum_to_columns", "graph @g { input %x : f32[2048, 96]\n const %s : i64[1] = dense<\"0x6000000000000000\">\n"
                         " %y : ?[*] = SumTo(%x, %s)\n output %y }", 1e-5},
      {"sum_to_bias_bf16", "graph @g { input %x : bf16[4096, 384]\n const %s : i64[1] = dense<\"0x8001000000000000\">\n"
                           " %y : ?[*] = SumTo(%x, %s) {to = \"f32\"}\n output %y }", 1e-5},
      {"sum_to_bias_blocks_bf16", "graph @g { input %x : bf16[2048, 512]\n const %s : i64[1] = dense<\"0x0002000000000000\">\n"
                                  " %y : ?[*] = SumTo(%x, %s) {to = \"f32\"}\n output %y }", 1e-5},
      {"mean_leading_blocks", "graph @g { input %x : f32[4, 256, 256]\n const %a : i64[2] = dense<\"0x00000000000000000100000000000000\">\n"
                              " %y : ?[*] = ReduceMean(%x, %a) {keepdims = 0}\n output %y }", 1e-5},
      {"reduce_rows", "graph @g { input %x : f32[8, 4096]\n const %a : i64[1] = dense<\"0x0100000000000000\">\n"
                      " %y : ?[*] = ReduceMean(%x, %a) {keepdims = 0}\n output %y }", 1e-5},
      {"gather_grad", "graph @g { input %dy : f32[6, 64]\n input %i : i64[6]\n const %s : i64[2] = dense<\"0xe8030000000000004000000000000000\">\n"
                      " %dx : ?[*] = GatherGrad(%dy, %i, %s) {axis = 0}\n output %dx }", 1e-6},
      {"loss_grad_rows", sceLoss("f32", 64, 1000), 1e-4},
      {"loss_grad_block", sceLoss("f32", 4, 8192), 1e-4},
      {"loss_grad_block_odd", sceLoss("f32", 3, 8193), 1e-4},
      // bf16 rows: 8,193 classes (rows off the 16-byte vectors' alignment: their edge elements one
      // a thread), 8,200 (two whole steps of 16-byte loads and a part step of one thread), 21 and
      // 13 (short rows a warp's lanes do not divide).
      {"loss_grad_block_bf16_odd", sceLoss("bf16", 3, 8193), 1e-2},
      {"loss_grad_block_bf16_part", sceLoss("bf16", 2, 8200), 1e-2},
      {"loss_grad_edges_bf16", sceLoss("bf16", 6, 21), 1e-2, 21},
      {"loss_grad_short_bf16", sceLoss("bf16", 6, 13), 1e-2, 13},
      {"argmax", "graph @g { input %x : f32[16, 512]\n %y : ?[*] = ArgMax(%x) {axis = -1, keepdims = 0}\n output %y }", 0},
      {"attention_bf16", attention("bf16[1, 2, 64, 64]", "bf16[1, 2, 64, 64]"), 3e-2},
      // Grouped-query attention: 4 query heads over 2 key/value heads.
      {"attention_bf16_grouped", attention("bf16[1, 4, 64, 64]", "bf16[1, 2, 64, 64]"), 3e-2},
      // The result written [B, T, H, D] (a model's head transpose after attention; Llama's grouped one).
      {"attention_bf16_grouped_result_bthd", attention("bf16[2, 4, 64, 64]", "bf16[2, 2, 64, 64]", true, "bf16[2, 64, 4, 64]"), 3e-2},
  };
  for (const Case& c : cases) checkForms(c);
  // Hopper's forms: attention's products as warpgroup ones (wgmma), at GPT-2's head size and at 128
  // (Llama's), with as many key/value heads as query heads and grouped (4 over 2).
  for (int64_t d : {64, 128})
    for (int64_t kvHeads : {4, 2}) {
      std::string dd = std::to_string(d), name = "attention_sm90_" + std::string(kvHeads == 2 ? "grouped_" : "") + "d" + dd;
      checkForms({name.c_str(), attention("bf16[1, 4, 128, " + dd + "]", "bf16[1, " + std::to_string(kvHeads) + ", 128, " + dd + "]"), 3e-2},
                 kir::GpuArch{true});
    }
  // Llama's: grouped, the result [B, T, H, D], two batches.
  checkForms({"attention_sm90_grouped_result_bthd_d128", attention("bf16[2, 4, 128, 128]", "bf16[2, 2, 128, 128]", true, "bf16[2, 128, 4, 128]"), 3e-2},
             kir::GpuArch{true});
  // Four blocks of 64 positions at 128: dK/dV's walks start at their blocks' first keys, the
  // blocks the diagonal crosses masked.
  checkForms({"attention_sm90_four_blocks_d128", attention("bf16[1, 2, 256, 128]", "bf16[1, 2, 256, 128]"), 3e-2}, kir::GpuArch{true});
  // Heads of 64 over 512 positions: walks of eight key blocks, those below the diagonal whole and
  // those it crosses masked (blocks placed at another block size's offsets fail here); and
  // Hopper's only unmasked case (a walk that drops its last block fails only there).
  checkForms({"attention_sm90_eight_blocks_d64", attention("bf16[1, 2, 512, 64]", "bf16[1, 2, 512, 64]"), 3e-2}, kir::GpuArch{true});
  checkForms({"attention_sm90_unmasked_d64", attention("bf16[1, 2, 512, 64]", "bf16[1, 2, 512, 64]", false, "", false), 3e-2},
             kir::GpuArch{true});
}

TEST(GpuSim, AttentionGradientFromStoredScoreGradients) {
  // Hopper at grouped heads of 128: delta's kernel, dK/dV storing dS^T through shared memory by
  // bulk copies, dq of one product a block pair reading it. Three blocks of 64 positions (a
  // causal problem's six block pairs: the walks' stored tile is written three times, waited for
  // in between), Llama's layout (the result [B, T, H, D]) and without a mask (nine pairs).
  checkForms({"attention_sm90_stored_grouped_d128", attention("bf16[1, 4, 192, 128]", "bf16[1, 2, 192, 128]"), 3e-2}, kir::GpuArch{true}, true);
  checkForms({"attention_sm90_stored_grouped_result_bthd_d128", attention("bf16[2, 4, 128, 128]", "bf16[2, 2, 128, 128]", true, "bf16[2, 128, 4, 128]"), 3e-2},
             kir::GpuArch{true}, true);
  checkForms({"attention_sm90_stored_grouped_unmasked_d128", attention("bf16[1, 4, 192, 128]", "bf16[1, 2, 192, 128]", false, "", false), 3e-2},
             kir::GpuArch{true}, true);
  // Four blocks of 64 positions: ten block pairs a problem stored and read back.
  checkForms({"attention_sm90_stored_grouped_four_blocks_d128", attention("bf16[1, 4, 256, 128]", "bf16[1, 2, 256, 128]"), 3e-2},
             kir::GpuArch{true}, true);
  // Ungrouped heads of 128 and heads of 64 keep their seven products (addAttentionScratch's
  // measurements; at 64 the scratch would outweigh them in GPT-2's memory), and so does sm_80.
  for (const char* shape : {"bf16[1, 2, 128, 128]", "bf16[1, 2, 128, 64]"}) {
    auto g = ir::parse(attention(shape, shape), "ungrouped");
    ASSERT_TRUE(!!g);
    ASSERT_FALSE(ir::inferShapes(**g, false));
    EXPECT_EQ(codegen::addAttentionScratch(**g, kir::GpuArch{true}), 0) << shape;
  }
  auto g = ir::parse(attention("bf16[1, 4, 128, 128]", "bf16[1, 2, 128, 128]"), "grouped");
  ASSERT_TRUE(!!g);
  ASSERT_FALSE(ir::inferShapes(**g, false));
  EXPECT_EQ(codegen::addAttentionScratch(**g, kir::GpuArch{false}), 0);
}


namespace {

/// The GPU forms' kernels with shared memory (the column sums) of g's nodes but its forward layer
/// norms (which give the gradients their statistics).
std::vector<kir::Kernel> columnSumKernels(const ir::Graph& g) {
  std::vector<kir::Kernel> out;
  for (const auto& n : g.nodes()) {
    if (n->op == ir::Op::LayerNormalization) continue;
    auto ks = kir::lowerForGpu("k_" + n->outputs.back()->name, *n);
    if (!ks) {
      ADD_FAILURE() << errorText(ks.takeError());
      continue;
    }
    EXPECT_TRUE(ks->has_value()) << ir::describe(*n) << " has no GPU form";
    if (*ks)
      for (const kir::Kernel& k : **ks)
        if (!k.shared.empty()) out.push_back(k);
  }
  return out;
}

} // namespace

TEST(GpuSim, ColumnSumsLoadSixteenBytes) {
  // A bias gradient and a layer norm's dscale and dbias as column sums a block per tile: 16-byte
  // loads (bf16: 8 columns a lane; f32: 4), partial sums through shared memory, and PTX that ptxas
  // assembles.
  auto g = ir::parse("graph @g { input %x : bf16[2048, 768]\n const %s : i64[1] = dense<\"0x0003000000000000\">\n"
                     " %y : ?[*] = SumTo(%x, %s) {to = \"f32\"}\n input %h : f32[2048, 768]\n input %sc : f32[768]\n input %b : f32[768]\n"
                     " %n : ?[*], %m : f32[2048, 1], %r : f32[2048, 1] = LayerNormalization(%h, %sc, %b) {axis = -1, epsilon = 1e-5}\n"
                     " _, %ds : f32[768], %db : f32[768] = LayerNormGrad(%h, %sc, %h, %m, %r) {axis = -1, epsilon = 1e-5}\n"
                     " output %y, %ds, %db }",
                     "columns");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  std::vector<kir::Kernel> blocks = columnSumKernels(**g);
  ASSERT_EQ(blocks.size(), 2u) << "the bias gradient's and the layer norm's parameter gradients";
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  for (const kir::Kernel& k : blocks) {
    auto ptx = sm90Ptx({k});
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    EXPECT_NE(ptx->find("ld.global.v4"), std::string::npos) << k.name << ": 16-byte loads";
    EXPECT_NE(ptx->find("bar.sync"), std::string::npos) << k.name;
    auto [rc, log] = assembled(*ptx, ptxas);
    EXPECT_EQ(rc, 0) << log;
  }
}

TEST(GpuSim, ColumnSumsRunTogether) {
  // Two column sums a block per tile (a bias gradient's, a layer norm's dscale and dbias) as the
  // parts of one horizontal kernel (FuseLaunches' CallRun), their shared arrays side by side, with
  // an elementwise part: simulated, the interpreter's sums.
  auto g = ir::parse("graph @g { input %x : bf16[1024, 512]\n const %s : i64[1] = dense<\"0x0002000000000000\">\n"
                     " %y : ?[*] = SumTo(%x, %s) {to = \"f32\"}\n input %h : f32[256, 256]\n input %sc : f32[256]\n input %b : f32[256]\n"
                     " input %d : f32[256, 256]\n"
                     " %n : ?[*], %m : f32[256, 1], %r : f32[256, 1] = LayerNormalization(%h, %sc, %b) {axis = -1, epsilon = 1e-5}\n"
                     " _, %ds : f32[256], %db : f32[256] = LayerNormGrad(%h, %sc, %d, %m, %r) {axis = -1, epsilon = 1e-5}\n"
                     " output %y, %m, %r, %ds, %db }",
                     "columns");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  auto in = randomInputs(**g, 3, -2, 2);
  auto want = ir::run(**g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  std::map<std::string, ir::Tensor> buffers = in;
  for (const char* name : {"m", "r"}) buffers[name] = want->at(name);
  for (const char* name : {"y", "ds", "db"}) buffers[name] = ir::Tensor(ir::DType::F32, {name[0] == 'y' ? 512 : 256}); // zeroed
  std::vector<kir::Kernel> sums = columnSumKernels(**g);
  ASSERT_EQ(sums.size(), 2u);
  // And a part of 1,000 iterations, not whole blocks, that needs none (an elementwise kernel).
  ir::Graph side;
  kir::Kernel fill = kir::zeroKernel("fill", side.addInput("t", ir::Type::of(ir::DType::F32, {1000})));
  buffers["t"] = unwritten(ir::DType::F32, {1000});
  sums.push_back(fill);
  std::vector<kir::HorizontalPart> parts;
  for (const kir::Kernel& k : sums) {
    ASSERT_TRUE(kir::isHorizontalPart(k)) << k.name;
    std::vector<std::string> names;
    for (const kir::BufferArg& b : k.buffers) names.push_back(b.name);
    parts.push_back({&k, names});
  }
  kir::Kernel h = kir::horizontal("h", parts);
  ASSERT_TRUE(kir::isHorizontal(h));
  ASSERT_EQ(h.shared.size(), 2u);
  ASSERT_EQ(simulateAll({h}, buffers), "");
  for (const char* name : {"y", "ds", "db"}) {
    const ir::Tensor &got = buffers.at(name), &ref = want->at(name);
    for (int64_t i = 0; i < ref.numel(); ++i) ASSERT_NEAR(got.getF(i), ref.getF(i), 1e-4 * (1 + std::fabs(ref.getF(i)))) << name << "[" << i << "]";
  }
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(buffers.at("t").getF(i), 0.0) << i;
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  auto ptx = sm90Ptx({h});
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  auto [rc, log] = assembled(*ptx, ptxas);
  EXPECT_EQ(rc, 0) << log;
}

TEST(GpuSim, ColumnSumOfTheGeluGradient) {
  // The bias gradient's GPU form with the GELU gradient as its prologue (RowGroups test
  // ABiasGradientMovesUpToItsGeluGradient): simulated, it stores the interpreter's GELU gradient
  // and gives its column sums.
  auto g = ir::parse("graph @g { input %h : bf16[1024, 512]\n input %d : bf16[1024, 512]\n"
                     " const %c : i64[1] = dense<\"0x0002000000000000\">\n"
                     " %dh : ?[*] = UnaryGrad(%h, %d) {of = \"Gelu\", approximate = \"none\"}\n"
                     " %db : ?[*] = SumTo(%dh, %c) {to = \"f32\"}\n output %dh, %db }",
                     "bias");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  auto in = randomInputs(**g, 5, -3, 3);
  auto want = ir::run(**g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  const auto& nodes = (*g)->nodes();
  auto ks = kir::lowerRowGroupGpu("k", kir::RowGroup{{nodes[0].get()}, nodes[1].get(), {}, true, {}, true});
  ASSERT_TRUE(!!ks && ks->has_value());
  std::map<std::string, ir::Tensor> buffers = in;
  buffers["c"] = *(*g)->findValue("c")->data;
  buffers["dh"] = unwritten(ir::DType::BF16, {1024, 512});
  buffers["db"] = unwritten(ir::DType::F32, {512});
  ASSERT_EQ(simulateAll(**ks, buffers), "");
  for (const char* name : {"dh", "db"}) {
    const ir::Tensor &got = buffers.at(name), &ref = want->at(name);
    double tol = name[1] == 'h' ? 1e-2 : 1e-3; // dh in bf16, a last-bit flip here and there (the GELU against libm's); db sums dh as stored
    for (int64_t i = 0; i < ref.numel(); ++i) ASSERT_NEAR(got.getF(i), ref.getF(i), tol * (1 + std::fabs(ref.getF(i)))) << name << "[" << i << "]";
  }
}

TEST(GpuSim, RowGroupsMatchInterpreter) {
  // Row ops with the elementwise work around them, as GPT-2's step runs them on a GPU: attention's
  // scale, mask and softmax with the cast after it; a residual sum stored by the layer norm that
  // reads it, with the cast of its result; the layer norm's gradient taking its widened dy and
  // adding the residual gradient; an RMS norm's gradient adding the three gradients of its
  // output (a Llama's q, k and v projections') itself (codegen/Schedule.cpp's row groups,
  // kir::lowerRowGroupGpu).
  struct Group {
    const char* name;
    std::string text;
    size_t skip, prologue, epilogue; ///< nodes outside the group first (they give it operands); then before and after the row op
    bool storePrologue;
    double tol;
  };
  std::vector<Group> groups = {
      {"softmax", "graph @g { input %s : bf16[2, 64, 64]\n input %mask : bool[1, 64, 64]\n const %scale : f32[] = dense<\"0x0000003e\">\n"
                  " const %ninf : f32[] = dense<\"0x000080ff\">\n %f : ?[*] = Cast(%s) {to = \"f32\"}\n %m : ?[*] = Mul(%f, %scale)\n"
                  " %w : ?[*] = Where(%mask, %m, %ninf)\n %p : ?[*] = Softmax(%w) {axis = -1}\n %pb : ?[*] = Cast(%p) {to = \"bf16\"}\n"
                  " output %pb }",
       0, 3, 1, false, 1e-2},
      {"layer_norm", "graph @g { input %proj : bf16[64, 256]\n input %res : f32[64, 256]\n input %w : f32[256]\n input %b : f32[256]\n"
                     " %p : ?[*] = Cast(%proj) {to = \"f32\"}\n %h : ?[*] = Add(%res, %p)\n"
                     " %y : ?[*], %mean : ?[*], %inv : ?[*] = LayerNormalization(%h, %w, %b) {axis = -1}\n %yb : ?[*] = Cast(%y) {to = \"bf16\"}\n"
                     " output %yb, %h, %mean, %inv }",
       0, 2, 1, true, 1e-2},
      {"layer_norm_grad", "graph @g { input %x : f32[64, 256]\n input %w : f32[256]\n input %b : f32[256]\n input %dyb : bf16[64, 256]\n"
                          " input %r : f32[64, 256]\n %y : ?[*], %mean : ?[*], %inv : ?[*] = LayerNormalization(%x, %w, %b) {axis = -1}\n"
                          " %dy : ?[*] = Cast(%dyb) {to = \"f32\"}\n"
                          " %dx : ?[*], %dw : f32[256], %db : f32[256] = LayerNormGrad(%x, %w, %dy, %mean, %inv) {axis = -1}\n"
                          " %t : ?[*] = Add(%dx, %r)\n output %t, %dw, %db, %mean, %inv }",
       1, 1, 1, false, 1e-4},
      {"rms_norm_grad_of_three", "graph @g { input %x : f32[64, 256]\n input %w : f32[256]\n input %a : bf16[64, 256]\n input %b : bf16[64, 256]\n"
                                 " input %c : bf16[64, 256]\n input %r : f32[64, 256]\n %y : ?[*], %inv : ?[*] = RmsNorm(%x, %w) {axis = -1}\n"
                                 " %ab : ?[*] = Add(%a, %b)\n %abc : ?[*] = Add(%ab, %c)\n %dy : ?[*] = Cast(%abc) {to = \"f32\"}\n"
                                 " %dx : ?[*], %dw : f32[256] = RmsNormGrad(%x, %w, %dy, %inv) {axis = -1}\n"
                                 " %t : ?[*] = Add(%dx, %r)\n output %t, %dw, %inv }",
       1, 3, 1, false, 1e-2},
  };
  for (const Group& c : groups) {
    SCOPED_TRACE(c.name);
    auto g = ir::parse(c.text, c.name);
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    auto in = randomInputs(**g, 9, -2, 2);
    if (in.count("mask")) // a causal mask
      for (int64_t i = 0; i < 64 * 64; ++i) in["mask"].setI(i, i % 64 <= i / 64);
    auto want = ir::run(**g, in);
    ASSERT_TRUE(!!want) << errorText(want.takeError());
    std::vector<const ir::Node*> nodes; // the group's
    for (size_t i = c.skip; i < (*g)->nodes().size(); ++i) nodes.push_back((*g)->nodes()[i].get());
    std::set<const ir::Node*> inGroup(nodes.begin(), nodes.end());
    kir::RowGroup rows{{nodes.begin(), nodes.begin() + (std::ptrdiff_t)c.prologue}, nodes[c.prologue],
                       {nodes.begin() + (std::ptrdiff_t)c.prologue + 1, nodes.end()}, false, std::vector<bool>(c.epilogue, true), c.storePrologue};
    auto ks = kir::lowerRowGroupGpu("k", rows);
    ASSERT_TRUE(!!ks) << errorText(ks.takeError());
    ASSERT_TRUE(ks->has_value());
    std::map<std::string, ir::Tensor> buffers = in;
    for (const auto& v : (*g)->consts) buffers[v->name] = *v->data;
    std::vector<const ir::Value*> results; // the group's; the others (a forward pass's statistics) are its operands
    for (const ir::Value* v : (*g)->outputs) {
      if (inGroup.count(v->producer)) results.push_back(v);
      buffers[v->name] = inGroup.count(v->producer) ? unwritten(v->type.dtype, v->type.shape()) : want->at(v->name);
    }
    ASSERT_EQ(simulateAll(**ks, buffers), "");
    for (const ir::Value* v : results) {
      const ir::Tensor &got = buffers.at(v->name), &ref = want->at(v->name);
      for (int64_t i = 0; i < ref.numel(); ++i)
        ASSERT_NEAR(got.getF(i), ref.getF(i), c.tol * (1 + std::fabs(ref.getF(i)))) << "%" << v->name << "[" << i << "]";
    }
  }
}

TEST(GpuSim, LossGradientOfAnOddVocabularyIsABlockPerRow) {
  // GPT-2's 50,257 classes: a row is a block's, its scores moved 16 bytes a load though no row
  // but every eighth starts on a multiple of 8 (bf16) or 4 (f32); and 1,000 classes, which a
  // warp's lanes do not divide: not the fallback's thread per row that re-sums every target's
  // weight. (FormsMatchInterpreter simulates both sizes' forms.)
  for (int64_t classes : {50257, 1000})
    for (const char* dtype : {"f32", "bf16"}) {
      auto g = ir::parse(sceLoss(dtype, 4, (int)classes), "odd");
      ASSERT_TRUE(!!g) << errorText(g.takeError());
      ASSERT_FALSE(ir::inferShapes(**g, false));
      auto ks = kir::lowerForGpu("k", *(*g)->nodes().front());
      ASSERT_TRUE(ks && *ks);
      EXPECT_TRUE(std::any_of((*ks)->begin(), (*ks)->end(), [](const kir::Kernel& k) { return k.threads == 512 && !k.shared.empty(); }))
          << classes << " " << dtype;
      auto ptx = sm90Ptx(**ks);
      ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
      std::string load = std::string(dtype) == "f32" ? "ld.global.v4.f32" : "ld.global.v4.b32";
      EXPECT_NE(ptx->find(load), std::string::npos) << classes << " " << dtype << ":\n" << *ptx;
      EXPECT_NE(ptx->find("st.global.v4"), std::string::npos) << classes << " " << dtype;
    }
}

// --- the simulator's checks: each mistake a kernel could make, caught ---

namespace {

using namespace sgc::kir;
using B = kir::Builder;

/// A kernel of one parallel loop over `extent` iterations (blocks of `threads`), buffers
/// x (f32[n], read) and y (f32[n], written).
Kernel kernelOf(int64_t extent, int64_t n, std::vector<StmtRef> body, int threads = 64, std::vector<SharedArray> shared = {}) {
  Kernel k;
  k.name = "probe";
  k.buffers = {{"x", ir::DType::F32, n, false}, {"y", ir::DType::F32, n, true}};
  k.numLoopVars = 4, k.numLocals = 4;
  k.threads = threads;
  k.gpuOnly = true;
  k.shared = std::move(shared);
  k.body = loop(0, extent, true, std::move(body));
  return k;
}

std::string simulated(const Kernel& k, std::vector<float>& x, std::vector<float>& y) {
  Error e = simulateGpu(k, {x.data(), y.data()});
  return e ? errorText(std::move(e)) : "";
}

ExprRef xAt(ExprRef i) { return load(0, std::move(i), Scalar::F32); }
ExprRef lane() { return binary(KOp::IMod, loopVar(0), B::i(64)); }

} // namespace

TEST(GpuSim, BlockSumThroughSharedMemory) {
  // Each block of 64 sums its x through shared memory: every thread stores its element, a
  // barrier, then thread 0 adds them up. Right with the barrier; a race without it.
  for (bool withBarrier : {true, false}) {
    std::vector<StmtRef> body{sharedStore(0, lane(), xAt(loopVar(0)))};
    if (withBarrier) body.push_back(barrier());
    std::vector<StmtRef> sum{let(0, constant(0, Scalar::F32))};
    sum.push_back(loop(1, 64, false, {set(0, local(0, Scalar::F32) + sharedLoad(0, loopVar(1), Scalar::F32))}));
    sum.push_back(store(1, binary(KOp::IDiv, loopVar(0), B::i(64)), local(0, Scalar::F32)));
    body.push_back(loopUpTo(2, 1, select(eq(lane(), B::i(0)), B::i(1), B::i(0)), std::move(sum)));
    Kernel k = kernelOf(128, 128, std::move(body), 64, {SharedArray{ir::DType::F32, 64}});
    std::vector<float> x(128), y(128, 0);
    for (int i = 0; i < 128; ++i) x[i] = (float)i;
    std::string e = simulated(k, x, y);
    if (withBarrier) {
      EXPECT_EQ(e, "");
      EXPECT_EQ(y[0], 63 * 64 / 2);
      EXPECT_EQ(y[1], (64 + 127) * 64 / 2);
    } else {
      EXPECT_NE(e.find("thread 0 reads element 1 of shared array 0, which thread 1 wrote with no barrier between"), std::string::npos) << e;
    }
  }
}

TEST(GpuSim, CatchesWhatAGpuWouldGetWrong) {
  std::vector<float> x(64, 1), y(64, 0);
  // A store one past the buffer.
  EXPECT_NE(simulated(kernelOf(64, 64, {store(1, loopVar(0) + B::i(1), xAt(loopVar(0)))}), x, y).find("a store of %y at 64, outside its 64 elements"),
            std::string::npos);
  // A load before the buffer.
  EXPECT_NE(simulated(kernelOf(64, 64, {store(1, loopVar(0), xAt(loopVar(0) - B::i(1)))}), x, y).find("a load of %x at -1"), std::string::npos);
  // A barrier that half of the block skips.
  StmtRef half = loopUpTo(1, 1, select(lt(lane(), B::i(32)), B::i(1), B::i(0)), {barrier()});
  EXPECT_NE(simulated(kernelOf(64, 64, {half}, 64, {SharedArray{ir::DType::F32, 64}}), x, y).find("a barrier reached by 32 of the block's 64 threads"),
            std::string::npos);
  // A warp reduction that lanes 16..31 do not reach.
  StmtRef partial = loopUpTo(1, 1, select(lt(binary(KOp::IMod, loopVar(0), B::i(32)), B::i(16)), B::i(1), B::i(0)),
                             {store(1, loopVar(0), warpReduce(KOp::Add, xAt(loopVar(0))))});
  EXPECT_NE(simulated(kernelOf(64, 64, {partial}), x, y).find("a warp reduction reached by 16 of warp 0's 32 lanes"), std::string::npos);
  // A whole warp's reduction is right: every lane gets the sum of its 32.
  std::vector<float> ramp(64);
  for (int i = 0; i < 64; ++i) ramp[i] = (float)i;
  EXPECT_EQ(simulated(kernelOf(64, 64, {store(1, loopVar(0), warpReduce(KOp::Add, xAt(loopVar(0))))}), ramp, y), "");
  EXPECT_EQ(y[5], 31 * 32 / 2);
  EXPECT_EQ(y[40], (32 + 63) * 32 / 2);
}

TEST(GpuSim, CopiesLandWhenWaitedFor) {
  // Each thread copies its 4 bytes of x into shared memory and reads them back: after asyncWait(0)
  // it reads x; reading before the wait reads the NaNs a block's shared memory starts as.
  for (bool wait : {true, false}) {
    std::vector<StmtRef> body{copyAsync(0, lane(), 0, loopVar(0), 4), asyncCommit()};
    if (wait) body.push_back(asyncWait(0));
    body.push_back(store(1, loopVar(0), sharedLoad(0, lane(), Scalar::F32)));
    Kernel k = kernelOf(128, 128, std::move(body), 64, {SharedArray{ir::DType::F32, 64}});
    std::vector<float> x(128), y(128, 0);
    for (int i = 0; i < 128; ++i) x[i] = (float)i;
    ASSERT_EQ(simulated(k, x, y), "");
    for (int i = 0; i < 128; ++i) {
      if (wait) ASSERT_EQ(y[i], (float)i);
      else ASSERT_TRUE(std::isnan(y[i])) << i;
    }
  }
  // A 16-byte copy must start at a multiple of 16 bytes.
  std::vector<float> x(128, 1), y(128, 0);
  Kernel misaligned = kernelOf(64, 128, {copyAsync(0, B::i(0), 0, B::i(2), 16), asyncCommit(), asyncWait(0)}, 64, {SharedArray{ir::DType::F32, 64}});
  EXPECT_NE(simulated(misaligned, x, y).find("not aligned to its size"), std::string::npos);
}

TEST(GpuSim, BulkCopiesStoreWhenWaitedFor) {
  // Each block of 64 puts its x in shared memory, fences it for the async proxy, and after a
  // barrier its thread 0 copies the 256 bytes to y with one bulk copy, then waits for it.
  auto first = [](std::vector<StmtRef> body) { return loopUpTo(2, 1, select(eq(lane(), B::i(0)), B::i(1), B::i(0)), std::move(body)); };
  auto copy = [] { return bulkStore(0, B::i(0), 1, B::mul(binary(KOp::IDiv, loopVar(0), B::i(64)), B::i(64)), 256); };
  auto run = [&](std::vector<StmtRef> tail, std::vector<StmtRef> thread0) {
    std::vector<StmtRef> body{sharedStore(0, lane(), xAt(loopVar(0))), fenceProxyAsync(), barrier()};
    thread0.insert(thread0.begin(), {copy(), bulkCommit()});
    body.push_back(first(std::move(thread0)));
    for (StmtRef& s : tail) body.push_back(std::move(s));
    Kernel k = kernelOf(128, 128, std::move(body), 64, {SharedArray{ir::DType::F32, 64}});
    std::vector<float> x(128), y(128, 0);
    for (int i = 0; i < 128; ++i) x[i] = (float)i;
    std::string error = simulated(k, x, y);
    for (int i = 0; error.empty() && i < 128; ++i)
      if (y[i] != x[i]) error = "y[" + std::to_string(i) + "] = " + std::to_string(y[i]);
    return error;
  };
  EXPECT_EQ(run({}, {bulkWait(0)}), "");
  // Its tile written again once the copy has read it (bulkReadWait) and a barrier has passed.
  EXPECT_EQ(run({barrier(), sharedStore(0, lane(), constant(-1, Scalar::F32))}, {bulkReadWait(0)}), "");
  // The mistakes: no wait before the block ends; the tile written while the copy may still read it;
  // written by another thread than the one that waited, with no barrier after its wait.
  EXPECT_NE(run({}, {}).find("in flight at its block's end"), std::string::npos);
  EXPECT_NE(run({sharedStore(0, lane(), constant(-1, Scalar::F32)), first({bulkWait(0)})}, {}).find("which a bulk copy not yet waited for reads"),
            std::string::npos);
  EXPECT_NE(run({sharedStore(0, lane(), constant(-1, Scalar::F32))}, {bulkReadWait(0)}).find("with no barrier between"), std::string::npos);
  // A bulk copy starts at a multiple of 16 bytes.
  std::vector<float> x(128, 1), y(128, 0);
  Kernel misaligned = kernelOf(64, 128, {first({bulkStore(0, B::i(2), 1, B::i(0), 64), bulkCommit(), bulkWait(0)})}, 64, {SharedArray{ir::DType::F32, 64}});
  EXPECT_NE(simulated(misaligned, x, y).find("not 16-byte aligned"), std::string::npos);
}
