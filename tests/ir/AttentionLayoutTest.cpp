// The attention-layout pass: fused attention between head transposes reads
// and writes the [B, T, H, D] tensors itself (layout "bthd"), or writes its
// result so alone (result_layout "bthd", where the operands come otherwise),
// with the same results on the interpreter; and the bthd forms of
// FusedAttention and its gradient agree with the default layout on
// transposed operands.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/AttentionLayout.h"
#include "ir/passes/ForwardCopies.h"
#include "ir/passes/InferShapes.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> parsed(const std::string& text) {
  auto g = parse(text, "layout");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  return std::move(*g);
}

const char* kHeads = "{perm = [0, 2, 1, 3]}";

/// Runs the pass on g (one attention, its result transposed back into output 0, lse [2, 5, 3]
/// after it): one rewrite, no Transpose left, the same output within 1e-12 on the interpreter.
/// Returns the attention node.
const Node* rewritesToTheSameResult(Graph& g, uint64_t seed) {
  auto in = randomInputs(g, seed);
  auto before = run(g, in);
  EXPECT_TRUE(!!before) << errorText(before.takeError());
  int count = -1;
  EXPECT_FALSE(attentionLayout(g, &count));
  EXPECT_EQ(count, 1);
  for (const auto& n : g.nodes()) EXPECT_NE(n->op, Op::Transpose);
  const Node* a = g.outputs[0]->producer;
  EXPECT_TRUE(a && a->op == Op::FusedAttention);
  EXPECT_EQ(a->outputs[1]->type, Type::of(DType::F64, {2, 5, 3})); // lse [B, T, H]
  auto after = run(g, in);
  EXPECT_TRUE(!!after) << errorText(after.takeError());
  if (!before || !after) return a;
  const Tensor &want = before->at("yt"), &got = after->at(g.outputs[0]->name);
  EXPECT_EQ(got.shape, want.shape);
  for (int64_t i = 0; i < want.numel() && got.shape == want.shape; ++i) EXPECT_NEAR(got.getF(i), want.getF(i), 1e-12) << i;
  return a;
}

} // namespace

TEST(AttentionLayout, HeadTransposesFoldIntoTheNode) {
  std::string t = std::string(" = Transpose(") , p = std::string(") ") + kHeads + "\n";
  auto g = parsed(std::string("graph @g { input %qt : f64[2, 5, 3, 4]\n input %kt : f64[2, 5, 3, 4]\n input %vt : f64[2, 5, 3, 6]\n") +
                  " %q : ?[*]" + t + "%qt" + p + " %k : ?[*]" + t + "%kt" + p + " %v : ?[*]" + t + "%vt" + p +
                  " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.5}\n"
                  " %yt : ?[*]" + t + "%y" + p + " output %yt }");
  const Node* a = rewritesToTheSameResult(*g, 3);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->getString("layout", ""), "bthd");
}

// Hugging Face's GPT-2 concatenates its keys and values to an empty cache (a Concat of one
// tensor: the legacy exporter) or copies them (an Identity: the dynamo exporter) between the head
// transposes and the attention: once forward-copies (which the training step runs first) has
// forwarded them, the same rewrite.
TEST(AttentionLayout, HeadTransposesFoldThroughCopies) {
  std::string t = std::string(" = Transpose(") , p = std::string(") ") + kHeads + "\n";
  auto g = parsed(std::string("graph @g { input %qt : f64[2, 5, 3, 4]\n input %kt : f64[2, 5, 3, 4]\n input %vt : f64[2, 5, 3, 6]\n") +
                  " %q : ?[*]" + t + "%qt" + p + " %k0 : ?[*]" + t + "%kt" + p + " %v0 : ?[*]" + t + "%vt" + p +
                  " %k : ?[*] = Concat(%k0) {axis = -2}\n %v : ?[*] = Identity(%v0)\n"
                  " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.5}\n"
                  " %yt : ?[*]" + t + "%y" + p + " output %yt }");
  int forwarded = -1;
  ASSERT_FALSE(forwardCopies(*g, &forwarded));
  EXPECT_EQ(forwarded, 2);
  const Node* a = rewritesToTheSameResult(*g, 4);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->getString("layout", ""), "bthd");
  EXPECT_EQ(a->inputs[1]->name, "kt");
  EXPECT_EQ(a->inputs[2]->name, "vt");
}

TEST(AttentionLayout, LeavesOtherTransposesAndReadResults) {
  for (const char* perm : {"{perm = [0, 2, 1, 3]}", "{perm = [0, 1, 2, 3]}"}) {
    std::string t = " = Transpose(", p = std::string(") ") + kHeads + "\n";
    std::string yBack = std::string(" %yt : ?[*] = Transpose(%y) ") + perm + "\n";
    auto g = parsed(std::string("graph @g { input %qt : f64[2, 5, 3, 4]\n input %kt : f64[2, 5, 3, 4]\n input %vt : f64[2, 5, 3, 4]\n") +
                    " %q : ?[*]" + t + "%qt" + p + " %k : ?[*]" + t + "%kt" + p + " %v : ?[*]" + t + "%vt" + p +
                    " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.5}\n" + yBack +
                    " output %yt, %lse }"); // the lse is read: its layout would change
    int count = -1;
    ASSERT_FALSE(attentionLayout(*g, &count));
    EXPECT_EQ(count, 0) << perm;
  }
}

