// The decode step (see DecodeStep.h).
#include "driver/DecodeStep.h"

#include "driver/TrainingFlags.h"
#include "ir/passes/Autocast.h"
#include "ir/passes/BindDims.h"
#include "ir/passes/FuseGelu.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/NarrowParams.h"
#include "ir/passes/PagedKv.h"
#include "ir/passes/SplitToSlices.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace sgc::driver {
namespace {

/// A positive integer option below 2^31; `def` when absent (0: required).
Expected<int64_t> countFlag(const Args& a, const std::string& name, int64_t def) {
  if (!a.has(name)) {
    if (def) return def;
    return makeError("--mode decode needs --" + name);
  }
  auto v = numberFlag(a, name, 0);
  if (!v) return v.takeError();
  if (*v < 1 || *v != std::floor(*v) || *v >= 2147483648.0) return makeError("--" + name + " expects a positive integer, got '" + a.get(name) + "'");
  return (int64_t)*v;
}

/// The symbolic dims of the token input [batch, sequence] bound to [tokens, 1], or for a plain
/// model (no cache: its tokens along its sequence) to [1, tokens].
Expected<std::map<std::string, int64_t>> tokenDims(const ir::Value* ids, int64_t tokens, bool plain, const std::string& model) {
  const ir::Type& t = ids->type;
  if (!t.ranked || t.rank() != 2 || !ir::isInteger(t.dtype))
    return makeError(model + ": input %" + ids->name + " must be integer token ids [batch, sequence], is " + ir::toString(t));
  std::map<std::string, int64_t> dims;
  int64_t want[2] = {plain ? 1 : tokens, plain ? tokens : 1};
  std::string layout = "[" + std::to_string(want[0]) + ", " + std::to_string(want[1]) + "]";
  for (int d = 0; d < 2; ++d) {
    const ir::Dim& dim = t.dims[d];
    if (dim.isSymbolic()) dims[dim.symbol] = want[d];
    else if (dim.value != want[d])
      return makeError(model + ": input %" + ids->name + " has a static dim " + std::to_string(d) + " of " + std::to_string(dim.value) +
                       "; a decode step needs " + (plain ? "[1, tokens] = " : "[tokens, 1] = ") + layout + " (export it with dynamic axes)");
  }
  return dims;
}

} // namespace

std::vector<OptionSpec> decodeFlagSpecs() {
  return {{"mode", "MODE", "train (default) or decode: the decoding step of a causal LM (plain, or exported with past_key_values)"},
          {"kv-block-size", "N", "decode: tokens per page of the key/value cache (default 16)"},
          {"max-seqs", "S", "decode: sequences decoded together (default 8)"},
          {"max-context", "C", "decode: the longest sequence, prompt and generated tokens (required)"},
          {"kv-blocks", "N", "decode: pages in the cache (default: enough for every sequence at max context)"},
          {"kv-budget-mb", "M", "decode: the cache's size in MiB instead of --kv-blocks"},
          {"max-tokens", "N", "decode: tokens one step runs, prompt tokens and decoded ones (default: max(S, block size))"},
          {"token-buckets", "LIST", "decode: smaller steps also compiled, run when a call has that few tokens (default: S when --max-tokens >= 2 S; none)"},
          {"kv-cache-dtype", "T", "decode: f32 or bf16, the cache's dtype (default: bf16 with --precision bf16, else f32)"},
          {"input-ids", "NAME", "decode: the model's token input (default input_ids)"},
          {"position-ids", "NAME", "decode: the model's position input (default position_ids; optional)"}};
}

