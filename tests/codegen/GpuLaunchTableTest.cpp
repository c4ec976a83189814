// What a GPU step launches, as the compiler plans it: the GPU modules carry
// exactly the kernels a GPU launches (kir::Kernel::cpuOnly).
#include "codegen/Package.h"
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <set>

using namespace sgc;

namespace {

/// A linear layer and a layer norm over 2048 rows of 64: on a GPU the bias gradient is a split
/// reduction and the layer norm's dscale and dbias sums of atomic adds, each after a zeroing.
codegen::CompiledProgram compiled() {
  std::mt19937 rng(3);
  std::string text = "graph @g {\n input %x : f32[2048, 64]\n param %w : f32[64, 64] = " + ir::denseNormal(64 * 64, rng) + "\n";
  for (const char* p : {"b", "s", "c"}) text += std::string(" param %") + p + " : f32[64] = " + ir::denseNormal(64, rng) + "\n";
  text += R"( %h : ?[*] = MatMul(%x, %w)
 %hb : ?[*] = Add(%h, %b)
 %n : ?[*] = LayerNormalization(%hb, %s, %c) {axis = -1}
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

} // namespace

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
