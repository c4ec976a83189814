// The fuse-attention pass: attention written out as MatMul, scale, causal
// mask, Softmax and MatMul becomes one FusedAttention node whose result (on
// the interpreter, in float64) equals the decomposition's; patterns it must
// not touch (another mask, a score read elsewhere) stay as they are.
#include "ir/interp/Interpreter.h"
#include "ir/passes/ForwardCopies.h"
#include "ir/passes/FuseAttention.h"
#include "ir/passes/InferShapes.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace sgc;
using namespace sgc::ir;

namespace {

constexpr int64_t B = 2, H = 3, T = 4, D = 5, DV = 6;

enum class Mask { None, WhereVisible, WhereHidden, Additive, NotCausal };

struct Variant {
  const char* name;
  Mask mask;
  bool divide;         ///< scale by a Div (else a Mul)
  bool scoresEscape;   ///< the scaled scores are also a graph output
  int expectFused;
};

Tensor random(std::vector<int64_t> shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  Tensor t(DType::F64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, u(rng));
  return t;
}

/// A [1, 1, T, T] mask: element (i, j) = f(i, j).
template <typename F>
Tensor mask(DType t, F f) {
  Tensor m(t, {1, 1, T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) m.setF(i * T + j, f(i, j));
  return m;
}

/// The graph's first output, run again, equals `want` (the decomposition's result) within 1e-12.
void expectResult(Graph& g, const Tensor& want) {
  auto after = run(g, {});
  ASSERT_TRUE(!!after) << errorText(after.takeError());
  const Tensor& got = after->at(g.outputs[0]->name);
  ASSERT_EQ(got.shape, want.shape);
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.getF(i), want.getF(i), 1e-12) << i;
}

std::unique_ptr<Graph> build(const Variant& v) {
  auto g = std::make_unique<Graph>();
  Value* q = g->addParam("q", random({B, H, T, D}, 1));
  Value* k = g->addParam("k", random({B, H, T, D}, 2));
  Value* vals = g->addParam("v", random({B, H, T, DV}, 3));
  auto node = [&](Op op, std::vector<Value*> ins) { return g->addNode(op, std::move(ins), 1, "n" + std::to_string(g->nodes().size())); };
  Node* kT = node(Op::Transpose, {k});
  kT->attrs["perm"] = std::vector<int64_t>{0, 1, 3, 2};
  Value* s = node(Op::MatMul, {q, kT->outputs[0]})->outputs[0];
  Value* scaled = v.divide ? node(Op::Div, {s, g->addConst("c", Tensor::fromF64(DType::F64, {}, {std::sqrt((double)D)}))})->outputs[0]
                           : node(Op::Mul, {g->addConst("c", Tensor::fromF64(DType::F64, {}, {1 / std::sqrt((double)D)})), s})->outputs[0];
  Value* inf = g->addConst("inf", Tensor::fromF64(DType::F64, {}, {-INFINITY}));
  Value* masked = scaled;
  switch (v.mask) {
  case Mask::None: break;
  case Mask::WhereVisible:
    masked = node(Op::Where, {g->addConst("m", mask(DType::Bool, [](int64_t i, int64_t j) { return j <= i; })), scaled, inf})->outputs[0];
    break;
  case Mask::WhereHidden:
    masked = node(Op::Where, {g->addConst("m", mask(DType::Bool, [](int64_t i, int64_t j) { return j > i; })), inf, scaled})->outputs[0];
    break;
  case Mask::Additive:
    masked = node(Op::Add, {scaled, g->addConst("m", mask(DType::F64, [](int64_t i, int64_t j) { return j <= i ? 0.0 : -1e30; }))})->outputs[0];
    break;
  case Mask::NotCausal: // one key too many: not the causal triangle
    masked = node(Op::Where, {g->addConst("m", mask(DType::Bool, [](int64_t i, int64_t j) { return j <= i + 1; })), scaled, inf})->outputs[0];
    break;
  }
  Node* p = node(Op::Softmax, {masked});
  p->attrs["axis"] = int64_t(-1);
  g->outputs = {node(Op::MatMul, {p->outputs[0], vals})->outputs[0]};
  if (v.scoresEscape) g->outputs.push_back(scaled);
  EXPECT_FALSE(inferShapes(*g, false));
  return g;
}

class FuseAttention : public ::testing::TestWithParam<Variant> {};

TEST_P(FuseAttention, SameResultAsTheDecomposition) {
  const Variant& v = GetParam();
  auto g = build(v);
  auto before = run(*g, {});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  std::string y = g->outputs[0]->name;
  int fused = -1;
  ASSERT_FALSE(fuseAttention(*g, &fused));
  EXPECT_EQ(fused, v.expectFused);
  int softmaxes = 0, attentions = 0;
  for (const auto& n : g->nodes()) {
    softmaxes += n->op == Op::Softmax;
    attentions += n->op == Op::FusedAttention;
  }
  EXPECT_EQ(attentions, v.expectFused);
  EXPECT_EQ(softmaxes, 1 - v.expectFused); // the decomposition is gone (dead code removed)
  expectResult(*g, before->at(y));
}

INSTANTIATE_TEST_SUITE_P(Patterns, FuseAttention,
                         ::testing::Values(Variant{"NoMask", Mask::None, false, false, 1}, Variant{"WhereVisible", Mask::WhereVisible, true, false, 1},
                                           Variant{"WhereHidden", Mask::WhereHidden, false, false, 1},
                                           Variant{"Additive", Mask::Additive, true, false, 1},
                                           Variant{"NotCausal", Mask::NotCausal, false, false, 0},
                                           Variant{"ScoresReadElsewhere", Mask::WhereVisible, false, true, 0}),
                         [](const ::testing::TestParamInfo<Variant>& i) { return std::string(i.param.name); });

TEST(FuseAttentionNode, CausalAttributeAndKeysUntransposed) {
  auto g = build({"WhereHidden", Mask::WhereHidden, false, false, 1});
  ASSERT_FALSE(fuseAttention(*g));
  const Node* a = nullptr;
  for (const auto& n : g->nodes())
    if (n->op == Op::FusedAttention) a = n.get();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->getInt("causal", 0), 1);
  EXPECT_NEAR(a->getFloat("scale", 0), 1 / std::sqrt((double)D), 1e-15);
  // The keys' transpose undoes the model's: the node reads k itself, and no transpose is left.
  EXPECT_EQ(a->inputs[1]->name, "k");
  for (const auto& n : g->nodes()) EXPECT_NE(n->op, Op::Transpose);
  EXPECT_EQ(a->outputs[1]->type, Type::of(DType::F64, {B, H, T}));
}

} // namespace

