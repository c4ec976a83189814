// Pass widen-sums: a sum of bf16 (or f16) values whose only reader widens it
// to f32 sums the widened values instead:
//
//   Cast<f32>(SumTo(x))  ->  SumTo(x) {to = f32}
//
// (a sum that reads the narrow values and accumulates in f32: no widened copy
// of x is stored); and a sum of narrow values widened first sums them as they
// are, through any reshapes between (widening is exact: the same sums):
//
//   SumTo(Reshape(Cast<f32>(x)))  ->  SumTo(Reshape(x)) {to = f32}
//
// The second form is the gradient of grouped-query attention's shared keys and
// values: the bf16 gradients of every query head's copy, widened to the f32
// projection's type, then summed over each group.
// Under --precision bf16 every bias gradient has that form (the sum of the
// product's bf16 gradient over the rows, cast back to the f32 parameter's
// type). The sum is then accumulated and rounded once in f32 (as PyTorch's
// autocast does), and on a GPU an f32 sum runs as the split reduction across
// many threads (codegen/kir/LowerGpu.cpp) instead of one thread per column.
//
// Requires: inferred shapes. Ensures: every value keeps its identity (the
// cast's result becomes the sum's); the narrow sums are left unread, for
// dead-code elimination; results differ only by the bf16 rounding of the sums
// that is no longer done (none for the second form).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of sums widened through `count`.
Error widenSums(Graph& g, int* count = nullptr);

} // namespace sgc::ir
