// Pass fuse-loss-grad: a softmax cross-entropy loss and its gradient over the
// same scores become one node, which reads the scores once for both:
//
//   loss = SoftmaxCrossEntropyLoss(s, t, w?)            dloss a constant (the
//   ds = SceLossGrad(s, t, dloss, w?)                   training step's seed)
//     ->  ds, loss = SceLossGrad(s, t, dloss, w?)  at the loss's place
//
// GPT-2's scores are [16384, 50304]: the loss alone read all 1.6 GB of them
// once more. The fused node keeps the loss's value (its name and type, `to`
// included), so what reads the loss reads it unchanged.
//
// Requires: inferred shapes, the gradient built (autodiff). Rewrites the pairs
// with the same scores, targets, weights, reduction and ignore_index whose
// upstream gradient does not depend on the loss; leaves the rest. Ensures: the
// same results.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of pairs fused through `count`.
Error fuseLossGrad(Graph& g, int* count = nullptr);

} // namespace sgc::ir
