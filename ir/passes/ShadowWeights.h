// Pass shadow-weights: under --precision bf16 each step reads the weights its
// products take through Cast<bf16>(w), a kernel that reads 4 bytes and writes
// 2 for each parameter (GPT-2 small: 0.44 ms of a 30 ms step on the H200).
// Where Adam(W) updates w itself, it also writes its new value's bf16 copy (2
// bytes more), into state that holds the copy until the next step:
//
//   Cast(w) {to = "bf16"}                ->  Cast(w) {to = "bf16", shadow = "w.bf16_copy"}
//   AdamUpdate(w, ...) -> w', m', v'         AdamUpdate(w, ...) -> w', m', v', w'.bf16_copy
//                                            update %w.bf16_copy = %w'.bf16_copy
//
// (a parameter's casts become one). What the step computes is unchanged: the
// Cast still gives bf16(w), and the interpreter runs it every step. The
// `shadow` attribute tells code generation that its result lives in the
// state's bytes, which the optimizer keeps equal to it; so the runtime runs
// the Cast only when the copy may be stale: before the first step, after
// sgc_set_tensor or sgc_load, and before every step once a view of a
// parameter was handed out (a write there is what the next step reads).
//
// Requires: the training step (optimizer updates registered), shapes. Leaves
// alone SGD (its results have no place for the copy) and ZeRO-1 (each rank
// updates a shard of the parameter). Ensures: the same results.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of parameters given a bf16 copy through `count`.
Error shadowWeights(Graph& g, int* count = nullptr);

} // namespace sgc::ir
