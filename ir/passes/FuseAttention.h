// Pass fuse-attention: finds attention written out as ops,
//
//   y = MatMul(Softmax(mask(scale * MatMul(q, kT))), v)      (softmax over the keys)
//
// where the scale (Mul or Div by a scalar constant, or split over q and kT as
// scaled_dot_product_attention's decompositions write it) is optional and the
// mask, also optional, is a constant causal one (a Where between the scores and
// a very negative scalar, or an Add of 0 / very negative values, the same in
// every leading slice) such that query i sees keys j <= i, and replaces it by
// one FusedAttention node. SDPA's guard of rows with no visible key,
// Where(IsNaN(p), 0, p) after the softmax, goes with the pattern: no row of a
// causal mask is empty. kT may be a Transpose of k or, as the dynamo exporter
// writes it, Reshape(Transpose(Reshape(k))) through a flattened batch. Its kernels
// never store the [Tq, Tk] scores: the forward pass keeps the log-sum-exp of
// each row instead and the backward pass recomputes the scores from it. A
// pattern with any intermediate result read elsewhere (or a mask of another
// form) is left as it is: the decomposition stays the reference semantics.
//
// Requires: a forward graph with inferred shapes (runs before autocast and
// autodiff). Ensures: the graph's results are unchanged up to rounding.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of attention patterns fused through `count`.
Error fuseAttention(Graph& g, int* count = nullptr);

} // namespace sgc::ir
