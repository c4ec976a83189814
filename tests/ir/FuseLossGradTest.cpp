// The fuse-loss-grad pass: a cross-entropy loss and its gradient over the same
// scores become one SceLossGrad with the loss as its second result, which
// keeps the loss's name and type; the interpreter gives the same loss and
// gradient before and after.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/FuseLossGrad.h"
#include "ir/passes/InferShapes.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> parsed(const std::string& text) {
  auto g = parse(text, "loss");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  return std::move(*g);
}

// Targets 1, -100 (ignored), 4, 0, 3, 2; class weights; the seed 1.0 of a training step.
const char* kOperands = " input %x : f64[6, 5]\n input %w : f64[5]\n"
                        " const %t : i64[6] = dense<\"0x01000000000000009cffffffffffffff0400000000000000000000000000000003000000000000000200000000000000\">\n"
                        " const %seed : f64[] = dense<\"0x000000000000f03f\">\n";

std::string lossAndGrad(const std::string& reduction, const std::string& dloss = "%seed") {
  std::string attrs = " {ignore_index = -100, reduction = \"" + reduction + "\"}";
  return std::string("graph @g {") + kOperands + " input %up : f64[]\n %l : ?[*] = SoftmaxCrossEntropyLoss(%x, %t, %w)" + attrs +
         "\n %ds : ?[*] = SceLossGrad(%x, %t, " + dloss + ", %w)" + attrs + "\n output %l, %ds }";
}

} // namespace

TEST(FuseLossGrad, LossAndGradientInOneNode) {
  for (const char* reduction : {"mean", "sum"}) {
    auto g = parsed(lossAndGrad(reduction));
    auto in = randomInputs(*g, 5);
    in.at("up").setF(0, 1.0);
    auto before = run(*g, in);
    ASSERT_TRUE(!!before) << errorText(before.takeError());
    int count = -1;
    ASSERT_FALSE(fuseLossGrad(*g, &count));
    EXPECT_EQ(count, 1);
    for (const auto& n : g->nodes()) EXPECT_NE(n->op, Op::SoftmaxCrossEntropyLoss);
    const Node* fused = g->outputs[0]->producer;
    ASSERT_TRUE(fused && fused->op == Op::SceLossGrad && fused->outputs.size() == 2);
    EXPECT_EQ(g->outputs[0]->name, "l");
    EXPECT_EQ(fused->outputs[1], g->outputs[0]);
    auto after = run(*g, in);
    ASSERT_TRUE(!!after) << errorText(after.takeError());
    for (const char* v : {"l", "ds"}) {
      const Tensor &want = before->at(v), &got = after->at(v);
      ASSERT_EQ(got.shape, want.shape) << v;
      for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.getF(i), want.getF(i), 1e-12) << reduction << " %" << v << "[" << i << "]";
    }
  }
}

TEST(FuseLossGrad, LeavesAGradientOfAComputedUpstream) {
  // dloss computed by a node: it may depend on the loss, so the gradient stays where it is.
  std::string text = lossAndGrad("mean", "%up2");
  text.replace(text.find(" %ds"), 0, " %up2 : ?[*] = Neg(%up)\n");
  auto g = parsed(text);
  int count = -1;
  ASSERT_FALSE(fuseLossGrad(*g, &count));
  EXPECT_EQ(count, 0);
}
