// Pass narrow-params: a parameter that every reader reads through a Cast to
// bf16 (what autocast makes of a product's weights) becomes a bf16 parameter
// read directly, rounded once instead of cast on every step. For graphs that
// never update their parameters (decode steps): a training step keeps its
// float32 master weights.
//
// Requires: inferred shapes. Ensures: the same results (the Cast rounded the
// same values to the same bf16 numbers).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of parameters narrowed through `count`.
Error narrowParams(Graph& g, int* count = nullptr);

} // namespace sgc::ir
