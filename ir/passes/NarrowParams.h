// Pass narrow-params: a parameter that every reader reads through a Cast to
// bf16 (what autocast makes of a product's weights), or through a Transpose
// whose readers are such Casts (a tied LM head's weight), becomes a bf16
// parameter read directly, rounded once instead of cast on every step. When
// it is also an embedding table (a Gather's, as GPT-2 ties its embedding to
// its LM head), the gathered rows are widened to float32 again. For graphs
// that never update their parameters (decode steps): a training step keeps
// its float32 master weights.
//
// Requires: inferred shapes. Ensures: the same results (the Cast rounded the
// same values to the same bf16 numbers; a Transpose moves them unchanged),
// except that a gathered table's rows are the bf16-rounded ones, as a model
// loaded in bf16 gathers them.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of parameters narrowed through `count`.
Error narrowParams(Graph& g, int* count = nullptr);

} // namespace sgc::ir