TEST(AttentionLayout, BthdGradientMatchesTheDefaultLayout) {
  // The same attention and gradient twice: on [B, T, H, D] operands with layout "bthd", and on
  // their head transposes with the default layout; results transposed back must agree.
  std::string t = " = Transpose(", p = std::string(") ") + kHeads + "\n";
  auto g = parsed(std::string("graph @g { input %qt : f64[2, 6, 3, 4]\n input %kt : f64[2, 6, 3, 4]\n input %vt : f64[2, 6, 3, 5]\n"
                              " input %dyt : f64[2, 6, 3, 5]\n") +
                  " %y1 : ?[*], %l1 : ?[*] = FusedAttention(%qt, %kt, %vt) {causal = 1, scale = 0.7, layout = \"bthd\"}\n"
                  " %dq1 : ?[*], %dk1 : ?[*], %dv1 : ?[*], %d1 : ?[*] = FusedAttentionGrad(%qt, %kt, %vt, %y1, %l1, %dyt)"
                  " {causal = 1, scale = 0.7, layout = \"bthd\"}\n"
                  " %q : ?[*]" + t + "%qt" + p + " %k : ?[*]" + t + "%kt" + p + " %v : ?[*]" + t + "%vt" + p + " %dy : ?[*]" + t + "%dyt" + p +
                  " %y2 : ?[*], %l2 : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.7}\n"
                  " %dq2 : ?[*], %dk2 : ?[*], %dv2 : ?[*], %d2 : ?[*] = FusedAttentionGrad(%q, %k, %v, %y2, %l2, %dy) {causal = 1, scale = 0.7}\n"
                  " %y2t : ?[*]" + t + "%y2" + p + " %dq2t : ?[*]" + t + "%dq2" + p + " %dk2t : ?[*]" + t + "%dk2" + p +
                  " %dv2t : ?[*]" + t + "%dv2" + p + " %l2t : ?[*] = Transpose(%l2) {perm = [0, 2, 1]}\n"
                  " output %y1, %dq1, %dk1, %dv1, %l1, %y2t, %dq2t, %dk2t, %dv2t, %l2t }");
  auto in = randomInputs(*g, 9);
  auto out = run(*g, in);
  ASSERT_TRUE(!!out) << errorText(out.takeError());
  for (auto [a, b] : {std::pair<const char*, const char*>{"y1", "y2t"}, {"dq1", "dq2t"}, {"dk1", "dk2t"}, {"dv1", "dv2t"}, {"l1", "l2t"}}) {
    const Tensor &x = out->at(a), &y = out->at(b);
    ASSERT_EQ(x.shape, y.shape) << a;
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(x.getF(i), y.getF(i), 1e-12) << a << "[" << i << "]";
  }
}

// Operands made some other way (a rotary embedding's; grouped keys and values): the result alone
// is written [B, T, H, D], and its head transpose is gone.
TEST(AttentionLayout, TheResultAloneWhereOperandsAreNotHeadTransposes) {
  for (const char* kv : {"3", "1"}) { // as many key/value heads as query heads, and one for all three
    std::string k = std::string("f64[2, ") + kv + ", 5, 4]";
    auto g = parsed("graph @g { input %q : f64[2, 3, 5, 4]\n input %k : " + k + "\n input %v : " + k + "\n"
                    " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.5}\n"
                    " %yt : ?[*] = Transpose(%y) " + kHeads + "\n output %yt }");
    SCOPED_TRACE(std::string("key/value heads: ") + kv);
    const Node* a = rewritesToTheSameResult(*g, 4);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->getString("layout", "bhtd"), "bhtd");
    EXPECT_EQ(a->getString("result_layout", ""), "bthd");
  }
}

TEST(AttentionLayout, ResultLayoutGradientMatchesTheDefaultLayout) {
  // Grouped attention and its gradient twice: with result_layout "bthd" (dy [B, T, H, D]), and in
  // the default layout on dy's head transpose; the result, lse and delta transposed back, dq, dk
  // and dv as they are, must agree.
  std::string p = std::string(") ") + kHeads + "\n";
  auto g = parsed(std::string("graph @g { input %q : f64[2, 4, 6, 3]\n input %k : f64[2, 2, 6, 3]\n input %v : f64[2, 2, 6, 5]\n"
                              " input %dyt : f64[2, 6, 4, 5]\n") +
                  " %y1 : ?[*], %l1 : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.7, result_layout = \"bthd\"}\n"
                  " %dq1 : ?[*], %dk1 : ?[*], %dv1 : ?[*], %d1 : ?[*] = FusedAttentionGrad(%q, %k, %v, %y1, %l1, %dyt)"
                  " {causal = 1, scale = 0.7, result_layout = \"bthd\"}\n"
                  " %dy : ?[*] = Transpose(%dyt" + p +
                  " %y2 : ?[*], %l2 : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.7}\n"
                  " %dq2 : ?[*], %dk2 : ?[*], %dv2 : ?[*], %d2 : ?[*] = FusedAttentionGrad(%q, %k, %v, %y2, %l2, %dy) {causal = 1, scale = 0.7}\n"
                  " %y2t : ?[*] = Transpose(%y2" + p + " %l2t : ?[*] = Transpose(%l2) {perm = [0, 2, 1]}\n"
                  " %d2t : ?[*] = Transpose(%d2) {perm = [0, 2, 1]}\n"
                  " output %y1, %l1, %d1, %dq1, %dk1, %dv1, %y2t, %l2t, %d2t, %dq2, %dk2, %dv2 }");
  auto in = randomInputs(*g, 11);
  auto out = run(*g, in);
  ASSERT_TRUE(!!out) << errorText(out.takeError());
  for (auto [a, b] : {std::pair<const char*, const char*>{"y1", "y2t"}, {"l1", "l2t"}, {"d1", "d2t"}, {"dq1", "dq2"}, {"dk1", "dk2"}, {"dv1", "dv2"}}) {
    const Tensor &x = out->at(a), &y = out->at(b);
    ASSERT_EQ(x.shape, y.shape) << a;
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(x.getF(i), y.getF(i), 1e-12) << a << "[" << i << "]";
  }
}
