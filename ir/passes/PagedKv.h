// Pass paged-kv: a decoder exported with its key/value cache (the
// past_key_values pattern of torch.onnx.export for a GPT-style model) becomes
// a decode step over a paged cache. Each attention block
//
//   present_k = Concat(past_k, k_new, axis=2)      (past_k a graph input, present_k an output)
//   present_v = Concat(past_v, v_new, axis=2)
//   y = MatMul(Softmax(mask(scale * MatMul(q, Transpose(present_k)))), present_v)
//
// (scale: Mul/Div by constants; mask: Where with a -inf fill, or an added
// mask, computed from constants and shapes only) becomes
//
//   kv' = KvCacheWrite(kv, k_new, v_new, tables, seq, pos)      kv: a state pool per layer
//   y   = PagedAttention(q, kv', tables, seq, pos) {scale}
//
// with the update kv <- kv' (with bf16, the pool is bf16 and q, k_new and
// v_new are cast to it, y back), and the past inputs and present outputs are
// gone. Three inputs are added: sgc.kv.tables (i32 [seqs, max blocks]),
// sgc.kv.seq and sgc.kv.pos (i32 [tokens]). Every row of the batch is then one
// token (bind the sequence dim to 1): the block tables say which sequence
// it extends, so one step prefills prompts and decodes together.
//
// The mask is taken to be causal (each token sees its sequence's positions
// up to its own); one that reads a graph input (a padding mask) is refused.
// A past input not consumed by a recognized block is an error naming the
// node where matching stopped.
//
// A plain causal LM (`plain`: input ids [1, sequence] -> logits, no cache, as
// Hugging Face models export by default) runs its tokens along its sequence
// axis (bind it to N): each block's own keys and values, [1, heads, N, dim],
// go to the cache, queries, keys and values moved to [N, heads, 1, dim] and
// the result back. Its scores may be scaled before the product (q and k^T
// each by a constant, as scaled_dot_product_attention's decomposition does),
// k^T a Transpose or the exporter's Reshape/Transpose/Reshape, the softmax
// guarded against NaN (Where(IsNaN(p), 0, p)), and grouped-query heads
// repeated before it (the cache holds them repeated). The model's positions,
// Range(0, sequence length, 1), become each token's position in its sequence
// (sgc.kv.pos), for learned position embeddings and rotary tables alike.
//
// A cached model whose positions count from its cache's length (Range(past
// length, past length + sequence length, 1) made a [1, sequence] row, as
// Hugging Face computes them without position ids) takes each token's from
// sgc.kv.pos too, as [tokens, 1].
//
// Requires: inferred shapes, static heads and head dim. Ensures: for each
// token, the attention of the original graph over its sequence's cached
// keys and values.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <map>
#include <string>
#include <vector>

namespace sgc::ir {

struct PagedKvOptions {
  int64_t tokens = 0;    ///< N: tokens per step (rows of the batch)
  int64_t seqs = 0;      ///< S: sequences at once (block table rows)
  int64_t blockSize = 16;
  int64_t blocks = 0;    ///< pages in each layer's pool; 0: as many as `budgetBytes` holds
  int64_t budgetBytes = 0; ///< the pools' bytes (all layers), when `blocks` is 0
  bool bf16 = false;       ///< keep the cache in bf16 (the tokens' keys, values and queries cast to it)
  int64_t maxBlocks = 0; ///< pages of one sequence (max context / block size)
  bool plain = false;    ///< a model without a cache, its sequence axis bound to the N tokens (above)
  std::map<std::string, int64_t> bind; ///< plain: the dims that bind its token input to [1, N], bound once its
                                       ///< positions are found (binding folds their Range into a constant)
};

/// The pools it added, one per layer in graph order, through `pools`.
Error pagedKv(Graph& g, PagedKvOptions o, std::vector<Value*>* pools = nullptr);

} // namespace sgc::ir
