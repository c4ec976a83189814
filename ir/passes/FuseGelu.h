// Pass fuse-gelu: finds GELU written out as elementwise ops (what exporters
// emit below ONNX opset 20),
//
//   0.5 * x * (1 + erf(x / sqrt(2)))      (any order of the products;
//                                          x * (1 / sqrt(2)) also)
//   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
//                                         (x^3 as x * (x * x), (x * x) * x
//                                          or Pow; approximate = "tanh")
//
// and replaces it by one Gelu node. Its gradient is then one UnaryGrad of x
// instead of the chain rule through five (erf) or nine (tanh) nodes, whose
// intermediate results the backward pass would keep.
//
// Requires: inferred shapes (runs before autocast and autodiff). Ensures:
// the graph's results are unchanged up to rounding.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of GELUs fused through `count`.
Error fuseGelu(Graph& g, int* count = nullptr);

} // namespace sgc::ir
