// The narrow-moves pass: bf16 data widened to f32 only to be moved (split,
// reshaped, transposed, concatenated) and cast back to bf16 moves as bf16,
// with bit-identical results on the interpreter; elementwise functions of bf16
// values in such chains store bf16, each rounding once, as PyTorch's autocast
// does; a chain with an f32 operand in it stays as it is.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/NarrowMoves.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

struct Case {
  const char* name;
  const char* body; ///< computes %y (bf16) from %x : bf16[2, 4, 6]
  int narrowed, castsLeft;
};

int count(const Graph& g, Op op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

} // namespace

TEST(NarrowMoves, MovesBetweenCastsRunNarrowWithTheSameBits) {
  for (const Case& c :
       {Case{"transpose", " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %t : ?[*] = Transpose(%w) {perm = [0, 2, 1]}\n"
                          " %y : ?[*] = Cast(%t) {to = \"bf16\"}\n", 1, 0},
        Case{"arithmeticInBetween", " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %m : ?[*] = Mul(%w, %w)\n"
                                    " %t : ?[*] = Transpose(%m) {perm = [0, 2, 1]}\n %y : ?[*] = Cast(%t) {to = \"bf16\"}\n", 1, 0},
        Case{"anF32Operand", " const %c : f32[] = dense<\"0xcdcc8c3f\">\n %w : ?[*] = Cast(%x) {to = \"f32\"}\n"
                             " %m : ?[*] = Mul(%w, %c)\n %y : ?[*] = Cast(%m) {to = \"bf16\"}\n", 0, 2},
        Case{"gelu", " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %g : ?[*] = Gelu(%w) {approximate = \"tanh\"}\n"
                     " %y : ?[*] = Cast(%g) {to = \"bf16\"}\n", 1, 0},
        Case{"geluGradient", " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %n : ?[*] = Neg(%x)\n %d : ?[*] = Cast(%n) {to = \"f32\"}\n"
                             " %g : ?[*] = UnaryGrad(%w, %d) {of = \"Gelu\", approximate = \"none\"}\n"
                             " %y : ?[*] = Cast(%g) {to = \"bf16\"}\n", 1, 0},
        Case{"wideAlsoRead", " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %t : ?[*] = Transpose(%w) {perm = [0, 2, 1]}\n"
                             " %y : ?[*] = Cast(%t) {to = \"bf16\"}\n %z : ?[*] = Neg(%t)\n output %z\n", 1, 1}}) {
    SCOPED_TRACE(c.name);
    auto g = parse(std::string("graph @g { input %x : bf16[2, 4, 6]\n") + c.body + " output %y }", c.name);
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(inferShapes(**g, false));
    Tensor x(DType::BF16, {2, 4, 6});
    for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, -3 + 0.37 * (double)i);
    auto before = run(**g, {{"x", x}});
    ASSERT_TRUE(!!before) << errorText(before.takeError());
    int narrowed = -1;
    ASSERT_FALSE(narrowMoves(**g, &narrowed));
    (*g)->removeDeadNodes();
    EXPECT_EQ(narrowed, c.narrowed);
    EXPECT_EQ(count(**g, Op::Cast), c.castsLeft);
    auto after = run(**g, {{"x", x}});
    ASSERT_TRUE(!!after) << errorText(after.takeError());
    const Tensor &want = before->at("y"), &got = after->at((*g)->outputs.back()->name);
    ASSERT_EQ(got.dtype, DType::BF16);
    ASSERT_EQ(got.bytes.size(), want.bytes.size());
    EXPECT_EQ(0, std::memcmp(got.bytes.data(), want.bytes.data(), want.bytes.size()));
  }
}

