// Pass data-parallel (allreduce): gradient communication as graph nodes.
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

} // namespace sgc::ir
