// The training flags shared by `sgc train` and `sgc compile --train`
// (--optimizer, --lr, --loss, --freeze, ...), and --dim bindings.
#pragma once
#include "driver/Args.h"
#include "ir/Error.h"
#include "ir/training/TrainingStep.h"

#include <map>
#include <vector>

namespace sgc::driver {

/// The option specs of the training flags, to append to a command's spec.
std::vector<OptionSpec> trainingFlagSpecs();
/// Parses the training flags (defaults as in PyTorch); `forGpu`: the library runs on a GPU too
/// (--attention auto then fuses bf16 attention).
Expected<ir::TrainingOptions> parseTrainingFlags(const Args& a, bool forGpu = false);
/// True when any training flag is given (but `except`).
bool hasTrainingFlags(const Args& a, const std::string& except = "");
/// Parses a number option; `def` when absent.
Expected<double> numberFlag(const Args& a, const std::string& name, double def);
/// Parses --dim N=32,T=128 into a map.
Expected<std::map<std::string, int64_t>> parseDims(const std::string& s);

} // namespace sgc::driver
