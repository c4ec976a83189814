// Elementwise launches a GPU runs together: launches of elementwise kernels
// of up to a million threads (a step's optimizer updates, the casts of its
// weights to bf16) become one horizontal kernel (kir::horizontal) that the
// first of them carries as its GPU form, the others skipped there. A small
// kernel cannot fill the GPU, so its launch, not its bytes, is what it costs;
// a mid-sized one ends in a tail of idle SMs that the next part's blocks
// fill; a larger one fills the GPU alone. A later launch joins when it may
// move up to the first: in the memory plan it writes no bytes that the run's
// other parts, or the launches it moves ahead of, read or write, and reads
// none they write. The same rule runs the accumulators' zeroings together
// (ZeroRun) and GPU forms' reductions together (CallRun). The CPU runs the
// kernels as before, in their order. Decided after the memory plan.
#pragma once
#include "codegen/kir/Kernel.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <vector>

namespace sgc::codegen {

/// The launches a GEMM's GELU epilogue may make unneeded (their GELU computed by cuBLASLt).
std::set<int64_t> geluSkips(const nlohmann::json& launches);

struct LaunchRun {
  std::vector<size_t> launches; ///< positions in the step, ascending
  kir::Kernel kernel;           ///< what a GPU runs for all of them, at the first
};

/// The runs of `launches` (the program's launch table, over `tensors` and `kernels`) that a GPU
/// runs as one launch each, by their first launch; each has at least two launches, each launch
/// is in one run at most.
std::vector<LaunchRun> elementwiseRuns(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels);

/// The zeroing calls of GPU forms (an accumulator's zeros, kir::isZeroing, before the atomic adds
/// that sum into it) that a GPU runs together in a launch of their own before launch `at`, the
/// step's first that the forward pass does not need: a bias or layer-norm gradient's zeroing would
/// otherwise be a launch of its own (GPT-2 small: 99 of them). Only calls of such launches move
/// (an eval step runs the forward pass's alone), each when, in the memory plan, its tensor's
/// bytes are touched by no launch it moves ahead of, nor by the calls of its GPU form before it.
struct ZeroRun {
  size_t at = 0;
  std::vector<std::pair<size_t, size_t>> calls; ///< (launch, position in its GPU form), ascending
  std::vector<kir::Kernel> kernels;             ///< horizontal kernels of their zeroings, one launch each
};

/// The step's zeroings that may run together before `at`; none (nullopt) when fewer than two may.
std::optional<ZeroRun> zeroRun(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels);

/// GPU forms' calls that a GPU runs together: a call of a GPU form that is a horizontal part
/// (kir::isHorizontalPart: a bias gradient's split reduction, a layer norm's dscale and dbias)
/// takes later such calls into one horizontal kernel in its place, each when, in the memory
/// plan, it is independent of the run's parts and of every launch and call it moves ahead of
/// (the calls after the first's in its form, the launches between, the calls before its own in
/// its form). GPT-2 small: each layer norm's parameter gradients with a bias gradient's
/// reduction next to it.
struct CallRun {
  std::vector<std::pair<size_t, size_t>> calls; ///< (launch, position in its GPU form), the first where the run goes
  kir::Kernel kernel;
};

/// The step's runs of GPU forms' calls, each of two calls or more.
std::vector<CallRun> callRuns(const nlohmann::json& launches, const nlohmann::json& tensors, const std::vector<kir::Kernel>& kernels);

} // namespace sgc::codegen
