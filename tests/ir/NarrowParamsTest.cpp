// The narrow-params pass: a parameter read only through Casts to bf16 (or a
// Transpose whose readers are such Casts) is stored in bf16; one that is also a
// Gather's table (GPT-2's embedding tied to its LM head) is gathered in bf16
// and widened. Checked against the reference interpreter on the graph before
// the pass: the product is the same; the gathered rows are the bf16-rounded
// ones; a parameter read any other way stays f32.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/NarrowParams.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace sgc;
using namespace sgc::ir;

namespace {

// %w: f32[3, 2] = [[1, 1.00390625], [2, 3], [-0.5, 7]]: 1.00390625 = 1 + 2^-8 rounds to 1 in bf16.
const char* kTied = "graph @g {\n input %x : f32[2, 2]\n input %ids : i64[2]\n"
                    " param %w : f32[3, 2] = dense<\"0x0000803f0080803f0000004000004040000000bf0000e040\">\n"
                    " %e : f32[2, 2] = Gather(%w, %ids) {axis = 0}\n"
                    " %t : f32[2, 3] = Transpose(%w) {perm = [1, 0]}\n"
                    " %xb : bf16[2, 2] = Cast(%x) {to = \"bf16\"}\n"
                    " %tb : bf16[2, 3] = Cast(%t) {to = \"bf16\"}\n"
                    " %p : bf16[2, 3] = MatMul(%xb, %tb)\n"
                    " output %e\n output %p\n}";

std::unique_ptr<Graph> parsed(std::string text) {
  auto g = parse(text, "narrow");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  return std::move(*g);
}

std::map<std::string, Tensor> inputs() {
  return {{"x", Tensor::fromF64(DType::F32, {2, 2}, {1, 2, -3, 0.5})}, {"ids", Tensor::fromI64(DType::I64, {2}, {0, 2})}};
}

} // namespace

TEST(NarrowParams, ATiedEmbeddingIsStoredInBf16AndGatheredRowsWiden) {
  std::string text = kTied;
  auto before = parsed(text), after = parsed(text);
  int count = -1;
  ASSERT_FALSE(narrowParams(*after, &count));
  EXPECT_EQ(count, 1);
  const Value* w = after->findValue("w");
  EXPECT_EQ(w->type.dtype, DType::BF16);
  auto want = run(*before, inputs()), got = run(*after, inputs());
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  ASSERT_TRUE(!!got) << errorText(got.takeError());
  // The product: the Cast rounded the same values (a Transpose moves them unchanged).
  const std::string e = after->outputs[0]->name, p = after->outputs[1]->name; // the rows' output is the widening Cast's now
  EXPECT_EQ(got->at(p).toF64(), want->at("p").toF64());
  // The rows: row 0 of w rounded to bf16 (1.00390625 -> 1), row 2 exact; f32 as before.
  EXPECT_EQ(got->at(e).dtype, DType::F32);
  EXPECT_EQ(got->at(e).toF64(), (std::vector<double>{1, 1, -0.5, 7}));
  EXPECT_EQ(want->at("e").toF64(), (std::vector<double>{1, 1.00390625, -0.5, 7}));
}

TEST(NarrowParams, AParameterReadInF32StaysF32) {
  std::string text = kTied;
  text.insert(text.find(" output %e"), " %n : f32[3, 2] = Neg(%w)\n output %n\n");
  auto g = parsed(text);
  int count = -1;
  ASSERT_FALSE(narrowParams(*g, &count));
  EXPECT_EQ(count, 0);
  EXPECT_EQ(g->findValue("w")->type.dtype, DType::F32);
}