Expected<std::vector<int64_t>> tokenBuckets(const Args& a, const codegen::DecodeSpec& spec) {
  std::vector<int64_t> buckets;
  if (!a.has("token-buckets")) {
    if (spec.tokens >= 2 * spec.seqs) buckets.push_back(spec.seqs);
    return buckets;
  }
  std::string list = a.get("token-buckets");
  if (list == "none") return buckets;
  for (size_t start = 0; start <= list.size();) {
    size_t end = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, end - start);
    char* stop = nullptr;
    long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop || v < 1 || v >= spec.tokens)
      return makeError("--token-buckets " + list + ": '" + item + "' is not a token count from 1 to --max-tokens - 1 = " + std::to_string(spec.tokens - 1) +
                       " (or give none)");
    buckets.push_back(v);
    start = end + 1;
  }
  std::sort(buckets.begin(), buckets.end());
  if (std::adjacent_find(buckets.begin(), buckets.end()) != buckets.end()) return makeError("--token-buckets " + list + " names a count twice");
  return buckets;
}

Expected<codegen::DecodeSpec> buildDecodeStep(ir::Graph& g, const Args& a, const std::string& model, int64_t bucketTokens) {
  auto block = countFlag(a, "kv-block-size", 16), seqs = countFlag(a, "max-seqs", 8), context = countFlag(a, "max-context", 0);
  if (!block) return block.takeError();
  if (!seqs) return seqs.takeError();
  if (!context) return context.takeError();
  auto tokens = countFlag(a, "max-tokens", std::max(*seqs, *block));
  if (!tokens) return tokens.takeError();
  if (bucketTokens) *tokens = bucketTokens;
  if (a.has("kv-blocks") && a.has("kv-budget-mb")) return makeError("--kv-blocks and --kv-budget-mb size the same cache: give one");
  ir::PagedKvOptions o;
  o.tokens = *tokens, o.seqs = *seqs, o.blockSize = *block;
  o.maxBlocks = (*context + *block - 1) / *block;
  if (a.has("kv-blocks")) {
    auto blocks = countFlag(a, "kv-blocks", 0);
    if (!blocks) return blocks.takeError();
    o.blocks = *blocks;
  } else if (a.has("kv-budget-mb")) {
    auto mb = numberFlag(a, "kv-budget-mb", 0);
    if (!mb) return mb.takeError();
    if (!(*mb > 0) || *mb > 1e7) return makeError("--kv-budget-mb expects a positive size in MiB");
    o.budgetBytes = (int64_t)(*mb * 1024 * 1024);
  } else {
    o.blocks = o.seqs * o.maxBlocks;
  }
  if (o.blocks && o.blocks < o.maxBlocks)
    return makeError("--kv-blocks " + std::to_string(o.blocks) + " cannot hold one sequence of --max-context " + std::to_string(*context) + " (" +
                     std::to_string(o.maxBlocks) + " pages)");
  std::string precision = a.get("precision", "f32");
  if (precision != "f32" && precision != "bf16") return makeError("--precision " + precision + ": expected f32 or bf16");
  std::string cache = a.get("kv-cache-dtype", precision);
  if (cache != "f32" && cache != "bf16") return makeError("--kv-cache-dtype " + cache + ": expected f32 or bf16");
  o.bf16 = cache == "bf16";
  codegen::DecodeSpec spec;
  spec.ids = a.get("input-ids", "input_ids");
  ir::Value* ids = g.findValue(spec.ids);
  if (!ids || ids->kind != ir::ValueKind::Input) return makeError(model + ": no input named '" + spec.ids + "' (the token ids; see --input-ids)");
  spec.positions = a.get("position-ids", "position_ids");
  ir::Value* positions = g.findValue(spec.positions);
  if (!positions || positions->kind != ir::ValueKind::Input) {
    if (a.has("position-ids")) return makeError(model + ": no input named '" + spec.positions + "' (see --position-ids)");
    spec.positions.clear();
  }
  // A model whose only inputs are its tokens (and positions) has no cache to page: a plain causal
  // LM, which runs the step's tokens along its sequence axis (ir/passes/PagedKv.h).
  o.plain = std::all_of(g.inputs.begin(), g.inputs.end(), [&](const ir::Value* in) { return in == ids || in->name == spec.positions; });
  bool cached = std::any_of(g.inputs.begin(), g.inputs.end(), [](const ir::Value* in) { return in->type.ranked && in->type.rank() == 4; });
  if (!o.plain && !cached) // no past keys and values: inputs besides the tokens have nothing to feed them
    for (const ir::Value* in : g.inputs)
      if (in != ids && in->name != spec.positions)
        return makeError(model + ": input %" + in->name + ": a causal LM without a key/value cache decodes from its token ids (and position " +
                         "ids) alone, the cache's block tables saying which tokens each one sees; export it without this input");
  auto dims = tokenDims(ids, o.tokens, o.plain, model);
  if (!dims) return dims.takeError();
  if (o.plain) o.bind = *dims; // bound by the pass
  std::vector<ir::Value*> pools;
  if (Error e = ir::pagedKv(g, o, &pools)) return makeError(model + ": " + errorText(std::move(e)));
  for (const ir::Value* in : g.inputs)
    if (in->name != spec.ids && in->name != spec.positions && in->name.rfind("sgc.kv.", 0) != 0)
      return makeError(model + ": input %" + in->name + ": a decode step feeds only the token ids, their positions and the cache");
  if (!o.plain)
    if (Error e = ir::bindDims(g, *dims)) return makeError(model + ": " + errorText(std::move(e)));
  if (Error e = ir::fuseGelu(g)) return makeError(model + ": " + errorText(std::move(e)));
  if (Error e = ir::splitToSlices(g)) return makeError(model + ": " + errorText(std::move(e))); // fused into their readers' kernels
  if (precision == "bf16") { // the products in bf16, as torch.autocast runs them, from weights kept in bf16
    if (Error e = ir::autocastBf16(g)) return makeError(model + ": " + errorText(std::move(e)));
    if (Error e = ir::narrowParams(g)) return makeError(model + ": " + errorText(std::move(e)));
  }
  if (positions && !spec.positions.empty() && positions->type.shape() != ids->type.shape())
    return makeError(model + ": input %" + spec.positions + " must have the token ids' shape, is " + ir::toString(positions->type));
  const ir::Value* logits = g.outputs.size() == 1 ? g.outputs[0] : nullptr;
  if (!logits) return makeError(model + ": a decoder's outputs must be its logits and the present keys and values");
  auto shape = logits->type.shape();
  bool rows = o.plain ? shape.size() == 3 && shape[0] == 1 && shape[1] == o.tokens // one row of logits per token
                      : !shape.empty() && shape[0] == o.tokens && (shape.size() != 3 || shape[1] == 1) && shape.size() <= 3;
  if (!ir::isFloat(logits->type.dtype) || !rows)
    return makeError(model + ": output %" + logits->name + " must be logits [batch, sequence, vocabulary], is " + ir::toString(logits->type));
  // The next token of each row, chosen on the device, greedy or sampled with each row's own
  // temperature, top-k, top-p and seed (counted by the token's position): a host that takes only
  // these copies tokens x 8 bytes instead of the logits (sgc_decode_step_sample).
  std::vector<ir::Value*> sampling{g.outputs[0]};
  for (auto [name, dtype] : {std::pair{"sgc.sample.temperature", ir::DType::F32}, std::pair{"sgc.sample.top_k", ir::DType::I32},
                             std::pair{"sgc.sample.top_p", ir::DType::F32}, std::pair{"sgc.sample.seed", ir::DType::I64}})
    sampling.push_back(g.addInput(name, ir::Type::of(dtype, {o.tokens})));
  sampling.push_back(g.findValue("sgc.kv.pos"));
  ir::Node* next = g.addNode(ir::Op::Sample, sampling, 1, "sgc.next", {"sgc.next"});
  g.outputs.push_back(next->outputs[0]);
  if (Error e = ir::inferShapes(g)) return makeError(model + ": " + errorText(std::move(e)));
  spec.next = "sgc.next";
  spec.tokens = o.tokens, spec.seqs = o.seqs, spec.blockSize = o.blockSize, spec.maxBlocks = o.maxBlocks, spec.maxContext = *context;
  spec.blocks = pools[0]->type.shape()[0];
  for (const ir::Value* p : pools) spec.pools.push_back(p->name);
  return spec;
}

} // namespace sgc::driver
