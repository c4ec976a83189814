// Builds the whole training step as one graph: the forward pass, its
// backward pass (autodiff), optional clipping of gradients by their global
// norm, and the optimizer update of every trainable parameter, with PyTorch's
// semantics and defaults. After it the graph:
//   - takes the model inputs plus `sgc.lr` (f32 scalar, the learning rate,
//     fed at run time so schedules need no recompile);
//   - outputs the loss;
//   - keeps the step counter `sgc.step` and the optimizer's moments as state
//     (saved and restored with the parameters), and lists as updates the new
//     value of every parameter, state tensor and BatchNormalization running
//     statistic.
// Trainable parameters: every floating-point initializer not matched by the
// freeze regex, not a running statistic, and that the loss depends on.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/passes/ChunkClassifier.h"

#include <string>

namespace sgc::ir {

constexpr const char* kLrInput = "sgc.lr";
constexpr const char* kStepState = "sgc.step";

struct OptimizerOptions {
  std::string kind = "sgd"; ///< sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  double weightDecay = -1; ///< -1: the optimizer's default (0; AdamW 0.01)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clipGradNorm = 0; ///< 0: no clipping
};

struct TrainingOptions {
  std::string loss;   ///< output name; empty: the single scalar output
  std::string freeze; ///< ECMAScript regex over parameter names; empty: none
  std::string precision = "f32"; ///< f32, or bf16: products and convolutions in bf16 (autocast)
  std::string attention = "decomposed"; ///< as the model writes it, or fused (FuseAttention, AttentionLayout)
  std::string dataParallel = "none"; ///< none; allreduce: gradients all-reduced in buckets; zero1: also the optimizer state sharded
  int64_t ranks = 0;                  ///< zero1: the number of ranks the state is sharded over
  double bucketMb = 25;              ///< bucket size of the all-reduce
  int64_t classifierChunkBytes = kClassifierChunkBytes; ///< a classifier's scores run in row chunks of at most this (0: whole)
  OptimizerOptions optimizer;
};

/// Rewrites `g` (an imported, shape-inferred model) into its training step.
/// Errors say what was expected (the loss, something to train, the options).
Error buildTrainingStep(Graph& g, const TrainingOptions& opts);

/// Checks option values (optimizer name, ranges); used before any work.
Error checkTrainingOptions(const TrainingOptions& opts);

} // namespace sgc::ir
