// The recompute pass's default mode, fused: SiLU's sigmoid and product (read
// by the product's gradient, an elementwise op) are computed again in the
// backward pass, so the forward kernel stores neither; a GELU output that a
// weight gradient's product reads stays stored (cheap repeats it), and so
// does the gated product. The step's loss and updates are the same bits with
// and without the repeats.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/Recompute.h"
#include "ir/training/TrainingStep.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <random>

using namespace sgc;
using namespace sgc::ir;

namespace {

/// A SwiGLU layer, x -> down(silu(gate x) * up x), beside a GELU whose output feeds a product.
std::unique_ptr<Graph> swigluStep(const std::string& mode, int* repeated) {
  std::mt19937 rng(5);
  std::string text = "graph @g {\n input %x : f32[3, 4]\n";
  for (const char* w : {"wg", "wu", "wd", "wo"}) text += std::string(" param %") + w + " : f32[4, 4] = " + denseNormal(16, rng) + "\n";
  text += R"( %gate : ?[*] = MatMul(%x, %wg)
 %up : ?[*] = MatMul(%x, %wu)
 %sig : ?[*] = Sigmoid(%gate)
 %silu : ?[*] = Mul(%gate, %sig)
 %h : ?[*] = Mul(%silu, %up)
 %y : ?[*] = MatMul(%h, %wd)
 %gelu : ?[*] = Gelu(%gate)
 %z : ?[*] = MatMul(%gelu, %wo)
 %s : ?[*] = Add(%y, %z)
 %loss : ?[*] = ReduceSum(%s) {keepdims = 0}
 output %loss
})";
  auto g = parse(text, "swiglu");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  EXPECT_FALSE(buildTrainingStep(**g, TrainingOptions{}));
  EXPECT_FALSE(recompute(**g, mode, repeated));
  return std::move(*g);
}

/// The ops of the repeated nodes.
std::multiset<Op> repeats(const Graph& g) {
  std::multiset<Op> ops;
  for (const auto& n : g.nodes())
    if (n->name.find(".recomputed") != std::string::npos) ops.insert(n->op);
  return ops;
}

/// Whether a node that the loss does not depend on (the backward pass, the optimizer, a repeat)
/// reads the value named `name`.
bool readByBackward(const Graph& g, const std::string& name) {
  std::set<const Node*> forward;
  std::vector<const Value*> work(g.outputs.begin(), g.outputs.end());
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    if (v && v->producer && forward.insert(v->producer).second) work.insert(work.end(), v->producer->inputs.begin(), v->producer->inputs.end());
  }
  for (const auto& n : g.nodes())
    for (const Value* in : n->inputs)
      if (in && in->name == name && !forward.count(n.get())) return true;
  return false;
}

std::map<std::string, Tensor> oneStep(const std::string& mode) {
  int repeated = 0;
  auto g = swigluStep(mode, &repeated);
  std::mt19937 rng(11);
  std::normal_distribution<double> n;
  std::map<std::string, Tensor> in;
  in["x"] = Tensor(DType::F32, {3, 4});
  for (int64_t i = 0; i < in["x"].numel(); ++i) in["x"].setF(i, n(rng));
  in["sgc.lr"] = Tensor::fromF64(DType::F32, {}, {0.1});
  auto out = runStep(*g, in);
  EXPECT_TRUE(!!out) << errorText(out.takeError());
  std::map<std::string, Tensor> r = *out;
  for (Value* p : g->params) r[p->name] = *p->data;
  return r;
}

} // namespace

TEST(Recompute, FusedRepeatsWhatElementwiseGradientsRead) {
  int repeated = -1;
  auto g = swigluStep("fused", &repeated);
  EXPECT_EQ(repeated, 2);
  EXPECT_EQ(repeats(*g), (std::multiset<Op>{Op::Sigmoid, Op::Mul}));
  // The backward pass reads the repeats, not the forward sigmoid and SiLU; the GELU output is kept.
  EXPECT_FALSE(readByBackward(*g, "sig"));
  EXPECT_FALSE(readByBackward(*g, "silu"));
  EXPECT_TRUE(readByBackward(*g, "gelu"));
  EXPECT_TRUE(readByBackward(*g, "h"));
}

TEST(Recompute, CheapAlsoRepeatsWhatProductsRead) {
  int repeated = -1;
  auto g = swigluStep("cheap", &repeated);
  // The GELU and the gated product h, which weight gradients' products read, are repeated too.
  EXPECT_EQ(repeats(*g), (std::multiset<Op>{Op::Sigmoid, Op::Mul, Op::Mul, Op::Gelu}));
  EXPECT_EQ(repeated, 4);
  EXPECT_FALSE(readByBackward(*g, "gelu"));
  EXPECT_FALSE(readByBackward(*g, "h"));
}

TEST(Recompute, RepeatsLeaveTheStepUnchanged) {
  auto base = oneStep("none");
  for (const char* mode : {"fused", "cheap"}) {
    auto other = oneStep(mode);
    ASSERT_EQ(other.size(), base.size()) << mode;
    for (auto& [name, t] : base) EXPECT_EQ(other.at(name), t) << mode << ": " << name;
  }
}

TEST(Recompute, AnUnknownModeIsAnError) {
  auto g = parse("graph @g {\n input %x : f32[2]\n %l : ?[*] = ReduceSum(%x) {keepdims = 0}\n output %l\n}", "m");
  ASSERT_TRUE(!!g);
  Error e = recompute(**g, "sometimes");
  ASSERT_TRUE(!!e);
  EXPECT_NE(errorText(std::move(e)).find("expected none, fused, cheap, selective or full"), std::string::npos);
}
