// Pass autocast-bf16: mixed precision as torch.autocast does it. Matrix
// products, fused attention and convolutions read bf16 copies of their floating-point inputs
// and their results are cast back to the original type (after the bias, when
// a MatMul's only reader adds a parameter vector to it: nn.Linear exported as
// MatMul + Add, which autocast runs as one bf16 op), so every other op
// (normalizations, softmax, losses, reductions) and the optimizer stay in
// f32, the parameters remain f32 master weights, and the backward pass,
// derived afterwards, mirrors the casts.
//
// Requires: a forward graph (runs before autodiff). Ensures: only products
// and convolutions compute in bf16.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of products and convolutions moved to bf16 through `count`.
Error autocastBf16(Graph& g, int* count = nullptr);

} // namespace sgc::ir
