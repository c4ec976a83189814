// The autocast-bf16 pass: products read bf16 copies and their results go back
// to f32; a linear layer's bias (a parameter vector added to a MatMul's only
// result) is added in bf16 before the result goes back, as nn.Linear does
// under torch.autocast; any other reader keeps the f32 path.
#include "ir/Text.h"
#include "ir/passes/Autocast.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> autocast(const std::string& body) {
  auto g = parse("graph @g {\n input %x : f32[2, 3, 4]\n param %w : f32[4, 2] = dense<\"0x0000803f000000400000404000008040"
                 "0000803f000000400000404000008040\">\n param %b : f32[2] = dense<\"0x0000803f00000040\">\n" + body + "}", "autocast");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  int moved = -1;
  EXPECT_FALSE(autocastBf16(**g, &moved));
  EXPECT_EQ(moved, 1);
  return std::move(*g);
}

const Node* producer(const Graph& g, const Value* v) { return v ? v->producer : nullptr; }

} // namespace

TEST(Autocast, ALinearBiasIsAddedInBf16) {
  auto g = autocast(" %p : ?[*] = MatMul(%x, %w)\n %y : ?[*] = Add(%p, %b)\n output %y\n");
  // y = Cast<f32>(Add(MatMul(x.bf16, w.bf16), b.bf16))
  const Node* back = producer(*g, g->outputs[0]);
  ASSERT_TRUE(back && back->op == Op::Cast);
  EXPECT_EQ(back->outputs[0]->type.dtype, DType::F32);
  const Node* add = producer(*g, back->inputs[0]);
  ASSERT_TRUE(add && add->op == Op::Add);
  EXPECT_EQ(add->outputs[0]->type.dtype, DType::BF16);
  for (const Value* in : add->inputs) EXPECT_EQ(in->type.dtype, DType::BF16);
  const Node* bias = producer(*g, add->inputs[1]);
  ASSERT_TRUE(bias && bias->op == Op::Cast);
  EXPECT_EQ(bias->inputs[0]->name, "b");
}

TEST(Autocast, ASumReadElsewhereStaysWide) {
  // The product is read twice: the bias is an ordinary f32 Add after the cast back.
  auto g = autocast(" %p : ?[*] = MatMul(%x, %w)\n %y : ?[*] = Add(%p, %b)\n %z : ?[*] = Neg(%p)\n output %y\n output %z\n");
  const Node* add = producer(*g, g->outputs[0]);
  ASSERT_TRUE(add && add->op == Op::Add);
  EXPECT_EQ(add->outputs[0]->type.dtype, DType::F32);
  const Node* back = producer(*g, add->inputs[0]);
  ASSERT_TRUE(back && back->op == Op::Cast);
  EXPECT_EQ(producer(*g, back->inputs[0])->op, Op::MatMul);
}
