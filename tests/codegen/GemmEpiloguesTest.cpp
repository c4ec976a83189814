// GELUs that cuBLASLt's epilogues compute (codegen/GemmEpilogues): which
// products take them, and that the memory plan has a lone GELU's result live
// from the product on.
#include "codegen/GemmEpilogues.h"
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;

namespace {

std::unique_ptr<ir::Graph> parsed(const char* text) {
  auto g = ir::parse(text, "epilogues");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  return std::move(*g);
}

} // namespace

TEST(GemmEpilogues, TanhGelusJoinTheirProducts) {
  // GPT-2's MLP: fc (MatMul + bias) then a tanh GELU in a kernel of its own (the backward reads
  // %h); in inference, a product whose kernel ends in the GELU; and as Hugging Face's Conv1D
  // exports it, a GELU of a view of the product, whose kernel stores a view of the GELU. The erf
  // GELU after %h2 is not cuBLASLt's; nor is the GELU's gradient.
  auto g = parsed(R"(graph @g {
    input %x : bf16[16, 8]
    input %w : bf16[8, 24]
    input %b : bf16[24]
    input %dy : bf16[16, 8]
    input %w2 : bf16[8, 24]
    %m : ?[*] = MatMul(%x, %w)
    %h : ?[*] = Add(%m, %b)
    %a : ?[*] = Gelu(%h) {approximate = "tanh"}
    %h2 : ?[*] = MatMul(%x, %w)
    %a2 : ?[*] = Gelu(%h2)
    %d : ?[*] = MatMul(%dy, %w2)
    %da : ?[*] = UnaryGrad(%h, %d) {of = "Gelu", approximate = "tanh"}
    %m3 : ?[*] = MatMul(%x, %w)
    %h3 : ?[*] = Add(%b, %m3)
    %a3 : ?[*] = Gelu(%h3) {approximate = "tanh"}
    const %s3 : i64[3] = dense<"0x020000000000000008000000000000001800000000000000">
    const %s2 : i64[2] = dense<"0x10000000000000001800000000000000">
    %m4 : ?[*] = MatMul(%x, %w)
    %h4 : ?[*] = Add(%m4, %b)
    %r4 : ?[*] = Reshape(%h4, %s3)
    %a4 : ?[*] = Gelu(%r4) {approximate = "tanh"}
    %o4 : ?[*] = Reshape(%a4, %s2)
    output %a, %a2, %da, %a3, %o4, %r4
  })");
  auto schedule = codegen::kernelSchedule(*g);
  auto gelus = codegen::fuseGemmGelus(*g, schedule);
  ASSERT_EQ(gelus.fused.size(), 3u);
  auto position = [&](const char* value) {
    for (size_t i = 0; i < schedule.size(); ++i)
      for (const ir::Node* n : schedule[i])
        if (n->outputs[0]->name == value) return i;
    return SIZE_MAX;
  };
  const codegen::GemmGelu &lone = gelus.fused[0], &inGroup = gelus.fused[1];
  EXPECT_EQ(lone.product, position("h"));
  EXPECT_EQ(lone.gelu, position("a"));
  EXPECT_EQ(lone.result->name, "a");
  EXPECT_EQ(lone.input->name, "h"); // the product and bias: cuBLASLt's aux output
  EXPECT_EQ(lone.bias->name, "b");
  EXPECT_EQ(inGroup.product, position("a3"));
  EXPECT_EQ(inGroup.product, position("m3"));
  EXPECT_FALSE(inGroup.gelu); // the product's own epilogue
  EXPECT_EQ(inGroup.result->name, "a3");
  EXPECT_EQ(inGroup.input, nullptr);
  EXPECT_EQ(inGroup.bias->name, "b");
  const codegen::GemmGelu& view = gelus.fused[2];
  EXPECT_EQ(view.product, position("h4"));
  EXPECT_EQ(view.gelu, position("a4"));
  EXPECT_EQ(view.gelu, position("o4"));
  EXPECT_EQ(view.result->name, "o4"); // the GELU's elements, in their order
  EXPECT_EQ(view.input->name, "h4");
  // The lone GELU's result is written at its product's position: live from there, and in no
  // operand's bytes.
  EXPECT_EQ(gelus.earlierWrites.size(), 2u);
  auto plan = codegen::planMemory(*g, schedule, 64, {}, codegen::groupInternals(*g, schedule), gelus.earlierWrites);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  EXPECT_FALSE(codegen::checkPlan(*plan));
  for (const auto& b : plan->buffers) {
    if (b.value->name != "a") continue;
    EXPECT_EQ(b.first, (int)position("h"));
    EXPECT_EQ(b.aliasOf, nullptr);
  }
}
