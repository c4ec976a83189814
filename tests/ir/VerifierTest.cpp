// The verifier rejects graphs that break SSA, order, arity or data rules.
#include "ir/Text.h"
#include "ir/Verifier.h"

#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {
std::string verifyError(Graph& g) { return errorText(verify(g)); }
} // namespace

TEST(Verifier, AcceptsWellFormedGraph) {
  Graph g;
  Value* x = g.addInput("x", Type::of(DType::F32, {2}));
  Node* n = g.addNode(Op::Relu, {x}, 1, "r");
  g.outputs = {n->outputs[0]};
  EXPECT_EQ(verifyError(g), "");
}

TEST(Verifier, UseBeforeDefinition) {
  Graph g;
  Value* x = g.addInput("x", Type::of(DType::F32, {2}));
  Node* a = g.addNode(Op::Relu, {x}, 1, "a");
  Node* b = g.addNode(Op::Neg, {x}, 1, "b");
  a->inputs[0] = b->outputs[0]; // a now uses a value defined after it
  g.outputs = {a->outputs[0]};
  EXPECT_NE(verifyError(g).find("node 'a' (Relu): input %b is not defined before it is used"), std::string::npos);
}

TEST(Verifier, Arity) {
  Graph g;
  Value* x = g.addInput("x", Type::of(DType::F32, {2}));
  Node* n = g.addNode(Op::Add, {x}, 1, "add");
  g.outputs = {n->outputs[0]};
  EXPECT_NE(verifyError(g).find("node 'add' (Add): 1 inputs, expected 2 to 2"), std::string::npos);
  n->inputs = {x, nullptr};
  EXPECT_NE(verifyError(g).find("required input 1 is absent"), std::string::npos);
}

TEST(Verifier, DataMustMatchType) {
  Graph g;
  Value* c = g.addConst("c", Tensor::fromF64(DType::F32, {2}, {1, 2}));
  g.outputs = {c};
  auto bad = std::make_shared<Tensor>(*c->data);
  bad->bytes.pop_back();
  c->data = bad;
  EXPECT_NE(verifyError(g).find("constant %c: data size does not match f32[2]"), std::string::npos);
}

TEST(Verifier, IntegerParameterRefused) {
  Graph g;
  Value* p = g.addParam("p", Tensor::fromI64(DType::I64, {1}, {3}));
  g.outputs = {p};
  EXPECT_NE(verifyError(g).find("expected a floating-point type"), std::string::npos);
}

TEST(Verifier, UndefinedOutput) {
  Graph g;
  Graph other;
  Value* y = other.addInput("y", Type::of(DType::F32, {1}));
  g.outputs = {y};
  EXPECT_NE(verifyError(g).find("graph output %y is not defined"), std::string::npos);
}

TEST(Verifier, RequireTypes) {
  auto g = parse("graph @g { input %x : f32[2]\n %y : ?[*] = Relu(%x)\n output %y }", "t");
  ASSERT_TRUE(!!g);
  EXPECT_EQ(verifyError(**g), "");
  EXPECT_NE(errorText(verify(**g, true)).find("value %y has no inferred type"), std::string::npos);
}
