// Pass expand-resize: rewrites Resize, and the ResizeGrad of its backward
// pass, into ops the code generator has kernels for. Resize is separable:
// along each resized axis, output position y reads input positions
// idx_k[y] with weights w_k[y] (the taps of ir/shapes/Resize.cpp, the
// interpreter's own), so
//
//   Resize(x)     = for each resized axis a, in order:  t <- sum_k Gather(t, idx_k, a) * w_k
//   ResizeGrad(dy) = for each resized axis a, reversed: t <- sum_k GatherGrad(t * w_k, idx_k, a)
//
// with w_k a constant broadcast along the other axes, and k over the most
// taps any position has (nearest: one, linear: two, cubic: four; more with
// antialias). A tf_crop_and_resize position outside the box has weight 0 and
// takes extrapolation_value as a constant term. The interpreter keeps running
// Resize itself: it stays the reference the expansion is checked against.
//
// Requires: inferred shapes. Rewrites the nodes whose input shape is static
// and whose roi, scales and sizes are constants; leaves the others (their
// lowering error says why). Ensures: the graph's results are unchanged up to
// rounding.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of nodes rewritten through `count`.
Error expandResize(Graph& g, int* count = nullptr);

} // namespace sgc::ir
