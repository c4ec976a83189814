// The fold-transposes pass: a linear layer's weight transposes (cast to bf16
// after transposing; the gradient's transpose of a product) end next to the
// products or cancel, with the same results on the interpreter.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/FoldTransposes.h"
#include "ir/passes/InferShapes.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> parsed(const std::string& text) {
  auto g = parse(text, "fold");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  return std::move(*g);
}

int countOp(const Graph& g, Op op) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n->op == op;
  return c;
}

/// Runs `g` before and after the pass on the same inputs: every output bit for bit the same.
void expectSameResults(Graph& g, int wantRewrites) {
  auto in = randomInputs(g, 5);
  auto before = run(g, in);
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  std::vector<std::string> names;
  for (const Value* v : g.outputs) names.push_back(v->name);
  int count = -1;
  ASSERT_FALSE(foldTransposes(g, &count));
  EXPECT_EQ(count, wantRewrites);
  auto after = run(g, in);
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor &want = before->at(names[i]), &got = after->at(g.outputs[i]->name);
    ASSERT_EQ(got.shape, want.shape) << names[i];
    ASSERT_EQ(got.dtype, want.dtype) << names[i];
    for (int64_t k = 0; k < want.numel(); ++k) EXPECT_EQ(got.getF(k), want.getF(k)) << names[i] << " " << k;
  }
}

} // namespace

TEST(FoldTransposes, LinearLayerUnderAutocast) {
  // y = x W^T with W^T cast to bf16; the backward product reads (W^T)^T; the weight gradient
  // is (x^T dy)^T, widened to f32 on the way.
  auto g = parsed("graph @g { input %x : f32[6, 4]\n input %w : f32[5, 4]\n input %dy : bf16[6, 5]\n"
                  " %wt : ?[*] = Transpose(%w) {perm = [1, 0]}\n"
                  " %wtb : ?[*] = Cast(%wt) {to = \"bf16\"}\n"
                  " %xb : ?[*] = Cast(%x) {to = \"bf16\"}\n"
                  " %y : ?[*] = MatMul(%xb, %wtb)\n"
                  " %wtt : ?[*] = Transpose(%wtb) {perm = [1, 0]}\n"
                  " %dx : ?[*] = MatMul(%dy, %wtt)\n"
                  " %xt : ?[*] = Transpose(%xb) {perm = [1, 0]}\n"
                  " %gwt : ?[*] = MatMul(%xt, %dy)\n"
                  " %gwtf : ?[*] = Cast(%gwt) {to = \"f32\"}\n"
                  " %gw : ?[*] = Transpose(%gwtf) {perm = [1, 0]}\n"
                  " output %y, %dx, %gw }");
  // The weight's cast moves before its transpose; (W^T)^T is the cast weight; the gradient is
  // one Gemm of dy^T and x (x^T^T is x), widened.
  expectSameResults(*g, 3);
  EXPECT_EQ(countOp(*g, Op::Transpose), 1); // the cast W's, read by y's product
  for (const auto& n : g->nodes())
    if (n->op == Op::Transpose) {
      ASSERT_EQ(n->outputs.size(), 1u);
      bool onlyProducts = true;
      for (const auto& m : g->nodes())
        for (const Value* in : m->inputs)
          if (in == n->outputs[0]) onlyProducts &= m->op == Op::MatMul;
      EXPECT_TRUE(onlyProducts) << n->name;
    }
  EXPECT_EQ(g->outputs[1]->producer->inputs[1]->producer->op, Op::Cast); // dx = dy Cast(W)
  const Node* gw = g->outputs[2]->producer;
  ASSERT_EQ(gw->op, Op::Cast);
  const Node* gemm = gw->inputs[0]->producer;
  ASSERT_EQ(gemm->op, Op::Gemm);
  EXPECT_EQ(gemm->inputs[0]->name, "dy");
  EXPECT_EQ(gemm->getInt("transA", 0), 1);
  EXPECT_EQ(gemm->inputs[1]->name, "xb");
  EXPECT_EQ(gemm->getInt("transB", 1), 0);
}

TEST(FoldTransposes, ComposesPermsAndLeavesSharedValues) {
  // Two transposes of a rank-3 value compose into one; a transpose read twice keeps its cast
  // where it is; a widening cast of a transpose is not moved (it would transpose wider data).
  auto g = parsed("graph @g { input %a : f32[2, 3, 4]\n input %m : f32[3, 4]\n input %h : bf16[3, 4]\n"
                  " %t1 : ?[*] = Transpose(%a) {perm = [1, 0, 2]}\n"
                  " %t2 : ?[*] = Transpose(%t1) {perm = [0, 2, 1]}\n"
                  " %mt : ?[*] = Transpose(%m) {perm = [1, 0]}\n"
                  " %mtb : ?[*] = Cast(%mt) {to = \"bf16\"}\n"
                  " %ht : ?[*] = Transpose(%h) {perm = [1, 0]}\n"
                  " %htf : ?[*] = Cast(%ht) {to = \"f32\"}\n"
                  " output %t2, %mt, %mtb, %htf }");
  expectSameResults(*g, 1);
  const Node* t = g->outputs[0]->producer;
  ASSERT_EQ(t->op, Op::Transpose);
  EXPECT_EQ(t->inputs[0]->name, "a");
  EXPECT_EQ(t->getInts("perm"), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(g->outputs[2]->producer->inputs[0]->name, "mt");
  EXPECT_EQ(g->outputs[3]->producer->op, Op::Cast);
}
