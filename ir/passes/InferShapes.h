// Pass infer-shapes: gives every node result a type by running the op's
// shape rule over its inputs' types, and folds shape computations: a node
// whose inputs are all constants (or a Shape/Size of a statically shaped
// tensor, or a CastLike of a constant) becomes a constant when its result is small, so Shape -> Gather ->
// Concat -> Reshape chains over static shapes end as constant shapes.
//
// Requires: a verified graph. Ensures: every value has a dtype; results are
// ranked wherever the rules can tell.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Runs the pass. Errors name the node whose rule failed.
Error inferShapes(Graph& g, bool fold = true);

} // namespace sgc::ir
