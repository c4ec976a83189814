// Pass fold-transposes: moves matrix transposes next to the matrix products
// that can take them as operand flags (cuBLASLt on the GPU; see
// codegen/GemmTransposes.h), and folds transposes into each other:
//
//   Transpose(Transpose(x))          ->  x, or one Transpose of the composed perm
//   Cast<narrow>(Transpose(x))       ->  Transpose(Cast<narrow>(x))
//   Transpose(Cast(MatMul(a, b)))    ->  Cast(Gemm(b, a) {transA = 1, transB = 1})
//
// (the last with or without the Cast, for matrices a and b; an operand that is
// itself a transpose is read through, its flag 0; the Transposes swap the
// last two dims). A linear layer exported as MatMul(x, W^T) makes
// the first two around every weight under autocast (W^T cast to bf16, and its
// gradient's W^T^T); its weight gradient, x^T dy then transposed back and
// widened, makes the third. After the pass the weights' transposes are GEMM
// flags (the GPU's; the CPU runs them, on the weights) and the weight gradient
// is one Gemm of dy^T and x: no transpose is left around a linear layer.
//
// Requires: inferred shapes. Ensures: the same values (casts and transposes
// commute exactly; a product of transposed operands sums the same terms).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

/// Returns the number of rewrites through `count`.
Error foldTransposes(Graph& g, int* count = nullptr);

} // namespace sgc::ir