// Grouped-query attention as Llama's and Qwen2's models write it (repeat_kv): each of 2 key and
// value heads repeated for 2 query heads, Reshape(Expand(Unsqueeze(k))). The fused node reads k
// and v themselves ([B, 2, T, D]), and its result is the decomposition's.
TEST(FuseAttentionNode, GroupedKeysAndValuesReadOncePerGroup) {
  auto g = std::make_unique<Graph>();
  Value* q = g->addParam("q", random({B, 4, T, D}, 1));
  Value* k = g->addParam("k", random({B, 2, T, D}, 2));
  Value* vals = g->addParam("v", random({B, 2, T, DV}, 3));
  auto node = [&](Op op, std::vector<Value*> ins) { return g->addNode(op, std::move(ins), 1, "n" + std::to_string(g->nodes().size())); };
  auto ints = [&](const char* name, std::vector<int64_t> v) {
    Tensor t(DType::I64, {(int64_t)v.size()});
    for (size_t i = 0; i < v.size(); ++i) t.setI((int64_t)i, v[i]);
    return g->addConst(name, t);
  };
  auto repeat = [&](Value* x, int64_t d, const char* tag) {
    Value* u = node(Op::Unsqueeze, {x, ints((std::string(tag) + "_axes").c_str(), {2})})->outputs[0];
    Value* e = node(Op::Expand, {u, ints((std::string(tag) + "_to").c_str(), {B, 2, 2, T, d})})->outputs[0];
    return node(Op::Reshape, {e, ints((std::string(tag) + "_shape").c_str(), {B, 4, T, d})})->outputs[0];
  };
  Node* kT = node(Op::Transpose, {repeat(k, D, "k")});
  kT->attrs["perm"] = std::vector<int64_t>{0, 1, 3, 2};
  Value* s = node(Op::MatMul, {q, kT->outputs[0]})->outputs[0];
  Value* scaled = node(Op::Mul, {g->addConst("c", Tensor::fromF64(DType::F64, {}, {0.4})), s})->outputs[0];
  Node* p = node(Op::Softmax, {scaled});
  p->attrs["axis"] = int64_t(-1);
  g->outputs = {node(Op::MatMul, {p->outputs[0], repeat(vals, DV, "v")})->outputs[0]};
  ASSERT_FALSE(inferShapes(*g, false));
  auto before = run(*g, {});
  ASSERT_TRUE(!!before) << errorText(before.takeError());
  std::string y = g->outputs[0]->name;
  int fused = 0;
  ASSERT_FALSE(fuseAttention(*g, &fused));
  ASSERT_EQ(fused, 1);
  const Node* a = g->outputs[0]->producer;
  ASSERT_TRUE(a && a->op == Op::FusedAttention);
  EXPECT_EQ(a->inputs[1]->name, "k");
  EXPECT_EQ(a->inputs[2]->name, "v");
  for (const auto& n : g->nodes()) EXPECT_NE(n->op, Op::Expand); // the repeats are gone
  expectResult(*g, before->at(y));
}

