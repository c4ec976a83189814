// Pass pack-attention: fused attention whose queries, keys and values are the
// three equal parts of one tensor, split along its last dim and each
// reshaped into heads (GPT-2's one projection for all three, as
// `qkv.split(C, dim=2)` then `view(B, T, H, D)` writes it), reads that tensor
// itself:
//
//   FusedAttention(Reshape(Split(x)[0]), Reshape(Split(x)[1]), Reshape(Split(x)[2])) {layout = "bthd"}
//     ->  FusedAttention(x', x', x') {layout = "bt3hd"},  x' = Reshape(x) : [..., T, 3, H, D]
//
// Its kernels read each operand's rows where they lie in x, so the Split's
// copies are gone; and the gradient that autodiff derives afterwards writes
// dq, dk and dv into one tensor in x's layout, so the Concat of the three in
// the backward pass is gone too.
//
// Requires: the bthd layout (attention-layout), static shapes, no gradient
// yet. Ensures: results unchanged (the same arithmetic on the same elements).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of attention nodes rewritten through `count`.
Error packAttention(Graph& g, int* count = nullptr);

} // namespace sgc::ir
