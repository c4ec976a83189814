// Token-count buckets of a decode step. A step compiled for `--max-tokens`
// rows (a long prompt's prefill) wastes most of its work on a decoding step
// of a few sequences, so the library also carries the same step compiled
// for fewer rows; the runtime runs the smallest that holds a call's tokens.
// A bucket shares the main step's parameters, its key/value cache (state)
// and its activation region; it has its own inputs and constants.
#pragma once
#include "codegen/Program.h"
#include "ir/Error.h"

namespace sgc::codegen {

/// Adds `bucket` (the decode step of `main` compiled for fewer tokens, with Weights::None) to
/// `main`: its kernels join main's, each content once (the others renamed sgc_tTOKENS_kI), its
/// constants join the weights blob, and its description joins main's as "buckets"[]. An error
/// when it does not place its parameters and cache exactly where main does (the runtime's own
/// check, runtime/Program.h).
Error addDecodeBucket(CompiledProgram& main, CompiledProgram bucket);

} // namespace sgc::codegen
