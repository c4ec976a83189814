// The IR text form: printing then parsing gives an equal graph, for a
// hand-built graph that uses every attribute kind, symbolic and unknown dims,
// absent inputs and unused results, and for the bundled sample model.
#include "frontend/onnx/Importer.h"
#include "ir/Text.h"
#include "ir/Verifier.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> buildGraph() {
  auto g = std::make_unique<Graph>();
  g->name = "every.kind";
  Value* x = g->addInput("x", Type::ranked_(DType::F32, {Dim::sym("N"), Dim::of(4)}));
  Value* m = g->addInput("odd name/with:chars\"q", Type::unranked(DType::Bool));
  Value* w = g->addParam("w", Tensor::fromF64(DType::F32, {4, 2}, {1, 2, 3, 4, 5, 6, 7, -0.5}));
  Value* axes = g->addConst("axes", Tensor::fromI64(DType::I64, {1}, {1}));
  Node* mm = g->addNode(Op::MatMul, {x, w}, 1, "mm");
  mm->outputs[0]->type = Type::ranked_(DType::F32, {Dim::sym("N"), Dim::unknown()});
  Node* d = g->addNode(Op::Dropout, {mm->outputs[0], nullptr, nullptr}, 2, "drop");
  d->attrs = {{"seed", int64_t(-7)}, {"f", 1e-5}, {"s", std::string("a\"b\\c\n")}, {"ints", std::vector<int64_t>{1, -2}},
              {"floats", std::vector<double>{0.25, -1e30}}, {"empty_floats", std::vector<double>{}},
              {"t", Tensor::fromF64(DType::BF16, {2}, {1.5, -2})}, {"inf", -INFINITY}};
  Node* r = g->addNode(Op::ReduceSum, {d->outputs[0], axes}, 1, "");
  d->outputs[1] = nullptr; // unused result
  g->outputs = {r->outputs[0], m};
  return g;
}

} // namespace

TEST(Text, RoundTripEveryKind) {
  auto g = buildGraph();
  ASSERT_FALSE(errorText(verify(*g)).size()) << "the hand-built graph must verify";
  std::string text = print(*g);
  auto back = parse(text, "roundtrip");
  ASSERT_TRUE(!!back) << errorText(back.takeError());
  std::string why;
  EXPECT_TRUE(equal(*g, **back, &why)) << why << "\n" << text;
  EXPECT_EQ(print(**back), text);
}

TEST(Text, RoundTripSampleModel) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp.onnx");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  std::string text = print(**g);
  auto back = parse(text, "mlp");
  ASSERT_TRUE(!!back) << errorText(back.takeError());
  std::string why;
  EXPECT_TRUE(equal(**g, **back, &why)) << why;
}

TEST(Text, ElidedDataNeedsPermission) {
  auto g = buildGraph();
  PrintOptions po;
  po.elideDataAbove = 8;
  std::string text = print(*g, po);
  EXPECT_NE(text.find("dense<elided>"), std::string::npos);
  auto strict = parse(text, "elided");
  ASSERT_FALSE(!!strict);
  EXPECT_NE(errorText(strict.takeError()).find("elided"), std::string::npos);
  auto lenient = parse(text, "elided", {true});
  EXPECT_TRUE(!!lenient) << errorText(lenient.takeError());
}

TEST(Text, ErrorsNameFileLineAndColumn) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"graph @g { input %x : f32[2] %y : f32[2] = Nope(%x) }", "f.sgcir:1:44: expected a known op name"},
      {"graph @g {\n  %y : f32[2] = Relu(%x)\n}", "f.sgcir:2:22: expected a value defined earlier"},
      {"graph @g { input %x : f32[2] input %x : f32[2] }", "expected a name not defined before"},
      {"graph @g { const %c : f32[2] = dense<\"0x00\"> }", "expected 8 bytes of data"},
      {"graph @g { input %x : q7[2] }", "expected a dtype"},
      {"graph @g { input %x : f32[-1] }", "expected a non-negative dim"},
      {"graph @g { input %x : f32[2] ", "expected '}' closing the graph"},
      {"graph @g { input %x : f32[2] } trailing", "expected the end of the text"},
      {"graph @g { %y : f32[2] = Relu(_) {a = 99999999999999999999999} }", "expected a valid number"},
      {"graph @g { input %x : f32[\"", "expected a closing"},
  };
  for (const auto& c : cases) {
    auto g = parse(c.text, "f.sgcir");
    ASSERT_FALSE(!!g) << c.text;
    std::string msg = errorText(g.takeError());
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "message: " << msg << "\nexpected to contain: " << c.expect;
  }
}
