// Pass widen-sums: a sum of bf16 (or f16) values whose only reader widens it
// to f32 sums the widened values instead:
//
//   Cast<f32>(SumTo(x))  ->  SumTo(x) {to = f32}
//
// (a sum that reads the narrow values and accumulates in f32: no widened copy
// of x is stored).
// Under --precision bf16 every bias gradient has that form (the sum of the
// product's bf16 gradient over the rows, cast back to the f32 parameter's
// type). The sum is then accumulated and rounded once in f32 (as PyTorch's
// autocast does), and on a GPU an f32 sum runs as the split reduction across
// many threads (codegen/kir/LowerGpu.cpp) instead of one thread per column.
//
// Requires: inferred shapes. Ensures: every value keeps its identity (the
// cast's result becomes the sum's); the narrow sums are left unread, for
// dead-code elimination; results differ only by the bf16 rounding of the sums
// that is no longer done.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of sums widened through `count`.
Error widenSums(Graph& g, int* count = nullptr);

} // namespace sgc::ir
