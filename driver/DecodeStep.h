// `sgc compile --mode decode`: the flags that size the paged key/value cache,
// and the decode step built from a decoder exported with its cache.
#pragma once
#include "codegen/Program.h"
#include "driver/Args.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <vector>

namespace sgc::driver {

/// The option specs of the decode flags, to append to a command's spec.
std::vector<OptionSpec> decodeFlagSpecs();

/// Rewrites `g` (a decoder with past_key_values inputs) into the decode step the flags size,
/// with static shapes, and returns what the runtime needs to run it. `model` names the file in
/// errors. `tokens` (0: --max-tokens) is the rows of the step: a token bucket's.
Expected<codegen::DecodeSpec> buildDecodeStep(ir::Graph& g, const Args& a, const std::string& model, int64_t tokens = 0);

/// The token buckets (--token-buckets; see codegen/DecodeBuckets.h) of a step of `spec.tokens`
/// rows, ascending: by default max-seqs when --max-tokens is at least twice it (decoding steps
/// then run at their size, prefill at the full one); "none" for none.
Expected<std::vector<int64_t>> tokenBuckets(const Args& a, const codegen::DecodeSpec& spec);

} // namespace sgc::driver
