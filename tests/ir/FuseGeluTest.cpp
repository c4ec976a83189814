// The fuse-gelu pass: GELU written out as Div, Erf, Add and two Muls (as
// exporters emit it below opset 20) becomes one Gelu node, in the orders
// exporters and hand-written models use, with the same result on the
// interpreter (float64); look-alikes stay as they are.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/FuseGelu.h"
#include "ir/passes/InferShapes.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

const char* kConsts = " const %r2 : f64[] = dense<\"0xcd3b7f669ea0f63f\">\n const %one : f64[] = dense<\"0x000000000000f03f\">\n const %half : f64[] = dense<\"0x000000000000e03f\">\n const %ir2 : f64[] = dense<\"0xcc3b7f669ea0e63f\">\n const %two : f64[] = dense<\"0x0000000000000040\">\n";

struct Form {
  const char* name;
  const char* body; ///< computes %y from %x
  int fused;
};

/// Runs fuse-gelu on the graph `text` (input %x : f64[3, 7], output %y): `fused` GELUs of
/// `approximate` become Gelu nodes, no `written` node (Erf, Tanh) of theirs is left, and the
/// interpreter's result is the same.
void expectFused(const std::string& text, const char* name, int fused, const char* approximate, Op written) {
  auto g = parse(text, name);
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(inferShapes(**g, false));
  Tensor x(DType::F64, {3, 7});
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, -3 + 0.29 * (double)i);
  auto before = run(**g, {{"x", x}});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  int count = -1;
  ASSERT_FALSE(fuseGelu(**g, &count));
  EXPECT_EQ(count, fused);
  int gelus = 0, left = 0;
  for (const auto& n : (*g)->nodes()) {
    gelus += n->op == Op::Gelu && n->getString("approximate", "none") == approximate;
    left += n->op == written;
  }
  EXPECT_EQ(gelus, fused);
  EXPECT_EQ(left, 1 - fused); // the written-out form is gone
  auto after = run(**g, {{"x", x}});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  const Tensor &want = before->at("y"), &got = after->at((*g)->outputs[0]->name);
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.getF(i), want.getF(i), 1e-15) << i;
}

} // namespace

TEST(FuseGelu, FormsBecomeOneNodeWithTheSameResult) {
  for (const Form& f : {Form{"torch", " %d : ?[*] = Div(%x, %r2)\n %e : ?[*] = Erf(%d)\n %a : ?[*] = Add(%e, %one)\n"
                                      " %m : ?[*] = Mul(%x, %a)\n %y : ?[*] = Mul(%m, %half)\n", 1},
                        Form{"halfFirst", " %d : ?[*] = Mul(%x, %ir2)\n %e : ?[*] = Erf(%d)\n %a : ?[*] = Add(%one, %e)\n"
                                          " %h : ?[*] = Mul(%half, %x)\n %y : ?[*] = Mul(%h, %a)\n", 1},
                        Form{"notSqrt2", " %d : ?[*] = Div(%x, %two)\n %e : ?[*] = Erf(%d)\n %a : ?[*] = Add(%e, %one)\n"
                                         " %m : ?[*] = Mul(%x, %a)\n %y : ?[*] = Mul(%m, %half)\n", 0},
                        Form{"erfReadElsewhere", " %d : ?[*] = Div(%x, %r2)\n %e : ?[*] = Erf(%d)\n %a : ?[*] = Add(%e, %one)\n"
                                                 " %m : ?[*] = Mul(%x, %a)\n %y0 : ?[*] = Mul(%m, %half)\n %y : ?[*] = Add(%y0, %e)\n", 0}}) {
    SCOPED_TRACE(f.name);
    expectFused(std::string("graph @g { input %x : f64[3, 7]\n") + kConsts + f.body + " output %y }", f.name, f.fused, "none", Op::Erf);
  }
}

TEST(FuseGelu, TanhFormsBecomeOneTanhGelu) {
  const char* consts = " const %one : f64[] = dense<\"0x000000000000f03f\">\n const %half : f64[] = dense<\"0x000000000000e03f\">\n"
                       " const %beta : f64[] = dense<\"0x5136d4334588e93f\">\n const %kappa : f64[] = dense<\"0xf701486de2e4a63f\">\n"
                       " const %three : f64[] = dense<\"0x0000000000000840\">\n const %kappa2 : f64[] = dense<\"0x9a9999999999a93f\">\n";
  const char* tail = " %t : ?[*] = Tanh(%in)\n %a : ?[*] = Add(%one, %t)\n";
  for (const Form& f :
       {Form{"torch-1.13-export", " %sq : ?[*] = Mul(%x, %x)\n %cu : ?[*] = Mul(%x, %sq)\n %kc : ?[*] = Mul(%kappa, %cu)\n"
                                  " %s : ?[*] = Add(%x, %kc)\n %in : ?[*] = Mul(%beta, %s)\n", 1},
        Form{"pow", " %cu : ?[*] = Pow(%x, %three)\n %kc : ?[*] = Mul(%cu, %kappa)\n %s : ?[*] = Add(%kc, %x)\n"
                    " %in : ?[*] = Mul(%s, %beta)\n", 1},
        Form{"otherKappa", " %cu : ?[*] = Pow(%x, %three)\n %kc : ?[*] = Mul(%cu, %kappa2)\n %s : ?[*] = Add(%kc, %x)\n"
                           " %in : ?[*] = Mul(%s, %beta)\n", 0}}) {
    for (bool halfFirst : {false, true}) {
      SCOPED_TRACE(std::string(f.name) + (halfFirst ? ", (0.5 * x) * (1 + tanh)" : ", 0.5 * (x * (1 + tanh))"));
      std::string out = halfFirst ? " %h : ?[*] = Mul(%half, %x)\n %y : ?[*] = Mul(%h, %a)\n" : " %m : ?[*] = Mul(%x, %a)\n %y : ?[*] = Mul(%half, %m)\n";
      expectFused(std::string("graph @g { input %x : f64[3, 7]\n") + consts + f.body + tail + out + " output %y }", f.name, f.fused,
                  "tanh", Op::Tanh);
    }
  }
}
