// The shadow-weights pass on a real training step (the bundled MLP sample, bf16,
// AdamW): every weight its products read through a bf16 cast gets a copy in state
// that the optimizer writes (its fourth result), the cast names it, and its
// update is registered; weights read in f32 (the layer norm's) and SGD's are
// left alone. On the interpreter, after each of three steps, every copy holds
// its parameter rounded to bf16, bit for bit (what the runtime's skipped casts
// would have written; tests/training/shadow_weights.py checks the runtime).
// A cast naming anything but such state fails the verifier.
#include "frontend/onnx/Importer.h"
#include "ir/Verifier.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/ShadowWeights.h"
#include "ir/training/TrainingStep.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> step(const std::string& optimizer) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  TrainingOptions o;
  o.optimizer.kind = optimizer;
  o.precision = "bf16";
  EXPECT_FALSE(buildTrainingStep(**g, o));
  return std::move(*g);
}

/// The casts that name a copy: parameter -> copy.
std::map<const Value*, const Value*> copies(const Graph& g) {
  std::map<const Value*, const Value*> out;
  for (const auto& n : g.nodes())
    if (n->has("shadow")) out[n->inputs[0]] = g.findValue(n->getString("shadow", ""));
  return out;
}

std::map<std::string, Tensor> batch(int i) {
  std::vector<double> x(32 * 16);
  std::vector<int64_t> labels(32);
  for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37 * (double)k + i);
  for (size_t k = 0; k < labels.size(); ++k) labels[k] = (int64_t)((k * 7 + (size_t)i) % 4);
  return {{"x", Tensor::fromF64(DType::F32, {32, 16}, x)}, {"labels", Tensor::fromI64(DType::I64, {32}, labels)},
          {"sgc.lr", Tensor::fromF64(DType::F32, {}, {0.05})}};
}

} // namespace

TEST(ShadowWeights, AdamWritesACopyOfEachWeightAProductReads) {
  auto g = step("adamw");
  auto shadowed = copies(*g);
  EXPECT_EQ(shadowed.size(), 6u); // fc1, fc2, head: weights and biases
  for (auto [p, copy] : shadowed) {
    ASSERT_TRUE(copy) << p->name;
    EXPECT_EQ(p->kind, ValueKind::Param);
    EXPECT_EQ(copy->kind, ValueKind::State);
    EXPECT_EQ(copy->type, Type::of(DType::BF16, p->type.shape()));
    bool updated = false;
    for (auto& [target, next] : g->updates)
      if (target == copy) {
        updated = true;
        ASSERT_TRUE(next->producer && next->producer->op == Op::AdamUpdate) << next->name;
        EXPECT_EQ(next->producer->inputs[0], p);
        EXPECT_EQ(next->producer->outputs[3], next);
      }
    EXPECT_TRUE(updated) << copy->name;
  }
  EXPECT_FALSE(shadowed.count(g->findValue("mlp.norm.weight"))); // read in f32 by the layer norm
  EXPECT_TRUE(copies(*step("sgd")).empty());
}

TEST(ShadowWeights, EachCopyIsItsParameterRoundedAfterEveryStep) {
  auto g = step("adamw");
  auto shadowed = copies(*g);
  for (int i = 0; i < 3; ++i) {
    auto got = runStep(*g, batch(i));
    ASSERT_TRUE(!!got) << errorText(got.takeError());
    for (auto [p, copy] : shadowed) {
      Tensor rounded = Tensor::fromF64(DType::BF16, p->type.shape(), p->data->toF64());
      EXPECT_EQ(copy->data->bytes, rounded.bytes) << copy->name << ", step " << i;
    }
  }
}

TEST(ShadowWeights, TheVerifierRefusesACastNamingNoCopy) {
  auto g = step("adamw");
  Node* cast = nullptr;
  for (auto& n : g->nodes())
    if (n->has("shadow")) cast = n.get();
  ASSERT_TRUE(cast);
  EXPECT_FALSE(verify(*g));
  cast->attrs["shadow"] = std::string("mlp.norm.weight"); // a parameter, not state
  EXPECT_NE(errorText(verify(*g)).find("shadow names no state"), std::string::npos);
  cast->attrs["shadow"] = std::string("nowhere");
  EXPECT_NE(errorText(verify(*g)).find("shadow names no state"), std::string::npos);
}
