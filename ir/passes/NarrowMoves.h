// Pass narrow-moves: data that is widened only to be moved and narrowed again
// moves narrow:
//
//   Cast<bf16>(Transpose(Reshape(Cast<f32>(x))))  ->  Transpose(Reshape(x))
//
// for x of a narrow type (bf16, f16) and any chain of data-movement ops
// (Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Identity, Split, Slice,
// Concat of values that all narrow, casts to f32 of f32 values). The loss
// gradient SceLossGrad counts as one too: it computes in f32 and rounds once
// where it stores, so from the narrow scores it stores the narrow gradient
// (the bits of narrowing its f32 one; the wide scores stay for the forward
// loss, and the wide gradient is gone). So does any elementwise function of
// floats (GELU, SiLU's sigmoid and product, the gradients of elementwise
// functions) whose floating-point operands all narrow: its kernel computes in
// f32 and rounds once where it stores, so it stores the narrow result, as
// PyTorch's autocast does for ops on bf16 tensors. The last function of a
// chain gives the bits of narrowing its f32 result; one before it rounds where
// the f32 graph did not, as each of PyTorch's ops does (an f32 operand, such as
// a constant or an f32 parameter, keeps the chain wide). The f32 copy of a
// GELU's input that the backward pass kept (4x the model width per token) is
// gone too. The cross-entropy whose f32 scores narrow so reads the narrow
// ones, still computing and returning f32 ({to = f32}): no f32 copy of a
// language model's logits. Autocast (--precision bf16) makes these chains
// around every product: a bf16 result is cast to f32, split into attention
// heads and transposed, then cast back to bf16 for the next product; the
// backward pass mirrors them. Widening is exact and moving data is exact, so a
// narrow chain of moves gives the same bits with half the bytes moved and
// without the two casts.
//
// Requires: inferred shapes. Ensures: moves give the same bits, functions
// round as above; the wide chains are left unread, for dead-code elimination
// (values not read yet, such as gradients before the optimizer is added, stay).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of casts made unnecessary through `count`.
Error narrowMoves(Graph& g, int* count = nullptr);

/// An optimizer update whose gradient is a narrow value widened to f32 reads the narrow value
/// (its kernel widens what it loads: the same arithmetic, without the f32 copy; a linear
/// layer's weight gradient under autocast). The casts are left unread. Returns how many.
int readNarrowGradients(Graph& g);

} // namespace sgc::ir
