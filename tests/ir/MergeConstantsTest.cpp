// The merge-constants pass: constants of equal type and bytes become the first of them, in the
// graph's order; constants that differ in type or in one byte, and those the training step must
// refuse by name (Graph::untrainable), stay; the interpreter's result is the same.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/MergeConstants.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

// %a, %b, %d: the same two f32s; %c: %a's bytes as one i64; %e: one bit apart from %a;
// %f: %a's values with another shape; %u: %a's, but untrainable.
const char* kGraph = R"(graph @g {
  input %x : f32[2]
  const %a : f32[2] = dense<"0x0000803f00000040">
  const %b : f32[2] = dense<"0x0000803f00000040">
  const %c : i64[] = dense<"0x0000803f00000040">
  const %d : f32[2] = dense<"0x0000803f00000040">
  const %e : f32[2] = dense<"0x0000803f01000040">
  const %f : f32[1, 2] = dense<"0x0000803f00000040">
  const %u : f32[2] = dense<"0x0000803f00000040">
  untrainable %u "folded from a parameter"
  %y0 : ?[*] = Mul(%x, %a)
  %y1 : ?[*] = Add(%y0, %b)
  %y2 : ?[*] = Mul(%y1, %d)
  %y3 : ?[*] = Add(%y2, %e)
  %y4 : ?[*] = Mul(%y3, %f)
  %y5 : ?[*] = Add(%y4, %u)
  %ci : ?[*] = Cast(%c) {to = "f32"}
  %y : ?[*] = Add(%y5, %ci)
  output %y
})";

} // namespace

TEST(MergeConstants, EqualTypesAndBytesBecomeTheFirst) {
  auto g = parse(kGraph, "merge");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x = Tensor::fromF64(DType::F32, {2}, {0.5, -3});
  auto before = run(**g, {{"x", x}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int merged = -1;
  ASSERT_FALSE(mergeConstants(**g, &merged));
  EXPECT_EQ(merged, 2); // %b and %d
  std::vector<std::string> left;
  for (const Value* c : (*g)->consts) left.push_back(c->name);
  EXPECT_EQ(left, (std::vector<std::string>{"a", "c", "e", "f", "u"}));
  for (const auto& n : (*g)->nodes())
    for (const Value* in : n->inputs) EXPECT_TRUE(in->name != "b" && in->name != "d") << describe(*n);
  auto after = run(**g, {{"x", x}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  EXPECT_EQ(after->at((*g)->outputs[0]->name), before->at("y"));
  ASSERT_FALSE(mergeConstants(**g, &merged)); // nothing left to merge
  EXPECT_EQ(merged, 0);
}
