// sgc inspect's compile check: the nodes of a model that will not compile.
#pragma once
#include "driver/Common.h"

#include <map>
#include <string>

namespace sgc::driver {

/// Prints whether MODEL's training step (or its forward graph) compiles, and which nodes would not,
/// with dims bound as `--dim` gives them (and a TorchScript forward's arguments typed as `--input-type`).
/// Returns the exit status (0 unless the model cannot be read).
int printCompileCheck(const std::string& path, const std::map<std::string, int64_t>& dims, const std::string& inputTypes);

} // namespace sgc::driver
