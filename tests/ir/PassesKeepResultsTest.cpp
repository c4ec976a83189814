// Passes leave the interpreter's results unchanged: the bundled training
// sample's step, run on the interpreter from the same state and data, gives
// the same loss and the same updated parameters with and without
// recomputation (fused, cheap, selective, full) and dead-code elimination.
#include "frontend/onnx/Importer.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/Passes.h"
#include "ir/passes/Recompute.h"
#include "ir/training/TrainingStep.h"

#include <gtest/gtest.h>
#include <random>

using namespace sgc;

namespace {

/// The loss and every parameter after one step of the sample with `mode`.
std::map<std::string, ir::Tensor> oneStep(const std::string& mode) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  EXPECT_TRUE(!!g);
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  EXPECT_FALSE(ir::buildTrainingStep(**g, o));
  if (mode == "dce") EXPECT_FALSE(ir::runPasses(**g, {"dce"}, true));
  else EXPECT_FALSE(ir::recompute(**g, mode));
  std::mt19937 rng(9);
  std::normal_distribution<double> n;
  std::map<std::string, ir::Tensor> in;
  in["x"] = ir::Tensor(ir::DType::F32, {32, 16});
  for (int64_t i = 0; i < in["x"].numel(); ++i) in["x"].setF(i, n(rng));
  in["labels"] = ir::Tensor::fromI64(ir::DType::I64, {32}, std::vector<int64_t>(32, 2));
  in["sgc.lr"] = ir::Tensor::fromF64(ir::DType::F32, {}, {1e-2});
  auto out = ir::runStep(**g, in);
  EXPECT_TRUE(!!out) << errorText(out.takeError());
  std::map<std::string, ir::Tensor> r = *out;
  for (ir::Value* p : (*g)->params) r[p->name] = *p->data;
  return r;
}

} // namespace

TEST(PassesKeepResults, RecomputeAndDce) {
  auto base = oneStep("none");
  for (const char* mode : {"fused", "cheap", "selective", "full", "dce"}) {
    auto other = oneStep(mode);
    ASSERT_EQ(other.size(), base.size()) << mode;
    for (auto& [name, t] : base) EXPECT_EQ(other.at(name), t) << mode << ": " << name;
  }
}