TEST(NarrowMoves, AChainOfFunctionsRoundsAfterEach) {
  // silu(x) * u from bf16 x and u, as Llama's MLP between its products: stored bf16 after the
  // sigmoid and each product, as PyTorch's autocast stores them, not rounded once at the end.
  const char* chain = R"(graph @g {
    input %x : bf16[64]
    input %u : bf16[64]
    %w : ?[*] = Cast(%x) {to = "f32"}
    %v : ?[*] = Cast(%u) {to = "f32"}
    %s : ?[*] = Sigmoid(%w)
    %a : ?[*] = Mul(%w, %s)
    %m : ?[*] = Mul(%a, %v)
    %y : ?[*] = Cast(%m) {to = "bf16"}
    output %y })";
  const char* rounded = R"(graph @g {
    input %x : bf16[64]
    input %u : bf16[64]
    %w : ?[*] = Cast(%x) {to = "f32"}
    %v : ?[*] = Cast(%u) {to = "f32"}
    %s : ?[*] = Sigmoid(%w)
    %sb : ?[*] = Cast(%s) {to = "bf16"}
    %sw : ?[*] = Cast(%sb) {to = "f32"}
    %a : ?[*] = Mul(%w, %sw)
    %ab : ?[*] = Cast(%a) {to = "bf16"}
    %aw : ?[*] = Cast(%ab) {to = "f32"}
    %m : ?[*] = Mul(%aw, %v)
    %y : ?[*] = Cast(%m) {to = "bf16"}
    output %y })";
  auto g = parse(chain, "chain"), r = parse(rounded, "rounded");
  ASSERT_TRUE(!!g && !!r);
  ASSERT_FALSE(inferShapes(**g, false));
  ASSERT_FALSE(inferShapes(**r, false));
  Tensor x(DType::BF16, {64}), u(DType::BF16, {64});
  for (int64_t i = 0; i < 64; ++i) x.setF(i, -4 + 0.1237 * (double)i), u.setF(i, 1.3 - 0.0391 * (double)i);
  int narrowed = -1;
  ASSERT_FALSE(narrowMoves(**g, &narrowed));
  (*g)->removeDeadNodes();
  EXPECT_EQ(narrowed, 1);
  EXPECT_EQ(count(**g, Op::Cast), 0);
  auto got = run(**g, {{"x", x}, {"u", u}}), want = run(**r, {{"x", x}, {"u", u}});
  ASSERT_TRUE(!!got && !!want);
  const Tensor &a = got->at((*g)->outputs[0]->name), &b = want->at("y");
  ASSERT_EQ(a.dtype, DType::BF16);
  EXPECT_EQ(0, std::memcmp(a.bytes.data(), b.bytes.data(), b.bytes.size()));
}

