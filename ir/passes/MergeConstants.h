// Pass merge-constants: constants of equal type and bytes become one value;
// every reader of a later copy reads the first. Exporters fold a table once
// per use (a Llama's rotary cos and sin tables, once per layer and per query
// or key), and each copy would otherwise take its bytes in the library's
// read-only data and in the GPU's memory.
//
// Constants that Graph::untrainable lists keep their own values (the training
// step's check reads them by name). Requires nothing. Ensures: the graph
// computes the same results; no two constants outside `untrainable` have
// equal types and bytes; where it merged any, no dead node or unused
// constant is left (Graph::removeDeadNodes).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of constants merged away through `count`.
Error mergeConstants(Graph& g, int* count = nullptr);

} // namespace sgc::ir