// scaled_dot_product_attention as both exporters decompose it for Hugging Face's Llama and Qwen2
// (torch 2.11): q and k^T each times sqrt(scale) (the scale a CastLike of a constant, then Sqrt,
// which infer-shapes folds), k^T as Reshape(Transpose(Reshape(k))) through [B H, T, D], the causal
// mask a [B, 1, T, T] constant of 0 and float's lowest added to the scores, the softmax guarded by
// Where(IsNaN(p), 0, p), and the grouped keys and values repeated with a copy (Identity) between
// the Expand and the Reshape, which forward-copies forwards (the training step runs it first). Fused, the node reads k and v themselves with the whole scale, and
// gives the decomposition's result; with one batch row's mask not causal, nothing is fused.
TEST(FuseAttentionNode, ScaledDotProductAttentionAsExported) {
  for (bool secondRowCausal : {true, false}) {
    SCOPED_TRACE(secondRowCausal ? "causal mask" : "the second row's mask not causal");
    auto g = std::make_unique<Graph>();
    Value* q = g->addParam("q", random({B, 4, T, D}, 1));
    Value* k = g->addParam("k", random({B, 2, T, D}, 2));
    Value* vals = g->addParam("v", random({B, 2, T, DV}, 3));
    auto node = [&](Op op, std::vector<Value*> ins) { return g->addNode(op, std::move(ins), 1, "n" + std::to_string(g->nodes().size())); };
    auto ints = [&](const std::string& name, std::vector<int64_t> v) {
      Tensor t(DType::I64, {(int64_t)v.size()});
      for (size_t i = 0; i < v.size(); ++i) t.setI((int64_t)i, v[i]);
      return g->addConst(name, t);
    };
    auto repeat = [&](Value* x, int64_t d, const std::string& tag) {
      Value* u = node(Op::Unsqueeze, {x, ints(tag + "_axes", {2})})->outputs[0];
      Value* e = node(Op::Expand, {u, ints(tag + "_to", {B, 2, 2, T, d})})->outputs[0];
      Value* copy = node(Op::Identity, {e})->outputs[0];
      return node(Op::Reshape, {copy, ints(tag + "_shape", {B, 4, T, d})})->outputs[0];
    };
    Value* flat = node(Op::Reshape, {repeat(k, D, "k"), ints("flat", {B * 4, T, D})})->outputs[0];
    Node* swap = node(Op::Transpose, {flat});
    swap->attrs["perm"] = std::vector<int64_t>{0, 2, 1};
    Value* kT = node(Op::Reshape, {swap->outputs[0], ints("kT", {B, 4, D, T})})->outputs[0];
    Value* scale = node(Op::CastLike, {g->addConst("scale", Tensor::fromF64(DType::F32, {}, {1 / std::sqrt((double)D)})), q})->outputs[0];
    Value* root = node(Op::Sqrt, {scale})->outputs[0];
    Value* s = node(Op::MatMul, {node(Op::Mul, {q, root})->outputs[0], node(Op::Mul, {kT, root})->outputs[0]})->outputs[0];
    Tensor m(DType::F64, {B, 1, T, T});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          m.setF((b * T + i) * T + j, j <= i || (b == 1 && !secondRowCausal && j == i + 1) ? 0.0 : -3.4028234663852886e38);
    Node* p = node(Op::Softmax, {node(Op::Add, {s, g->addConst("mask", m)})->outputs[0]});
    p->attrs["axis"] = int64_t(-1);
    Value* isNan = node(Op::IsNaN, {p->outputs[0]})->outputs[0];
    Value* guarded = node(Op::Where, {isNan, g->addConst("zero", Tensor::fromF64(DType::F64, {}, {0})), p->outputs[0]})->outputs[0];
    g->outputs = {node(Op::MatMul, {guarded, repeat(vals, DV, "v")})->outputs[0]};
    ASSERT_FALSE(inferShapes(*g)); // folds the scale
    auto before = run(*g, {});
    ASSERT_TRUE(!!before) << errorText(before.takeError());
    std::string y = g->outputs[0]->name;
    int forwarded = -1, fused = -1;
    ASSERT_FALSE(forwardCopies(*g, &forwarded));
    ASSERT_EQ(forwarded, 2);
    ASSERT_FALSE(fuseAttention(*g, &fused));
    ASSERT_EQ(fused, secondRowCausal ? 1 : 0);
    if (!secondRowCausal) continue;
    const Node* a = g->outputs[0]->producer;
    ASSERT_TRUE(a && a->op == Op::FusedAttention);
    EXPECT_EQ(a->inputs[0]->name, "q");
    EXPECT_EQ(a->inputs[1]->name, "k");
    EXPECT_EQ(a->inputs[2]->name, "v");
    EXPECT_EQ(a->getInt("causal", 0), 1);
    EXPECT_NEAR(a->getFloat("scale", 0), 1 / std::sqrt((double)D), 1e-7); // sqrt(scale) in f32, squared
    for (const auto& n : g->nodes())
      for (Op gone : {Op::Softmax, Op::IsNaN, Op::Where, Op::Expand, Op::Transpose, Op::Mul}) EXPECT_NE(n->op, gone) << n->name;
    expectResult(*g, before->at(y));
  }
}

