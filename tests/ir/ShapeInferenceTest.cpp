// infer-shapes: symbolic dims flow through broadcasting and matmul, shape
// computations over static shapes fold to constants, and rule violations
// are errors naming the node.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {
std::unique_ptr<Graph> parsed(const char* text) {
  auto g = parse(text, "test.sgcir");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  return g ? std::move(*g) : nullptr;
}
std::string typeOf(const Graph& g, const char* name) { return toString(g.findValue(name)->type); }
} // namespace

TEST(InferShapes, SymbolicDimsFlow) {
  auto g = parsed(R"(graph @g {
    input %x : f32[N, 4]
    input %b : f32[1, 3]
    param %w : f32[4, 3] = dense<"0x000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000">
    %h : ?[*] = MatMul(%x, %w)
    %y : ?[*] = Add(%h, %b)
    %t : ?[*] = Transpose(%y)
    %s : ?[*] = ReduceSum(%t)
    output %s
  })");
  ASSERT_TRUE(g);
  ASSERT_FALSE(inferShapes(*g));
  EXPECT_EQ(typeOf(*g, "h"), "f32[N, 3]");
  EXPECT_EQ(typeOf(*g, "y"), "f32[N, 3]");
  EXPECT_EQ(typeOf(*g, "t"), "f32[3, N]");
  EXPECT_EQ(typeOf(*g, "s"), "f32[1, 1]");
}

TEST(InferShapes, ShapeSubgraphFoldsWhenStatic) {
  // Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): the pattern exporters emit for flatten.
  const char* text = R"(graph @g {
    input %x : f32[2, 3, 4]
    const %zero : i64[] = dense<"0x0000000000000000">
    const %ax : i64[1] = dense<"0x0000000000000000">
    const %minus1 : i64[1] = dense<"0xffffffffffffffff">
    %s : ?[*] = Shape(%x)
    %n : ?[*] = Gather(%s, %zero) {axis = 0}
    %n1 : ?[*] = Unsqueeze(%n, %ax)
    %shape : ?[*] = Concat(%n1, %minus1) {axis = 0}
    %y : ?[*] = Reshape(%x, %shape)
    output %y
  })";
  auto g = parsed(text);
  ASSERT_TRUE(g);
  ASSERT_FALSE(inferShapes(*g));
  EXPECT_EQ(typeOf(*g, "y"), "f32[2, 12]");
  ASSERT_EQ(g->nodes().size(), 1u) << print(*g);
  EXPECT_EQ(g->nodes()[0]->op, Op::Reshape);
  EXPECT_EQ(g->findValue("shape")->kind, ValueKind::Const);
  EXPECT_EQ(g->findValue("shape")->data->toI64(), (std::vector<int64_t>{2, -1}));
  // Folding keeps the numbers: run both graphs on the same input.
  auto unfolded = parsed(text);
  Tensor x = Tensor::fromF64(DType::F32, {2, 3, 4}, std::vector<double>(24, 1.5));
  auto a = run(*g, {{"x", x}}), b = run(*unfolded, {{"x", x}});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->at("y"), b->at("y"));
}

TEST(InferShapes, ShapeSubgraphStaysWhenSymbolic) {
  auto g = parsed(R"(graph @g {
    input %x : f32[N, 3, 4]
    const %zero : i64[] = dense<"0x0000000000000000">
    %s : ?[*] = Shape(%x)
    %n : ?[*] = Gather(%s, %zero) {axis = 0}
    output %n
  })");
  ASSERT_TRUE(g);
  ASSERT_FALSE(inferShapes(*g));
  EXPECT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(typeOf(*g, "s"), "i64[3]");
  EXPECT_EQ(typeOf(*g, "n"), "i64[]");
}

