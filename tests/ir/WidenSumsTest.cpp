// The widen-sums pass: a bf16 sum cast to f32 becomes a sum of the bf16
// values accumulated in f32; its result keeps its identity (what the training step
// already holds stays valid) and is closer to the exact float64 sum.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/WidenSums.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace sgc;
using namespace sgc::ir;

namespace {

/// bf16 values drawn uniformly from [lo, hi) (`seed`), rounded.
Tensor randomBf16(std::vector<int64_t> shape, unsigned seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor x(DType::BF16, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, u(rng));
  return x;
}

} // namespace

TEST(WidenSums, SumsTheWidenedValues) {
  auto g = parse("graph @g { input %x : bf16[512, 4]\n const %s : i64[1] = dense<\"0x0400000000000000\">\n"
                 " %sum : ?[*] = SumTo(%x, %s)\n %y : ?[*] = Cast(%sum) {to = \"f32\"}\n output %y }",
                 "widen");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Value* y = (*g)->outputs[0];
  Tensor x = randomBf16({512, 4}, 4, 0.5, 1.5);
  auto before = run(**g, {{"x", x}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int count = 0;
  ASSERT_FALSE(widenSums(**g, &count));
  EXPECT_EQ(count, 1);
  EXPECT_EQ((*g)->outputs[0], y); // the same value, now the f32 sum
  ASSERT_TRUE(y->producer);
  EXPECT_EQ(y->producer->op, Op::SumTo);
  EXPECT_EQ(y->producer->inputs[0]->type.dtype, DType::BF16); // the narrow values, read as they are
  EXPECT_EQ(y->producer->getString("to", ""), "f32");
  EXPECT_EQ(y->type.dtype, DType::F32);
  (*g)->removeDeadNodes();
  auto after = run(**g, {{"x", x}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  for (int64_t c = 0; c < 4; ++c) {
    double exact = 0;
    for (int64_t r = 0; r < 512; ++r) exact += x.getF(r * 4 + c);
    double narrow = before->at("y").getF(c), wide = after->at("y").getF(c);
    EXPECT_NEAR(wide, exact, 1e-6 * exact);
    EXPECT_LE(std::fabs(wide - exact), std::fabs(narrow - exact)) << c;
  }
}

TEST(WidenSums, LeavesSumsReadElsewhere) {
  auto g = parse("graph @g { input %x : bf16[8, 4]\n const %s : i64[1] = dense<\"0x0400000000000000\">\n"
                 " %sum : ?[*] = SumTo(%x, %s)\n %y : ?[*] = Cast(%sum) {to = \"f32\"}\n output %y, %sum }",
                 "widen");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  int count = -1;
  ASSERT_FALSE(widenSums(**g, &count));
  EXPECT_EQ(count, 0);
}

// Grouped-query attention's key gradient: each query head's bf16 copy widened, regrouped and
// summed over the heads that share the key. The sum reads the bf16 values through a narrow
// reshape: the same sums (widening is exact), with no f32 copy in between.
TEST(WidenSums, SumsNarrowValuesThroughReshapes) {
  auto g = parse("graph @g { input %x : bf16[2, 6, 3, 4]\n"
                 " const %shape : i64[5] = dense<\"0x02000000000000000300000000000000020000000000000003000000000000000400000000000000\">\n"
                 " const %to : i64[5] = dense<\"0x02000000000000000300000000000000010000000000000003000000000000000400000000000000\">\n"
                 " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %r : ?[*] = Reshape(%w, %shape)\n"
                 " %y : ?[*] = SumTo(%r, %to)\n output %y }",
                 "widen");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x = randomBf16({2, 6, 3, 4}, 5, -2, 2);
  auto before = run(**g, {{"x", x}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int count = 0;
  ASSERT_FALSE(widenSums(**g, &count));
  EXPECT_EQ(count, 1);
  const Node* sum = (*g)->outputs[0]->producer;
  ASSERT_TRUE(sum && sum->op == Op::SumTo);
  EXPECT_EQ(sum->getString("to", ""), "f32");
  EXPECT_EQ(sum->inputs[0]->type.dtype, DType::BF16); // through a narrow reshape
  ASSERT_TRUE(sum->inputs[0]->producer && sum->inputs[0]->producer->op == Op::Reshape);
  EXPECT_EQ(sum->inputs[0]->producer->inputs[0]->name, "x");
  (*g)->removeDeadNodes();
  for (const auto& n : (*g)->nodes()) EXPECT_NE(n->op, Op::Cast);
  auto after = run(**g, {{"x", x}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  const Tensor &a = after->at("y"), &b = before->at("y");
  ASSERT_EQ(a.shape, (std::vector<int64_t>{2, 3, 1, 3, 4}));
  for (int64_t i = 0; i < a.numel(); ++i) {
    int64_t bi = i / 36, kv = i / 12 % 3, td = i % 12; // [b, kv, 1, t, d]: the sum over the group of 2
    double exact = x.getF(bi * 72 + (kv * 2) * 12 + td) + x.getF(bi * 72 + (kv * 2 + 1) * 12 + td);
    EXPECT_NEAR(a.getF(i), exact, 1e-6) << i;
    EXPECT_EQ(a.getF(i), b.getF(i)) << i; // the same f32 sums, bit for bit
  }
}
