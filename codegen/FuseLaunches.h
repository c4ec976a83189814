// Small launches a GPU runs together: launches of small elementwise kernels
// (a step's optimizer updates of biases and layer-norm weights, the casts of
// those to bf16) become one horizontal kernel (kir::horizontal) that the
// first of them carries as its GPU form, the others skipped there. Each such
// kernel needs too few threads to fill the GPU, so its launch, not its bytes,
// is what it costs. A later launch joins when it may move up to the first:
// in the memory plan it writes no bytes that the run's other parts, or the
// launches it moves ahead of, read or write, and reads none they write. The
// CPU runs the kernels as before, in their order. Decided after the memory plan.
#pragma once
#include "codegen/kir/Kernel.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace sgc::codegen {

struct LaunchRun {
  std::vector<size_t> launches; ///< positions in the step, ascending
  kir::Kernel kernel;           ///< what a GPU runs for all of them, at the first
};

/// The runs of `launches` (the program's launch table, over `tensors` and `kernels`) that a GPU
/// runs as one launch each, by their first launch; each has at least two launches, each launch
/// is in one run at most.
std::vector<LaunchRun> smallLaunchRuns(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels);

} // namespace sgc::codegen