// Multi-query attention as Falcon writes it: one key and value head [B, 1, T, D] that the two
// products broadcast over the query heads. Fused as the grouped node (one group of all H heads)
// reading k and v themselves, with the decomposition's result; with only the keys shared (values
// per head) nothing is fused.
TEST(FuseAttentionNode, MultiQueryKeysAndValuesBroadcast) {
  for (bool valuesShared : {true, false}) {
    SCOPED_TRACE(valuesShared ? "one key and value head" : "one key head, values per head");
    auto g = std::make_unique<Graph>();
    Value* q = g->addParam("q", random({B, H, T, D}, 1));
    Value* k = g->addParam("k", random({B, 1, T, D}, 2));
    Value* vals = g->addParam("v", random({B, valuesShared ? 1 : H, T, DV}, 3));
    auto node = [&](Op op, std::vector<Value*> ins) { return g->addNode(op, std::move(ins), 1, "n" + std::to_string(g->nodes().size())); };
    Node* kT = node(Op::Transpose, {k});
    kT->attrs["perm"] = std::vector<int64_t>{0, 1, 3, 2};
    Value* s = node(Op::MatMul, {q, kT->outputs[0]})->outputs[0];
    Value* scaled = node(Op::Mul, {s, g->addConst("c", Tensor::fromF64(DType::F64, {}, {0.4}))})->outputs[0];
    Value* masked = node(Op::Add, {scaled, g->addConst("m", mask(DType::F64, [](int64_t i, int64_t j) { return j <= i ? 0.0 : -1e30; }))})->outputs[0];
    Node* p = node(Op::Softmax, {masked});
    p->attrs["axis"] = int64_t(-1);
    g->outputs = {node(Op::MatMul, {p->outputs[0], vals})->outputs[0]};
    ASSERT_FALSE(inferShapes(*g, false));
    auto before = run(*g, {});
    ASSERT_TRUE(!!before) << errorText(before.takeError());
    std::string y = g->outputs[0]->name;
    int fused = -1;
    ASSERT_FALSE(fuseAttention(*g, &fused));
    ASSERT_EQ(fused, valuesShared ? 1 : 0);
    if (!valuesShared) continue;
    const Node* a = g->outputs[0]->producer;
    ASSERT_TRUE(a && a->op == Op::FusedAttention);
    EXPECT_EQ(a->inputs[1]->name, "k");
    EXPECT_EQ(a->inputs[2]->name, "v");
    EXPECT_EQ(a->getInt("causal", 0), 1);
    expectResult(*g, before->at(y));
  }
}
