// Pass bind-dims: replaces named symbolic dims of the graph inputs with
// sizes (e.g. N=32), then re-runs infer-shapes so every value whose shape
// followed from them becomes static. Code generation needs static shapes.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <map>
#include <string>

namespace sgc::ir {

Error bindDims(Graph& g, const std::map<std::string, int64_t>& dims);

} // namespace sgc::ir
