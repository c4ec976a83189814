// Pass forward-copies: every reader of a copy reads what the copy copies.
// A copy is a node whose result is its first input, element for element and
// of the same type: an Identity, a Concat of one tensor, and a reshape, cast,
// broadcast or SumTo whose result type is its input's (static shapes). The
// exporters are full of them (torch.onnx's dynamo exporter writes a clone or
// an alias as an Identity and an empty cache's `cat` as a Concat of one
// tensor; autodiff sums a gradient to a shape it already has), and the
// pattern passes after this one (fuse-attention, attention-layout, the
// fold-transposes of the training step) match the producers they read
// without looking through them.
//
// Graph outputs and state updates keep their copies (their names are the
// module's interface). Requires: shapes inferred. Ensures: the graph computes
// the same results; no node reads a copy; copies nothing reads are removed
// (Graph::removeDeadNodes).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of nodes removed (copies no reader is left to) through `count`.
Error forwardCopies(Graph& g, int* count = nullptr);

} // namespace sgc::ir
