// The pack-attention pass: fused attention over the three parts of one split
// projection reads that projection itself (layout "bt3hd"), with the same
// results on the interpreter; and the packed forms of FusedAttention and its
// gradient agree with the bthd forms on the parts.
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/PackAttention.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> parsed(const std::string& text) {
  auto g = parse(text, "pack");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  return std::move(*g);
}

/// ` const %name : i64[n] = dense<...>` of `values` (little-endian bytes, as the printer writes them).
std::string ints(const std::string& name, const std::vector<int64_t>& values) {
  std::string hex;
  for (int64_t v : values)
    for (int b = 0; b < 8; ++b) {
      char byte[3];
      std::snprintf(byte, sizeof byte, "%02x", (unsigned)((uint64_t)v >> (8 * b)) & 0xff);
      hex += byte;
    }
  return " const %" + name + " : i64[" + std::to_string(values.size()) + "] = dense<\"0x" + hex + "\">\n";
}

/// x [2, 5, 36] split in three along its last dim, each part viewed as [2, 5, 3, 4] heads;
/// `parts` the split's sizes.
std::string splitAttention(const std::vector<int64_t>& parts) {
  return "graph @g { input %x : f64[2, 5, 36]\n" + ints("sizes", parts) + ints("heads", {2, 5, 3, 4}) +
         " %a : ?[*], %b : ?[*], %c : ?[*] = Split(%x, %sizes) {axis = 2}\n"
         " %q : ?[*] = Reshape(%a, %heads)\n %k : ?[*] = Reshape(%b, %heads)\n %v : ?[*] = Reshape(%c, %heads)\n"
         " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.5, layout = \"bthd\"}\n output %y, %lse }";
}

void expectNear(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.getF(i), want.getF(i), 1e-12) << what << "[" << i << "]";
}

} // namespace

TEST(PackAttention, SplitPartsFoldIntoTheNode) {
  auto g = parsed(splitAttention({12, 12, 12}));
  auto in = randomInputs(*g, 3);
  auto before = run(*g, in);
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int count = -1;
  ASSERT_FALSE(packAttention(*g, &count));
  EXPECT_EQ(count, 1);
  for (const auto& n : g->nodes()) EXPECT_NE(n->op, Op::Split);
  const Node* a = g->outputs[0]->producer;
  ASSERT_TRUE(a && a->op == Op::FusedAttention);
  EXPECT_EQ(a->getString("layout", ""), "bt3hd");
  EXPECT_EQ(a->inputs[0]->type, Type::of(DType::F64, {2, 5, 3, 3, 4}));
  EXPECT_TRUE(a->inputs[1] == a->inputs[0] && a->inputs[2] == a->inputs[0]);
  auto after = run(*g, in);
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  expectNear(after->at(g->outputs[0]->name), before->at("y"), "y");
  expectNear(after->at(g->outputs[1]->name), before->at("lse"), "lse");
}

TEST(PackAttention, LeavesUnequalParts) {
  // Parts of equal size, but two from a Split and the third another tensor.
  auto g = parsed("graph @g { input %x : f64[2, 5, 24]\n input %w : f64[2, 5, 12]\n" + ints("sizes", {12, 12}) + ints("heads", {2, 5, 3, 4}) +
                  " %a : ?[*], %b : ?[*] = Split(%x, %sizes) {axis = 2}\n"
                  " %q : ?[*] = Reshape(%a, %heads)\n %k : ?[*] = Reshape(%b, %heads)\n %v : ?[*] = Reshape(%w, %heads)\n"
                  " %y : ?[*], %lse : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.5, layout = \"bthd\"}\n output %y }");
  int count = -1;
  ASSERT_FALSE(packAttention(*g, &count));
  EXPECT_EQ(count, 0);
}

