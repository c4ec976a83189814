// The memory plan of a real training step (the bundled MLP sample with
// AdamW) passes the overlap checker, reuses memory, is deterministic, and the
// checker rejects a plan where two live buffers overlap; views share bytes.
#include "codegen/MemoryPlan.h"
#include "frontend/onnx/Importer.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"

#include <gtest/gtest.h>

using namespace sgc;

namespace {
std::unique_ptr<ir::Graph> trainingStep() {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  EXPECT_FALSE(ir::buildTrainingStep(**g, o));
  return std::move(*g);
}
} // namespace

TEST(MemoryPlan, TrainingStepIsSoundAndShares) {
  auto g = trainingStep();
  auto plan = codegen::planMemory(*g);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_EQ(errorText(codegen::checkPlan(*plan)), "");
  int64_t act = plan->regionBytes[(int)codegen::Region::Activations];
  EXPECT_GT(act, 0);
  EXPECT_LT(act, plan->activationsUnshared) << "liveness must let activations share bytes";
  // Parameters, their AdamW moments and gradients each have one slot per parameter.
  int params = 0, grads = 0;
  for (const auto& b : plan->buffers) {
    params += b.region == codegen::Region::Params && !b.aliasOf;
    grads += b.region == codegen::Region::Grads;
  }
  EXPECT_EQ(params, (int)g->params.size());
  EXPECT_EQ(grads, (int)g->params.size());
  auto again = codegen::planMemory(*g);
  ASSERT_TRUE(!!again);
  EXPECT_EQ(codegen::printPlan(*g, *plan), codegen::printPlan(*g, *again));
}

TEST(MemoryPlan, CheckerFindsOverlap) {
  auto g = trainingStep();
  auto plan = codegen::planMemory(*g);
  ASSERT_TRUE(!!plan);
  // Move one activation onto another that is live at the same time.
  codegen::Buffer *a = nullptr, *b = nullptr;
  for (auto& x : plan->buffers)
    for (auto& y : plan->buffers)
      if (&x != &y && !a && x.region == codegen::Region::Activations && y.region == x.region && !x.aliasOf && !y.aliasOf &&
          x.first <= y.last && y.first <= x.last && x.offset != y.offset && x.bytes == y.bytes)
        a = &x, b = &y;
  ASSERT_TRUE(a && b);
  const ir::Value* moved = a->value;
  int64_t from = a->offset;
  for (auto& x : plan->buffers) // the buffer and its aliases (at its place) move together
    if (&x == a || (x.aliasOf && x.offset == from && x.region == a->region && x.aliasOf == moved)) x.offset = b->offset;
  std::string msg = errorText(codegen::checkPlan(*plan));
  EXPECT_NE(msg.find("are live together and overlap in activations"), std::string::npos) << msg;
}

TEST(MemoryPlan, SymbolicShapesNeedBinding) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp.onnx");
  ASSERT_TRUE(!!g);
  auto plan = codegen::planMemory(**g);
  ASSERT_FALSE(!!plan);
  EXPECT_NE(errorText(plan.takeError()).find("has shape f32[N, 16]; bind its dims with --dim"), std::string::npos);
}

TEST(MemoryPlan, ViewsShareTheirInputsBytes) {
  // A reshape, and a SumTo to its input's own shape (autodiff emits one where dims were still
  // symbolic), take their input's bytes; a SumTo that really sums gets bytes of its own.
  auto g = ir::parse("graph @g { input %x : f32[4, 6]\n const %s : i64[2] = dense<\"0x04000000000000000600000000000000\">\n"
                     " const %r : i64[2] = dense<\"0x06000000000000000400000000000000\">\n const %c : i64[1] = dense<\"0x0600000000000000\">\n"
                     " %a : ?[*] = Neg(%x)\n %same : ?[*] = SumTo(%a, %s)\n %t : ?[*] = Reshape(%same, %r)\n %sum : ?[*] = SumTo(%a, %c)\n"
                     " %y : ?[*] = Neg(%t)\n output %y, %sum }",
                     "views");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  auto plan = codegen::planMemory(**g);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_EQ(errorText(codegen::checkPlan(*plan)), "");
  std::map<std::string, const codegen::Buffer*> by;
  for (const auto& b : plan->buffers) by[b.value->name] = &b;
  auto root = [&](const std::string& n) {
    const ir::Value* v = by.at(n)->value;
    while (by.at(v->name)->aliasOf) v = by.at(v->name)->aliasOf;
    return v->name;
  };
  EXPECT_EQ(root("same"), "a");
  EXPECT_EQ(root("t"), "a");
  EXPECT_EQ(root("sum"), "sum");
}

namespace {
/// The value whose bytes `name` uses in `plan`.
std::string rootOf(const codegen::MemoryPlan& plan, const std::string& name) {
  std::map<std::string, const codegen::Buffer*> by;
  for (const auto& b : plan.buffers) by[b.value->name] = &b;
  const ir::Value* v = by.at(name)->value;
  while (by.at(v->name)->aliasOf) v = by.at(v->name)->aliasOf;
  return v->name;
}

std::unique_ptr<ir::Graph> parsedGraph(const std::string& text) {
  auto g = ir::parse(text, "plan");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  return std::move(*g);
}
} // namespace

TEST(MemoryPlan, TransposesOfUnitDimsAreViews) {
  // [4, 1, 3, 2] -> [4, 3, 1, 2] moves only a dim of size 1: the same bytes; [4, 1, 3, 2] ->
  // [4, 1, 2, 3] reorders elements: bytes of its own.
  auto g = parsedGraph("graph @g { input %x : f32[4, 1, 3, 2]\n %a : ?[*] = Neg(%x)\n"
                       " %unit : ?[*] = Transpose(%a) {perm = [0, 2, 1, 3]}\n %swap : ?[*] = Transpose(%a) {perm = [0, 1, 3, 2]}\n"
                       " %y : ?[*] = Neg(%unit)\n output %y, %swap }");
  EXPECT_TRUE(codegen::isView(*(*g).findValue("unit")->producer));
  EXPECT_FALSE(codegen::isView(*(*g).findValue("swap")->producer));
  auto plan = codegen::planMemory(*g);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_EQ(errorText(codegen::checkPlan(*plan)), "");
  EXPECT_EQ(rootOf(*plan, "unit"), "a");
  EXPECT_EQ(rootOf(*plan, "swap"), "swap");
}

TEST(MemoryPlan, CrossEntropyGradientWritesOverItsScores) {
  // The scores die at the gradient, which takes their bytes; scores still read later keep theirs.
  auto dies = parsedGraph("graph @g { input %x : f32[4, 8]\n input %t : i64[4]\n input %d : f32[]\n %s : ?[*] = Neg(%x)\n"
                          " %g : ?[*] = SceLossGrad(%s, %t, %d)\n %y : ?[*] = Neg(%g)\n output %y }");
  auto plan = codegen::planMemory(*dies);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_EQ(errorText(codegen::checkPlan(*plan)), "");
  EXPECT_EQ(rootOf(*plan, "g"), "s");
  auto kept = parsedGraph("graph @g { input %x : f32[4, 8]\n input %t : i64[4]\n input %d : f32[]\n %s : ?[*] = Neg(%x)\n"
                          " %g : ?[*] = SceLossGrad(%s, %t, %d)\n %y : ?[*] = Add(%g, %s)\n output %y }");
  auto plan2 = codegen::planMemory(*kept);
  ASSERT_TRUE(!!plan2) << errorText(plan2.takeError());
  EXPECT_EQ(rootOf(*plan2, "g"), "g");
}
