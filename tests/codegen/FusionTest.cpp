// The kernel schedule's elementwise fusion (codegen::kernelSchedule): which
// nodes share a kernel, which of its results it stores (groupInternals), how
// far a node runs ahead of its place, and that the memory plan keeps every
// value live where the schedule reads it.
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;

namespace {

std::unique_ptr<ir::Graph> parsed(const std::string& text) {
  auto g = ir::parse(text, "fusion");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  return std::move(*g);
}

/// Each group as its nodes' result names: "a b c".
std::vector<std::string> groups(const std::vector<std::vector<const ir::Node*>>& schedule) {
  std::vector<std::string> out;
  for (const auto& group : schedule) {
    std::string l;
    for (const ir::Node* n : group) l += (l.empty() ? "" : " ") + n->outputs[0]->name;
    out.push_back(l);
  }
  return out;
}

std::set<std::string> names(const std::set<const ir::Value*>& values) {
  std::set<std::string> out;
  for (const ir::Value* v : values) out.insert(v->name);
  return out;
}

} // namespace

TEST(Fusion, ResultsReadElsewhereAreStoredNotSplit) {
  // RMSNorm's forward as exporters write it: %n is read again by the backward (here: an output),
  // so it is stored, but the kernel goes on to the weighted, narrowed result.
  auto g = parsed(R"(graph @g {
    input %x : f32[4, 8]
    input %r : f32[4, 1]
    input %w : f32[8]
    %n : ?[*] = Mul(%x, %r)
    %y : ?[*] = Mul(%n, %w)
    %yb : ?[*] = Cast(%y) {to = "bf16"}
    output %yb, %n
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(groups(schedule), (std::vector<std::string>{"n y yb"}));
  EXPECT_EQ(names(codegen::groupInternals(*g, schedule)), (std::set<std::string>{"y"}));
}

TEST(Fusion, SiblingsAndNodesPastAReductionJoin) {
  // A product's gradients: dA = g * w and dW = g * a read the same g; the sum of dW comes
  // between them and the next elementwise node, which still joins (its inputs are ready).
  auto g = parsed(R"(graph @g {
    input %gin : bf16[4, 8]
    input %w : f32[4, 8]
    input %a : f32[4, 8]
    input %b : f32[4, 8]
    const %ax : i64[1] = dense<"0x0000000000000000">
    %g : ?[*] = Cast(%gin) {to = "f32"}
    %da : ?[*] = Mul(%g, %w)
    %dw : ?[*] = Mul(%g, %a)
    %s : ?[*] = ReduceSum(%dw, %ax) {keepdims = 1}
    %db : ?[*] = Mul(%da, %b)
    output %s, %db
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(groups(schedule), (std::vector<std::string>{"g da dw db", "s"}));
  EXPECT_EQ(names(codegen::groupInternals(*g, schedule)), (std::set<std::string>{"g", "da"}));
  auto plan = codegen::planMemory(*g, schedule, 64, {}, codegen::groupInternals(*g, schedule));
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_FALSE(codegen::checkPlan(*plan));
  EXPECT_FALSE(codegen::checkLiveness(*g, schedule, *plan));
  for (const auto& b : plan->buffers)
    if (b.value->name == "g" || b.value->name == "da") {
      EXPECT_EQ(b.bytes, 0) << b.value->name; // in registers only
    }
}

TEST(Fusion, UnrelatedNodesStayApart) {
  // Elementwise nodes of one shape that share nothing of that shape are separate kernels.
  auto g = parsed(R"(graph @g {
    input %x : f32[4, 8]
    input %z : f32[4, 8]
    input %w : f32[8]
    %a : ?[*] = Mul(%x, %w)
    %b : ?[*] = Mul(%z, %w)
    output %a, %b
  })");
  EXPECT_EQ(groups(codegen::kernelSchedule(*g)), (std::vector<std::string>{"a", "b"}));
}

TEST(Fusion, ANodeRunsAtMostAFewKernelsAhead) {
  // %late reads only %e, computed by the first kernel, but comes after ten other kernels (as a
  // recomputed node comes in the backward pass): it stays near its place, so the recomputation
  // is not undone and %late does not live across the whole step.
  std::string text = "graph @g {\n  input %x : f32[4, 8]\n  input %t : f32[8, 4]\n  %e : ?[*] = Exp(%x)\n";
  std::string prev = "t";
  for (int i = 0; i < 10; ++i) {
    text += "  %m" + std::to_string(i) + " : ?[*] = Softmax(%" + prev + ") {axis = 1}\n";
    prev = "m" + std::to_string(i);
  }
  text += "  %late : ?[*] = Neg(%e)\n  output %e, %late, %" + prev + "\n}"; // %e outlives the step: it stays where it is
  auto g = parsed(text);
  auto schedule = codegen::kernelSchedule(*g);
  ASSERT_EQ(schedule.size(), 12u);
  EXPECT_EQ(groups(schedule).front(), "e");
  EXPECT_EQ(groups(schedule).back(), "late");
}

const char* kHalves = R"(
    const %s0 : i64[1] = dense<"0x0000000000000000">
    const %s4 : i64[1] = dense<"0x0400000000000000">
    const %s8 : i64[1] = dense<"0x0800000000000000">)";

