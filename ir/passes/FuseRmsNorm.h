// Pass fuse-rms-norm: finds RMS normalization written out as elementwise ops
// and a mean (what exporters emit for Llama-style models, and what the ONNX
// importer builds from RMSNormalization),
//
//   x * (1 / sqrt(mean(x^2) + eps)) * scale     (x^2 as Pow(x, 2) or x * x;
//                                                 1 / s as Reciprocal or Div;
//                                                 x / sqrt(...) also; a Cast
//                                                 that keeps the dtype between)
//
// with the mean over x's trailing dims and `scale` of their shape, and
// replaces it by one RmsNorm node. Its gradient is then one RmsNormGrad
// instead of the chain rule through seven nodes, and a GPU runs it as one
// row kernel (a warp per row) forward and backward.
//
// Requires: inferred shapes (runs before autocast and autodiff). Ensures:
// the graph's results are unchanged up to rounding.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of normalizations fused through `count`.
Error fuseRmsNorm(Graph& g, int* count = nullptr);

} // namespace sgc::ir
