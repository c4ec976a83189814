// Transposes folded into GEMM flags (codegen/GemmTransposes): which fold, and
// that the memory plan keeps their sources live until the GEMMs that read them.
#include "codegen/GemmTransposes.h"
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;

namespace {

std::unique_ptr<ir::Graph> parsed(const char* text) {
  auto g = ir::parse(text, "transposes");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  return std::move(*g);
}

const ir::Node* producer(const ir::Graph& g, const char* value) { return g.findValue(value)->producer; }

} // namespace

TEST(GemmTransposes, FoldsOnlyTransposesReadAsGemmOperands) {
  // %t swaps the last two dims and only a MatMul reads it: folded. %u is also read by an Add: kept.
  // %v permutes the batch dims: kept.
  auto g = parsed(R"(graph @g {
    input %x : f32[2, 8, 4]
    input %w : f32[2, 8, 5]
    input %z : f32[4, 8]
    %t : ?[*] = Transpose(%x) {perm = [0, 2, 1]}
    %y : ?[*] = MatMul(%t, %w)
    %u : ?[*] = Transpose(%z) {perm = [1, 0]}
    %s : ?[*] = Add(%u, %u)
    %p : ?[*] = MatMul(%z, %u)
    output %s
    %v : ?[*] = Transpose(%x) {perm = [1, 0, 2]}
    %q : ?[*] = MatMul(%v, %z)
    output %y
    output %p
    output %q })");
  auto schedule = codegen::kernelSchedule(*g);
  auto absorbed = codegen::absorbTransposes(*g, schedule);
  EXPECT_EQ(absorbed.skipped.size(), 1u);
  EXPECT_TRUE(absorbed.skipped.count(producer(*g, "t")));
  EXPECT_EQ(absorbed.source.at(g->findValue("t")), g->findValue("x"));
  // The source is read at the GEMM's position, which the plan honours.
  int gemmAt = -1;
  for (int i = 0; i < (int)schedule.size(); ++i)
    if (schedule[i][0] == producer(*g, "y")) gemmAt = i;
  EXPECT_EQ(absorbed.lastRead.at(g->findValue("x")), gemmAt);
}

TEST(GemmTransposes, SourcesStayLiveUntilTheGemm) {
  // %a dies at the transpose as far as the graph says; the GEMM reading it later must find it intact.
  auto g = parsed(R"(graph @g {
    input %x : f32[8, 8]
    input %w : f32[8, 8]
    %a : ?[*] = Exp(%x)
    %t : ?[*] = Transpose(%a) {perm = [1, 0]}
    %b : ?[*] = Neg(%w)
    %c : ?[*] = Exp(%b)
    %y : ?[*] = MatMul(%c, %t)
    output %y })");
  auto schedule = codegen::kernelSchedule(*g);
  auto absorbed = codegen::absorbTransposes(*g, schedule);
  ASSERT_EQ(absorbed.skipped.size(), 1u);
  auto plan = codegen::planMemory(*g, schedule, 64, absorbed.lastRead);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_EQ(errorText(codegen::checkPlan(*plan)), "");
  const codegen::Buffer *a = nullptr, *c = nullptr;
  for (const auto& b : plan->buffers) {
    if (b.value->name == "a") a = &b;
    if (b.value->name == "c") c = &b;
  }
  ASSERT_TRUE(a && c);
  EXPECT_GE(a->last, absorbed.lastRead.at(g->findValue("a")));
  // %c is live with %a, so they cannot share bytes.
  EXPECT_TRUE(a->offset + a->bytes <= c->offset || c->offset + c->bytes <= a->offset || a->region != c->region);
}
