// The forward-copies pass: readers of an Identity, a Concat of one tensor, and a reshape, cast or
// SumTo to the type it already has read the copied value instead (through chains of copies); a
// reshape or cast that changes the type, a Concat of two, and a copy that is a graph output stay;
// dead copies are removed; the interpreter's results are the same.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/ForwardCopies.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

// %i, %c1, %r, %k, %s: copies of %x (%i2 a copy of the copy %i); %r2, %k2, %c2: not copies;
// %o: a copy that is itself an output.
const char* kGraph = R"(graph @g {
  input %x : f32[2, 3]
  const %shape : i64[2] = dense<"0x02000000000000000300000000000000">
  const %flat : i64[1] = dense<"0x0600000000000000">
  %i : ?[*] = Identity(%x)
  %i2 : ?[*] = Identity(%i)
  %c1 : ?[*] = Concat(%i2) {axis = 0}
  %r : ?[*] = Reshape(%c1, %shape)
  %k : ?[*] = Cast(%r) {to = "f32"}
  %s : ?[*] = SumTo(%k, %shape)
  %y0 : ?[*] = Mul(%s, %s)
  %r2 : ?[*] = Reshape(%y0, %flat)
  %k2 : ?[*] = Cast(%r2) {to = "f64"}
  %c2 : ?[*] = Concat(%k2, %k2) {axis = 0}
  %o : ?[*] = Identity(%y0)
  output %c2, %o
})";

} // namespace

TEST(ForwardCopies, ReadersReadTheCopiedValue) {
  auto g = parse(kGraph, "copies");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x = Tensor::fromF64(DType::F32, {2, 3}, {0.5, -3, 2, 7, -1.25, 4});
  auto before = run(**g, {{"x", x}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int forwarded = -1;
  ASSERT_FALSE(forwardCopies(**g, &forwarded));
  EXPECT_EQ(forwarded, 6); // %i, %i2, %c1, %r, %k, %s
  std::map<std::string, Op> left;
  for (const auto& n : (*g)->nodes()) left[n->outputs[0]->name] = n->op;
  EXPECT_EQ(left, (std::map<std::string, Op>{{"y0", Op::Mul}, {"r2", Op::Reshape}, {"k2", Op::Cast}, {"c2", Op::Concat}, {"o", Op::Identity}}));
  const Node* y0 = (*g)->findValue("y0")->producer;
  EXPECT_EQ(y0->inputs[0]->name, "x");
  EXPECT_EQ(y0->inputs[1]->name, "x");
  EXPECT_EQ((*g)->outputs[1]->name, "o"); // the module's interface keeps its names
  auto after = run(**g, {{"x", x}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  for (const char* out : {"c2", "o"}) EXPECT_EQ(after->at(out), before->at(out)) << out;
  ASSERT_FALSE(forwardCopies(**g, &forwarded));
  EXPECT_EQ(forwarded, 0);
}
