// Pass recompute: activation recomputation. Forward results that the
// backward pass reads are computed again just before their first backward
// use, instead of being kept alive from the forward pass, when their op is
// cheap to repeat:
//   fused:     (the default) elementwise ops whose operands the backward pass
//              keeps anyway and whose backward readers are elementwise ops
//              too (SiLU's sigmoid and product, read by the product's
//              gradient): the repeat runs inside the kernel that reads the
//              result, so it costs neither a launch nor a byte of traffic,
//              and the forward kernel stores less;
//   cheap:     elementwise ops whose operands the backward pass keeps anyway
//              (GELU's output, from the input its gradient reads): their
//              memory is saved and the repeat needs no other value kept;
//   selective: elementwise ops and pure data movement (GELU, masks, adds,
//              reshapes, transposes);
//   full:      also row-wise ops and lookups (softmax, layer and batch
//              normalization, dropout, gathers, slices, reductions).
// Matrix products and convolutions are never repeated: their results are the
// checkpoints the recomputation starts from. Repeated ops give the same
// numbers (dropout draws from its seed and the step, not from a state).
//
// Requires: a training step (buildTrainingStep). Ensures: the loss and
// every update are unchanged; the memory planner sees shorter lifetimes.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <string>

namespace sgc::ir {

/// mode: none | fused | cheap | selective | full. Returns the number of nodes repeated through `count`.
Error recompute(Graph& g, const std::string& mode, int* count = nullptr);

} // namespace sgc::ir
