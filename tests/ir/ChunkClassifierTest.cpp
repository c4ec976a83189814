// The chunk-classifier pass: a language model's head, its loss and their
// gradients run in row chunks. The step built with chunks gives the loss and
// the updated parameters of the step built without them (f32: up to the order
// of the sums; bf16: up to the weight gradient's partials rounded to bf16),
// and no value holds the whole scores.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"
#include "tests/ir/RandomInputs.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace sgc;
using namespace sgc::ir;

namespace {

constexpr int64_t kBatch = 2, kSeq = 5, kVocab = 7, kWidth = 4, kRows = kBatch * kSeq;

/// A tied-embedding LM: tokens, a tanh layer, the head (the embedding transposed), the loss
/// over [rows, vocab] scores. `extra`: one more line before the loss.
std::unique_ptr<Graph> lmStep(const TrainingOptions& opts, const std::string& reduction, int* chunked, const std::string& extra = "",
                              const std::string& lossOf = "%s") {
  std::mt19937 rng(3);
  std::string text = "graph @lm {\n input %idx : i64[2, 5]\n input %tgt : i64[2, 5]\n";
  text += " param %wte : f32[7, 4] = " + denseNormal(kVocab * kWidth, rng) + "\n";
  text += " param %w1 : f32[4, 4] = " + denseNormal(kWidth * kWidth, rng) + "\n";
  text += " const %shape : i64[2] = dense<\"0xffffffffffffffff0700000000000000\">\n";
  text += " const %flat : i64[1] = dense<\"0xffffffffffffffff\">\n";
  text += R"( %x : ?[*] = Gather(%wte, %idx) {axis = 0}
 %h0 : ?[*] = MatMul(%x, %w1)
 %h : ?[*] = Tanh(%h0)
 %wt : ?[*] = Transpose(%wte) {perm = [1, 0]}
 %logits : ?[*] = MatMul(%h, %wt)
 %s : ?[*] = Reshape(%logits, %shape)
 %t : ?[*] = Reshape(%tgt, %flat)
)" + extra + " %loss : ?[*] = SoftmaxCrossEntropyLoss(" + lossOf + ", %t) {ignore_index = -100, reduction = \"" + reduction +
          "\"}\n output %loss\n}";
  auto g = parse(text, "lm");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  Error e = buildTrainingStep(**g, opts);
  EXPECT_FALSE(!!e) << errorText(std::move(e));
  *chunked = 0;
  for (const auto& n : (*g)->nodes()) *chunked += n->op == Op::SceLossGrad;
  return std::move(*g);
}

std::map<std::string, Tensor> stepInputs() {
  std::map<std::string, Tensor> in;
  in["idx"] = Tensor::fromI64(DType::I64, {kBatch, kSeq}, {1, 6, 0, 3, 3, 5, 2, 4, 6, 1});
  in["tgt"] = Tensor::fromI64(DType::I64, {kBatch, kSeq}, {6, 0, -100, 3, 5, 2, -100, 4, 1, 1}); // two ignored
  in["sgc.lr"] = Tensor::fromF64(DType::F32, {}, {0.5});
  return in;
}

/// The loss and each parameter after one step.
std::map<std::string, Tensor> oneStep(Graph& g) {
  auto out = runStep(g, stepInputs());
  EXPECT_TRUE(!!out) << errorText(out.takeError());
  std::map<std::string, Tensor> r{{"loss", out->at("loss")}};
  for (Value* p : g.params) r[p->name] = *p->data;
  return r;
}

/// Whether some value holds as many elements as the whole scores.
bool holdsWholeScores(const Graph& g) {
  for (const auto& n : g.nodes())
    for (const Value* v : n->outputs)
      if (v && v->type.staticNumel() == kRows * kVocab) return true;
  return false;
}

TrainingOptions options(int64_t chunkBytes) {
  TrainingOptions o;
  o.classifierChunkBytes = chunkBytes;
  return o;
}

} // namespace

TEST(ChunkClassifier, ChunksGiveTheWholeStep) {
  for (const char* reduction : {"mean", "sum"}) {
    int whole = 0, chunks = 0;
    auto plain = lmStep(options(0), reduction, &whole);
    // 3 rows of 7 f32 scores a chunk: 10 rows in 4 chunks, the last of one row.
    auto chunked = lmStep(options(3 * kVocab * 4), reduction, &chunks);
    EXPECT_EQ(whole, 1);
    EXPECT_EQ(chunks, 4) << reduction;
    EXPECT_TRUE(holdsWholeScores(*plain));
    EXPECT_FALSE(holdsWholeScores(*chunked)) << reduction;
    auto want = oneStep(*plain), got = oneStep(*chunked);
    ASSERT_EQ(got.size(), want.size());
    for (auto& [name, w] : want) {
      const Tensor& t = got.at(name);
      ASSERT_EQ(t.shape, w.shape) << name;
      for (int64_t i = 0; i < w.numel(); ++i) EXPECT_NEAR(t.getF(i), w.getF(i), 2e-6 * (1 + std::abs(w.getF(i)))) << reduction << " " << name << "[" << i << "]";
    }
    // The step moved every parameter: the comparison saw both weights' gradients.
    int unused = 0;
    auto initial = lmStep(options(0), reduction, &unused);
    for (const Value* p : initial->params) {
      double moved = 0;
      for (int64_t i = 0; i < p->data->numel(); ++i) moved = std::max(moved, std::abs(p->data->getF(i) - want.at(p->name).getF(i)));
      EXPECT_GT(moved, 1e-3) << reduction << " " << p->name;
    }
  }
}

TEST(ChunkClassifier, Bf16ChunksGiveTheWholeStep) {
  TrainingOptions o = options(0);
  o.precision = "bf16";
  int whole = 0, chunks = 0;
  auto plain = lmStep(o, "mean", &whole);
  o.classifierChunkBytes = 4 * kVocab * 2; // bf16 scores, 4 rows a chunk: 3 chunks
  auto chunked = lmStep(o, "mean", &chunks);
  EXPECT_EQ(chunks, 3);
  auto want = oneStep(*plain), got = oneStep(*chunked);
  EXPECT_NEAR(got.at("loss").getF(0), want.at("loss").getF(0), 1e-6);
  // SGD: p - lr g, so the parameters differ by lr times the gradients' difference, which the
  // per-chunk bf16 rounding of the weight gradient bounds.
  for (const char* p : {"wte", "w1"})
    for (int64_t i = 0; i < want.at(p).numel(); ++i) EXPECT_NEAR(got.at(p).getF(i), want.at(p).getF(i), 0.5 * 2e-2) << p << "[" << i << "]";
}

TEST(ChunkClassifier, LeavesScoresThatAreNotAProduct) {
  // Scores computed from the head's product (a soft cap, say): they are left whole.
  int chunks = 0;
  auto g = lmStep(options(3 * kVocab * 4), "mean", &chunks, " %s2 : ?[*] = Mul(%s, %s)\n", "%s2");
  EXPECT_TRUE(holdsWholeScores(*g));
  EXPECT_EQ(chunks, 1);
}
