// Pass attention-layout: fused attention whose operands are the head
// transposes of [..., T, H, D] tensors (a model's projection reshaped into
// heads and transposed to [..., H, T, D], as GPT code writes it) and whose
// result is only transposed straight back reads and writes those tensors
// itself:
//
//   Transpose(FusedAttention(Transpose(q), Transpose(k), Transpose(v)))
//     ->  FusedAttention(q, k, v) {layout = "bthd"}
//
// (each Transpose swapping the two dims before the last; the copies Hugging
// Face's GPT-2 puts between it and the node, an Identity or a Concat of one
// tensor, are gone once forward-copies has run). Its kernels take a
// problem's rows H rows apart instead of side by side, so the four transposes
// (and the four of the backward pass, which autodiff derives afterwards from
// the rewritten node) are gone. Where the operands come some other way (a
// rotary embedding's kernels write q and k [..., H, T, D]; grouped keys and
// values), the result alone is written transposed:
//
//   Transpose(FusedAttention(q, k, v))  ->  FusedAttention(q, k, v) {result_layout = "bthd"}
//
// (its gradient's dy read so too: two transposes of [..., T, H, Dv] gone).
//
// Requires: fused attention (fuse-attention), inferred shapes, no gradient
// yet (the log-sum-exp must have no reader). Ensures: results unchanged (the
// same arithmetic on the same values).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of attention nodes rewritten through `count`.
Error attentionLayout(Graph& g, int* count = nullptr);

} // namespace sgc::ir
