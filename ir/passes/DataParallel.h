// Pass data-parallel (allreduce, zero1): gradient communication as graph nodes.
// The gradients the optimizer reads are grouped into buckets of at most
// `bucketMb` megabytes in the order the backward pass produces them (the
// reverse of the forward's order of parameters, as in PyTorch's DDP), and
// each bucket gets one AllReduce placed right after the node that produces
// the bucket's last gradient: the first point at which all of them exist, so
// the collective can overlap the rest of the backward pass. The optimizer
// reads the reduced gradients. The loss gets a one-value all-reduce too, so
// every rank reports the mean over the ranks.
//
// Requires: autodiff has run, and no node after a gradient's producer but
// the optimizer (and clipping) reads it. Ensures: no AllReduce precedes a
// producer of one of its inputs.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <utility>
#include <vector>

namespace sgc::ir {

/// Replaces each (parameter, gradient) pair's gradient, and `loss`, by its
/// all-reduced mean. Returns the number of gradient buckets through `buckets`.
Error insertAllReduce(Graph& g, Value*& loss, std::vector<std::pair<Value*, Value*>>& grads, double bucketMb, int* buckets = nullptr);

/// One ZeRO-1 bucket: its parameters, flattened and concatenated (each at its offset), zero-padded
/// to a multiple of the world size, and this rank's shards of them and of their averaged gradients.
struct Zero1Bucket {
  std::vector<Value*> params;
  std::vector<int64_t> offsets;
  int64_t padded = 0, world = 1;
  Value* paramShard = nullptr;
  Value* gradShard = nullptr;
};

/// ZeRO-1 (--data-parallel zero1): the gradients, bucketed as for the
/// all-reduce (one dtype per bucket), are flattened, concatenated and
/// reduce-scattered right after the bucket's last gradient; each bucket's
/// parameters are flattened and this rank's shard taken (Shard), for the
/// optimizer to update with state of the shard's size only. The loss is
/// all-reduced as above.
Expected<std::vector<Zero1Bucket>> insertZero1(Graph& g, Value*& loss, const std::vector<std::pair<Value*, Value*>>& grads, double bucketMb,
                                               int64_t world);
/// After the optimizer: the updated shards all-gathered and cut back into the
/// parameters, which become the parameters' updates.
Error gatherZero1(Graph& g, const Zero1Bucket& b, Value* newShard);

} // namespace sgc::ir