TEST(Fusion, MovementsJoinTheirReader) {
  // The rotary embedding as exporters write it: a transpose, slices, a negation, a concatenation
  // and the products with cos and sin. Each movement is read by one later kernel only, so all
  // become one kernel that stores the result alone.
  auto g = parsed(std::string(R"(graph @g {
    input %x : f32[2, 3, 4, 8]
    input %cos : f32[3, 8]
    input %sin : f32[3, 8]
    const %ax : i64[1] = dense<"0x0300000000000000">)") + kHalves + R"(
    %t : ?[*] = Transpose(%x) {perm = [0, 2, 1, 3]}
    %hi : ?[*] = Slice(%t, %s4, %s8, %ax)
    %n : ?[*] = Neg(%hi)
    %lo : ?[*] = Slice(%t, %s0, %s4, %ax)
    %r : ?[*] = Concat(%n, %lo) {axis = 3}
    %a : ?[*] = Mul(%t, %cos)
    %b : ?[*] = Mul(%r, %sin)
    %y : ?[*] = Add(%a, %b)
    output %y
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(groups(schedule), (std::vector<std::string>{"t hi n lo r a b y"}));
  EXPECT_EQ(names(codegen::groupInternals(*g, schedule)), (std::set<std::string>{"t", "hi", "n", "lo", "r", "a", "b"}));
}

TEST(Fusion, AKernelReadingThroughAMovementTakesNoOperandsBytes) {
  // %y = %a^T + %a: were %y written over %a, element (0, 1) would be stored before element
  // (1, 0) reads it. %a dies in that kernel and has %y's bytes, as an elementwise result's
  // operand may give them; here it must not.
  auto g = parsed(R"(graph @g {
    input %x : f32[4, 4]
    %a : ?[*] = Exp(%x)
    %m : ?[*] = MatMul(%a, %a)
    %t : ?[*] = Transpose(%a) {perm = [1, 0]}
    %y : ?[*] = Add(%t, %a)
    output %y, %m
  })");
  auto schedule = codegen::kernelSchedule(*g);
  ASSERT_EQ(groups(schedule), (std::vector<std::string>{"a", "m", "t y"}));
  auto plan = codegen::planMemory(*g, schedule, 64, {}, codegen::groupInternals(*g, schedule));
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_FALSE(codegen::checkPlan(*plan));
  for (const auto& b : plan->buffers) {
    if (b.value->name == "y") {
      EXPECT_EQ(b.aliasOf, nullptr) << "in place of %" << b.aliasOf->name;
    }
  }
}

TEST(Fusion, AValueReadAtManyIndicesStaysApart) {
  // Three rotations of %x, each a concatenation of two slices of the one before: one kernel would
  // compute %x's element 8 times over (once for each path), past the bound of 4.
  std::string text = std::string("graph @g {\n  input %x : f32[2, 8]\n  const %ax : i64[1] = dense<\"0x0100000000000000\">") + kHalves + "\n";
  std::string prev = "x";
  for (int i = 1; i <= 3; ++i) {
    std::string k = std::to_string(i);
    text += "  %h" + k + " : ?[*] = Slice(%" + prev + ", %s4, %s8, %ax)\n  %l" + k + " : ?[*] = Slice(%" + prev + ", %s0, %s4, %ax)\n";
    text += "  %r" + k + " : ?[*] = Concat(%h" + k + ", %l" + k + ") {axis = 1}\n";
    prev = "r" + k;
  }
  auto g = parsed(text + "  %y : ?[*] = Exp(%r3)\n  output %y\n}");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(groups(schedule), (std::vector<std::string>{"h1 l1 r1", "h2 l2 r2 h3 l3 r3 y"}));
}

TEST(Fusion, TheLivenessCheckFindsAValueReadAfterItsRange) {
  auto g = parsed(R"(graph @g {
    input %x : f32[4]
    %a : ?[*] = Exp(%x)
    %b : ?[*] = Transpose(%a) {perm = [0]}
    %c : ?[*] = Neg(%a)
    output %b, %c
  })");
  auto schedule = codegen::kernelSchedule(*g);
  auto plan = codegen::planMemory(*g, schedule);
  ASSERT_TRUE(!!plan);
  EXPECT_FALSE(codegen::checkLiveness(*g, schedule, *plan));
  for (auto& b : plan->buffers)
    if (b.value->name == "a") b.last = 0; // as if the plan freed %a after its first kernel
  Error e = codegen::checkLiveness(*g, schedule, *plan);
  ASSERT_TRUE(!!e);
  EXPECT_NE(errorText(std::move(e)).find("%a is used at step"), std::string::npos);
}