TEST(InferShapes, ErrorsNameTheNode) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"graph @g { input %a : f32[2, 3]\n input %b : f32[4, 5]\n %c : ?[*] = MatMul(%a, %b) loc(\"mm\")\n output %c }",
       "node 'mm' (MatMul): inner dims differ"},
      {"graph @g { input %a : f32[2, 3]\n input %b : f32[4]\n %c : ?[*] = Add(%a, %b) loc(\"add\")\n output %c }",
       "node 'add' (Add): cannot broadcast dims 3 and 4"},
      {"graph @g { input %a : f32[2, 3]\n input %b : i64[3]\n %c : ?[*] = Add(%a, %b) loc(\"add\")\n output %c }",
       "node 'add' (Add): input 1 is i64, expected f32 like input 0"},
      {"graph @g { input %a : f32[2, 3]\n %c : ?[*] = Softmax(%a) {axis = 2} loc(\"s\")\n %d : ?[*] = ArgMax(%a) {axis = 5} loc(\"am\")\n output %d }",
       "node 'am' (ArgMax): axis 5 is out of range for rank 2"},
      {"graph @g { input %a : f32[2, 3]\n const %s : i64[1] = dense<\"0x0500000000000000\">\n %c : ?[*] = Reshape(%a, %s) loc(\"r\")\n output %c }",
       "node 'r' (Reshape): cannot reshape f32[2, 3] to f32[5]"},
      // The attention gradient's scratch (codegen/AttentionScratch.h) keeps the type given it, bf16 [n].
      {"graph @g { input %q : bf16[1, 2, 64, 128]\n input %y : bf16[1, 2, 64, 128]\n input %l : f32[1, 2, 64]\n"
       " %dq : ?[*], %dk : ?[*], %dv : ?[*], %d : ?[*], %s : f32[4096] = FusedAttentionGrad(%q, %q, %q, %y, %l, %y) loc(\"ag\")\n output %dq }",
       "node 'ag' (FusedAttentionGrad): the scratch result (the fifth) must be bf16 [n] with n static"},
  };
  for (const auto& c : cases) {
    auto g = parsed(c.text);
    ASSERT_TRUE(g);
    std::string msg = errorText(inferShapes(*g));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "message: " << msg << "\nexpected: " << c.expect;
  }
}

TEST(InferShapes, AttentionScratchKeepsItsType) {
  auto g = parsed("graph @g { input %q : bf16[1, 2, 64, 128]\n input %y : bf16[1, 2, 64, 128]\n input %l : f32[1, 2, 64]\n"
                  " %dq : ?[*], %dk : ?[*], %dv : ?[*], %d : ?[*], %s : bf16[8192] = FusedAttentionGrad(%q, %q, %q, %y, %l, %y) {causal = 1}\n"
                  " output %dq }");
  ASSERT_TRUE(g);
  ASSERT_FALSE(inferShapes(*g));
  EXPECT_EQ(typeOf(*g, "s"), "bf16[8192]");
  EXPECT_EQ(typeOf(*g, "dq"), "bf16[1, 2, 64, 128]");
}

TEST(Interpreter, RejectsWrongInputs) {
  auto g = parsed("graph @g { input %x : f32[N, 2]\n input %y : f32[N]\n %z : ?[*] = Relu(%x)\n output %z }");
  ASSERT_TRUE(g);
  ASSERT_FALSE(inferShapes(*g));
  Tensor good = Tensor::fromF64(DType::F32, {3, 2}, std::vector<double>(6, 1));
  auto msg = [&](std::map<std::string, Tensor> in) {
    auto r = run(*g, in);
    return r ? std::string() : errorText(r.takeError());
  };
  EXPECT_NE(msg({{"x", good}}).find("missing input 'y'"), std::string::npos);
  EXPECT_NE(msg({{"x", Tensor::fromF64(DType::F64, {3, 2}, std::vector<double>(6, 1))}, {"y", Tensor(DType::F32, {3})}})
                .find("input 'x' is f64, expected f32"),
            std::string::npos);
  EXPECT_NE(msg({{"x", good}, {"y", Tensor(DType::F32, {4})}}).find("input 'y' has shape f32[4], expected f32[N] with N = 3"),
            std::string::npos);
  EXPECT_NE(msg({{"x", good}, {"y", Tensor(DType::F32, {3})}, {"w", good}}).find("'w' is not an input"), std::string::npos);
  EXPECT_EQ(msg({{"x", good}, {"y", Tensor(DType::F32, {3})}}), "");
}
