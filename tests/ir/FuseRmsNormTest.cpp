// The fuse-rms-norm pass: RMS normalization written out as Pow (or x * x),
// ReduceMean, Add, Sqrt, Reciprocal (or Div) and two Muls, as Hugging Face's
// exporters (legacy and dynamo) and the ONNX importer's RMSNormalization write
// it, becomes one RmsNorm node with the same result on the interpreter
// (float64); look-alikes stay as they are.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/FuseRmsNorm.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

const char* kConsts = " const %two : f64[] = dense<\"0x0000000000000040\">\n const %one : f64[] = dense<\"0x000000000000f03f\">\n"
                      " const %eps : f64[] = dense<\"0xfca9f1d24d62503f\">\n const %last : i64[1] = dense<\"0xffffffffffffffff\">\n"
                      " const %first : i64[1] = dense<\"0x0000000000000000\">\n";

struct Form {
  const char* name;
  const char* body; ///< computes %y from %x [3, 7] and %w [7] (or %w2 [3, 7])
  int fused;
};

void expectFused(const Form& f) {
  std::string text = std::string("graph @g { input %x : f64[3, 7]\n input %w : f64[7]\n input %w2 : f64[3, 7]\n") + kConsts + f.body + " output %y }";
  auto g = parse(text, f.name);
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x(DType::F64, {3, 7}), w(DType::F64, {7}), w2(DType::F64, {3, 7});
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, -3 + 0.29 * (double)i), w2.setF(i, 0.1 * (double)i);
  for (int64_t i = 0; i < w.numel(); ++i) w.setF(i, 0.5 + 0.25 * (double)i);
  std::map<std::string, Tensor> feeds{{"x", x}, {"w", w}, {"w2", w2}};
  auto before = run(**g, feeds);
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int count = -1;
  ASSERT_FALSE(fuseRmsNorm(**g, &count));
  EXPECT_EQ(count, f.fused);
  int norms = 0, means = 0;
  for (const auto& n : (*g)->nodes()) {
    norms += n->op == Op::RmsNorm;
    means += n->op == Op::ReduceMean;
  }
  EXPECT_EQ(norms, f.fused);
  EXPECT_EQ(means, 1 - f.fused); // the written-out form is gone
  auto after = run(**g, feeds);
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  const Tensor &want = before->at("y"), &got = after->at((*g)->outputs[0]->name);
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.getF(i), want.getF(i), 1e-14) << i;
}

} // namespace

TEST(FuseRmsNorm, FormsBecomeOneNodeWithTheSameResult) {
  const char* square = " %sq : ?[*] = Pow(%x, %two)\n %m : ?[*] = ReduceMean(%sq, %last) {keepdims = 1}\n %a : ?[*] = Add(%m, %eps)\n"
                       " %s : ?[*] = Sqrt(%a)\n";
  for (const Form& f :
       {Form{"dynamo", " %r : ?[*] = Reciprocal(%s)\n %n : ?[*] = Mul(%x, %r)\n %y : ?[*] = Mul(%w, %n)\n", 1},
        Form{"legacy", " %r : ?[*] = Div(%one, %s)\n %n : ?[*] = Mul(%x, %r)\n %c : ?[*] = Cast(%n) {to = \"f64\"}\n %y : ?[*] = Mul(%w, %c)\n", 1},
        Form{"divided", " %n : ?[*] = Div(%x, %s)\n %y : ?[*] = Mul(%n, %w)\n", 1},
        Form{"scaleOfTheWrongShape", " %n : ?[*] = Div(%x, %s)\n %y : ?[*] = Mul(%n, %w2)\n", 0},
        Form{"notOne", " %r : ?[*] = Div(%two, %s)\n %n : ?[*] = Mul(%x, %r)\n %y : ?[*] = Mul(%w, %n)\n", 0},
        Form{"rmsReadElsewhere", " %n : ?[*] = Div(%x, %s)\n %y0 : ?[*] = Mul(%n, %w)\n %y : ?[*] = Add(%y0, %s)\n", 0}}) {
    SCOPED_TRACE(f.name);
    expectFused({f.name, (std::string(square) + f.body).c_str(), f.fused});
  }
}

TEST(FuseRmsNorm, TheImportersSquareAndOnlyTheLastAxis) {
  expectFused({"importer", " %sq : ?[*] = Mul(%x, %x)\n %m : ?[*] = ReduceMean(%sq, %last) {keepdims = 1}\n %a : ?[*] = Add(%eps, %m)\n"
                           " %s : ?[*] = Sqrt(%a)\n %n : ?[*] = Div(%x, %s)\n %y : ?[*] = Mul(%n, %w)\n", 1});
  expectFused({"firstAxis", " %sq : ?[*] = Mul(%x, %x)\n %m : ?[*] = ReduceMean(%sq, %first) {keepdims = 1}\n %a : ?[*] = Add(%eps, %m)\n"
                            " %s : ?[*] = Sqrt(%a)\n %n : ?[*] = Div(%x, %s)\n %y : ?[*] = Mul(%n, %w)\n", 0});
}