TEST(PackAttention, PackedGradientMatchesTheBthdForm) {
  // The same attention and gradient twice: on x [B, T, 3, H, D] packed, and on its three parts
  // with layout "bthd"; the parts' gradients concatenated must be the packed one.
  auto g = parsed(
      "graph @g { input %x : f64[2, 6, 3, 3, 4]\n input %dy : f64[2, 6, 3, 4]\n" + ints("parts", {1, 1, 1}) + ints("heads", {2, 6, 3, 4}) +
      ints("one", {2, 6, 1, 3, 4}) +
      " %y1 : ?[*], %l1 : ?[*] = FusedAttention(%x, %x, %x) {causal = 1, scale = 0.7, layout = \"bt3hd\"}\n"
      " %dx1 : ?[*], _, _, %d1 : ?[*] = FusedAttentionGrad(%x, %x, %x, %y1, %l1, %dy) {causal = 1, scale = 0.7, layout = \"bt3hd\"}\n"
      " %a : ?[*], %b : ?[*], %c : ?[*] = Split(%x, %parts) {axis = 2}\n"
      " %q : ?[*] = Reshape(%a, %heads)\n %k : ?[*] = Reshape(%b, %heads)\n %v : ?[*] = Reshape(%c, %heads)\n"
      " %y2 : ?[*], %l2 : ?[*] = FusedAttention(%q, %k, %v) {causal = 1, scale = 0.7, layout = \"bthd\"}\n"
      " %dq : ?[*], %dk : ?[*], %dv : ?[*], %d2 : ?[*] = FusedAttentionGrad(%q, %k, %v, %y2, %l2, %dy) {causal = 1, scale = 0.7, layout = \"bthd\"}\n"
      " %dq1 : ?[*] = Reshape(%dq, %one)\n %dk1 : ?[*] = Reshape(%dk, %one)\n %dv1 : ?[*] = Reshape(%dv, %one)\n"
      " %dx2 : ?[*] = Concat(%dq1, %dk1, %dv1) {axis = 2}\n output %y1, %l1, %dx1, %d1, %y2, %l2, %dx2, %d2 }");
  auto in = randomInputs(*g, 9);
  auto out = run(*g, in);
  ASSERT_TRUE(!!out) << errorText(out.takeError());
  for (auto [a, b] : {std::pair<const char*, const char*>{"y1", "y2"}, {"l1", "l2"}, {"dx1", "dx2"}, {"d1", "d2"}})
    expectNear(out->at(a), out->at(b), a);
}

TEST(PackAttention, RefusesThreeDifferentOperands) {
  auto g = parse("graph @g { input %q : f64[2, 6, 3, 3, 4]\n input %k : f64[2, 6, 3, 3, 4]\n"
                 " %y : ?[*], %l : ?[*] = FusedAttention(%q, %k, %k) {layout = \"bt3hd\"}\n output %y }",
                 "pack");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  Error e = inferShapes(**g, false);
  ASSERT_TRUE(!!e);
  EXPECT_NE(errorText(std::move(e)).find("one tensor, passed three times"), std::string::npos);
}

TEST(PackAttention, KernelListingShowsTheAbsentResults) {
  // A packed gradient computes no separate dk, dv: `sgc compile --emit=kernels` lists them as _
  // (it dereferenced them before).
  auto g = parsed("graph @g { input %x : f32[2, 6, 3, 3, 4]\n input %dy : f32[2, 6, 3, 4]\n"
                  " %y : ?[*], %l : ?[*] = FusedAttention(%x, %x, %x) {causal = 1, scale = 0.7, layout = \"bt3hd\"}\n"
                  " %dx : ?[*], _, _, %d : ?[*] = FusedAttentionGrad(%x, %x, %x, %y, %l, %dy) {causal = 1, scale = 0.7, layout = \"bt3hd\"}\n"
                  " output %dx }");
  codegen::CompiledProgram p;
  p.schedule = codegen::kernelSchedule(*g);
  std::string listing = codegen::printSchedule(p);
  EXPECT_NE(listing.find("-> %dx f32[2, 6, 3, 3, 4] _ _ %d f32[2, 6, 3]"), std::string::npos) << listing;
}
