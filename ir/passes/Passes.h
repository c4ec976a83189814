// The pass registry (Passes.def) and a runner for a comma-separated list.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <string>
#include <vector>

namespace sgc::ir {

std::vector<std::string> passNames();

/// Runs the named passes in order; with `verifyEach`, verifies after each.
Error runPasses(Graph& g, const std::vector<std::string>& names, bool verifyEach);

} // namespace sgc::ir
