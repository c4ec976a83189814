// Pass chunk-classifier: a language model's classifier runs in row chunks, so
// that its scores never exist whole. After fuse-loss-grad, a training step's
// classifier is
//
//   s = MatMul(x, w)                      [N, V], through reshapes that keep rows
//                                         (and casts to the same dtype)
//   ds, loss = SceLossGrad(s, t, seed)    mean or sum, no class weights
//   dx = MatMul(ds, w2)                   the data gradients (any number)
//   dw = Gemm(ds, x2) {transA = 1}        the weight gradients (or Gemm(x2, ds))
//
// and becomes, for each chunk k of at most R rows (x, x2 and t sliced by rows):
//
//   s_k = MatMul(x_k, w)
//   ds_k, l_k = SceLossGrad(s_k, t_k, seed / count) {reduction = "sum"}
//   dx_k = MatMul(ds_k, w2);  dw_k = Gemm(ds_k, x2_k)
//
// then loss = Sum(l_k) / count, dx = Concat(dx_k) and dw = Sum(dw_k) in f32,
// rounded once to dw's dtype. count is the number of targets that are not
// ignore_index (the mean's divisor; a sum's is 1). Each chunk's scores die at
// its gradient's products, so one chunk's bytes are alive at a time.
//
// GPT-2 small at batch 16 has bf16 scores of [16384, 50304]: 1.6 GB, alive
// from the head's product to the gradient's products, at the step's memory
// peak (the end of the forward pass). The cost: the head's weights read again
// by each chunk's three products, the rows of x, x2 and t copied out (about
// 50 MB), dx copied together, and the weight gradient's partials summed (K of
// [V, C] read once).
//
// Requires: inferred shapes, fuse-loss-grad run. Rewrites each classifier whose
// scores take more than `maxChunkBytes` (0: none) into as few chunks as keep each
// under it; leaves the rest. Ensures: the same results, up to the order of sums
// (a bf16 weight gradient is rounded per chunk, then once more).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <cstdint>

namespace sgc::ir {

/// The default chunk size: GPT-2 small's scores at batch 16 (1.6 GB) run in two chunks. On the
/// H200, 2 chunks cost 0.05-0.09 ms a step for 0.67 GiB less at peak; 4 chunks 0.15-0.30 ms for 0.91 GiB
/// (each chunk reads the head's weights again, and the weight gradient's partials add up).
constexpr int64_t kClassifierChunkBytes = int64_t(1024) << 20;

/// Returns the number of classifiers chunked through `count`.
Error chunkClassifier(Graph& g, int64_t maxChunkBytes, int* count = nullptr);

} // namespace sgc::ir
