// The pass registry: flags to functions, from Passes.def.
#include "ir/passes/Passes.h"

#include "ir/Verifier.h"
#include "ir/passes/AttentionLayout.h"
#include "ir/passes/PackAttention.h"
#include "ir/passes/ChunkClassifier.h"
#include "ir/passes/FuseLossGrad.h"
#include "ir/passes/ExpandResize.h"
#include "ir/passes/FoldTransposes.h"
#include "ir/passes/ForwardCopies.h"
#include "ir/passes/FuseAttention.h"
#include "ir/passes/FuseGelu.h"
#include "ir/passes/FuseRmsNorm.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/MergeConstants.h"
#include "ir/passes/NarrowMoves.h"
#include "ir/passes/SplitToSlices.h"
#include "ir/passes/WidenSums.h"
#include "ir/passes/ShadowWeights.h"
#include "ir/training/TrainingStep.h"

namespace sgc::ir {
namespace {

Error runInferShapes(Graph& g) { return inferShapes(g); }

Error runDeadCodeElimination(Graph& g) {
  g.removeDeadNodes();
  return Error::success();
}

Error runMergeConstants(Graph& g) { return mergeConstants(g); }
Error runForwardCopies(Graph& g) { return forwardCopies(g); }
Error runFuseAttention(Graph& g) { return fuseAttention(g); }
Error runAttentionLayout(Graph& g) { return attentionLayout(g); }
Error runPackAttention(Graph& g) { return packAttention(g); }
Error runFuseLossGrad(Graph& g) { return fuseLossGrad(g); }
Error runChunkClassifier(Graph& g) { return chunkClassifier(g, kClassifierChunkBytes); }
Error runFuseGelu(Graph& g) { return fuseGelu(g); }
Error runFuseRmsNorm(Graph& g) { return fuseRmsNorm(g); }
Error runWidenSums(Graph& g) { return widenSums(g); }
Error runShadowWeights(Graph& g) { return shadowWeights(g); }
Error runNarrowMoves(Graph& g) { return narrowMoves(g); }
Error runFoldTransposes(Graph& g) { return foldTransposes(g); }
Error runExpandResize(Graph& g) { return expandResize(g); }
Error runSplitToSlices(Graph& g) { return splitToSlices(g); }

/// The training step with default options (SGD; the single scalar output is the loss).
Error runTrainingStep(Graph& g) { return buildTrainingStep(g, TrainingOptions{}); }

struct PassEntry {
  const char* name;
  Error (*fn)(Graph&);
};
constexpr PassEntry kPasses[] = {
#define PASS(Name, Fn) {Name, Fn},
#include "ir/passes/Passes.def"
};

} // namespace

std::vector<std::string> passNames() {
  std::vector<std::string> r;
  for (const auto& p : kPasses) r.push_back(p.name);
  return r;
}

Error runPasses(Graph& g, const std::vector<std::string>& names, bool verifyEach) {
  for (const std::string& n : names) {
    const PassEntry* p = nullptr;
    for (const auto& e : kPasses)
      if (n == e.name) p = &e;
    if (!p) return makeError("unknown pass '" + n + "'");
    if (Error e = p->fn(g)) return makeError("pass " + n + ": " + errorText(std::move(e)));
    if (verifyEach)
      if (Error e = verify(g)) return makeError("after pass " + n + ": " + errorText(std::move(e)));
  }
  return Error::success();
}

} // namespace sgc::ir