TEST(NarrowMoves, SplitReshapeAndConcatNarrowTogether) {
  // Both halves of a split, one reshaped through a transpose, meet again in a Concat: all narrow.
  auto g = parse(R"(graph @g {
    input %x : bf16[2, 4, 6]
    const %split : i64[2] = dense<"0x03000000000000000300000000000000">
    const %shape : i64[3] = dense<"0x020000000000000003000000000000000400000000000000">
    %w : ?[*] = Cast(%x) {to = "f32"}
    %a : ?[*], %b : ?[*] = Split(%w, %split) {axis = 2}
    %t : ?[*] = Transpose(%b) {perm = [0, 2, 1]}
    %r : ?[*] = Reshape(%t, %shape)
    %ta : ?[*] = Transpose(%a) {perm = [0, 2, 1]}
    %c : ?[*] = Concat(%r, %ta) {axis = 1}
    %y : ?[*] = Cast(%c) {to = "bf16"}
    output %y })", "concat");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x(DType::BF16, {2, 4, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, 1.5 - 0.11 * (double)i);
  auto before = run(**g, {{"x", x}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int narrowed = -1;
  ASSERT_FALSE(narrowMoves(**g, &narrowed));
  (*g)->removeDeadNodes();
  EXPECT_EQ(narrowed, 1);
  EXPECT_EQ(count(**g, Op::Cast), 0);
  EXPECT_EQ(count(**g, Op::Split), 1); // the wide chain is gone
  auto after = run(**g, {{"x", x}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  const Tensor &want = before->at("y"), &got = after->at((*g)->outputs.back()->name);
  ASSERT_EQ(got.bytes.size(), want.bytes.size());
  EXPECT_EQ(0, std::memcmp(got.bytes.data(), want.bytes.data(), want.bytes.size()));
}

TEST(NarrowMoves, TheLossGradientStoresNarrowFromNarrowScores) {
  // Autocast's logits: bf16 cast to f32, cast to f32 again by the model (.float()), the loss's
  // gradient narrowed for the head's product. The gradient then reads the bf16 logits and
  // stores bf16, and the forward loss reads them too (computing in f32): no f32 logits remain.
  auto g = parse(R"(graph @g {
    input %x : bf16[4, 6]
    input %labels : i64[4]
    input %seed : f32[]
    %w : ?[*] = Cast(%x) {to = "f32"}
    %w2 : ?[*] = Cast(%w) {to = "f32"}
    %loss : ?[*] = SoftmaxCrossEntropyLoss(%w2, %labels) {reduction = "mean"}
    %d : ?[*] = SceLossGrad(%w2, %labels, %seed) {reduction = "mean"}
    %y : ?[*] = Cast(%d) {to = "bf16"}
    output %loss
    output %y })", "loss");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x(DType::BF16, {4, 6}), labels(DType::I64, {4}), seed(DType::F32, {});
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, 2.5 - 0.37 * (double)i);
  for (int64_t i = 0; i < 4; ++i) labels.setF(i, (double)((i * 5) % 6));
  seed.setF(0, 1);
  std::map<std::string, Tensor> inputs{{"x", x}, {"labels", labels}, {"seed", seed}};
  auto before = run(**g, inputs);
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int narrowed = -1;
  ASSERT_FALSE(narrowMoves(**g, &narrowed));
  (*g)->removeDeadNodes();
  EXPECT_EQ(narrowed, 2); // the gradient's cast and the loss
  EXPECT_EQ(count(**g, Op::Cast), 0);
  int grads = 0;
  for (const auto& n : (*g)->nodes())
    if (n->op == Op::SceLossGrad) {
      ++grads;
      EXPECT_EQ(n->inputs[0]->type.dtype, DType::BF16);
      EXPECT_EQ(n->outputs[0]->type.dtype, DType::BF16);
    }
  EXPECT_EQ(grads, 1); // the f32 one is gone
  auto after = run(**g, inputs);
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  const Tensor &want = before->at("y"), &got = after->at((*g)->outputs.back()->name);
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_EQ(got.getF(i), want.getF(i)) << i;
  EXPECT_EQ(after->at((*g)->outputs[0]->name).getF(0), before->at("loss").getF(0));
}

TEST(NarrowMoves, TheCrossEntropyReadsNarrowScores) {
  // As a GPT exports it: logits.float() (an f32 cast of the widened product), reshaped to rows.
  auto g = parse("graph @g { input %x : bf16[2, 4, 5]\n input %t : i64[8]\n const %s : i64[2] = dense<\"0x08000000000000000500000000000000\">\n"
                 " %w : ?[*] = Cast(%x) {to = \"f32\"}\n %f : ?[*] = Cast(%w) {to = \"f32\"}\n %r : ?[*] = Reshape(%f, %s)\n"
                 " %l : ?[*] = SoftmaxCrossEntropyLoss(%r, %t)\n output %l }",
                 "sce");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x(DType::BF16, {2, 4, 5}), t(DType::I64, {8});
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, -3 + 0.29 * (double)i);
  for (int64_t i = 0; i < t.numel(); ++i) t.setI(i, (3 * i) % 5);
  auto before = run(**g, {{"x", x}, {"t", t}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int narrowed = -1;
  ASSERT_FALSE(narrowMoves(**g, &narrowed));
  (*g)->removeDeadNodes();
  EXPECT_EQ(narrowed, 1);
  EXPECT_EQ(count(**g, Op::Cast), 0); // the f32 copies are gone
  const Node* loss = (*g)->outputs[0]->producer;
  ASSERT_TRUE(loss && loss->op == Op::SoftmaxCrossEntropyLoss);
  EXPECT_EQ(loss->inputs[0]->type.dtype, DType::BF16);
  EXPECT_EQ((*g)->outputs[0]->type.dtype, DType::F32);
  auto after = run(**g, {{"x", x}, {"t", t}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  EXPECT_EQ(after->at((*g)->outputs[0]->name).getF(0), before->at("l").getF(0));
}

TEST(NarrowMoves, OptimizersReadNarrowGradients) {
  // AdamW's gradient is a bf16 product widened to f32 (a weight gradient under autocast): the
  // update reads the bf16 value, with the same new parameter and state.
  auto g = parse("graph @g { input %p : f32[3, 4]\n input %a : bf16[3, 2]\n input %b : bf16[2, 4]\n input %m : f32[3, 4]\n"
                 " input %v : f32[3, 4]\n input %lr : f32[]\n input %k : i64[]\n"
                 " %gb : ?[*] = MatMul(%a, %b)\n %g : ?[*] = Cast(%gb) {to = \"f32\"}\n"
                 " %p2 : ?[*], %m2 : ?[*], %v2 : ?[*] = AdamUpdate(%p, %g, %m, %v, %lr, %k) {decoupled = 1, weight_decay = 0.01}\n"
                 " output %p2, %m2, %v2 }",
                 "adam");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  std::map<std::string, Tensor> in;
  for (const Value* v : (*g)->inputs) {
    Tensor t(v->type.dtype, v->type.shape());
    for (int64_t i = 0; i < t.numel(); ++i)
      if (v->type.dtype == DType::I64) t.setI(i, 3);
      else t.setF(i, v->name == "lr" ? 1e-2 : v->name == "v" ? 0.01 * (double)(i + 1) : std::sin(1.7 * (double)i + (double)v->name[0]));
    in.emplace(v->name, std::move(t));
  }
  auto before = run(**g, in);
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  EXPECT_EQ(readNarrowGradients(**g), 1);
  (*g)->removeDeadNodes();
  EXPECT_EQ(count(**g, Op::Cast), 0);
  const Node* adam = (*g)->outputs[0]->producer;
  EXPECT_EQ(adam->inputs[1]->type.dtype, DType::BF16);
  auto after = run(**g, in);
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  for (const char* name : {"p2", "m2", "v2"})
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(after->at(name).getF(i), before->at(name).getF(i)) << name << " " << i;
}
