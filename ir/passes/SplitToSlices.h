// Pass split-to-slices: a Split of static shapes becomes one Slice per result
// (its start and end along the axis, constants). The code generator lowers a
// Split as a kernel per result that copies it out; a Slice of constant
// geometry is fused into its readers' kernels instead, which then read the
// split tensor where the part lies (GPT-2's query, key and value, split from
// one product, go straight into the kernels that lay them out for attention).
//
// Requires: inferred shapes. Rewrites the Splits whose input and results are
// static and all used; leaves the others. Ensures: the same results (the same
// elements, moved).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of Splits rewritten through `count`.
Error splitToSlices(Graph& g, int* count = nullptr);

} // namespace sgc::ir
