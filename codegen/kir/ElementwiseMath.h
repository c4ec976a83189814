// The code generator's formula of every elementwise op (class Elementwise in
// ir/Ops.def) and the derivative of every differentiable unary one, as kernel
// IR expressions, written once for the CPU and the GPU. The interpreter keeps
// its own float64 formulas (ir/interp/Elementwise.cpp): it is the reference
// these are tested against, not derived from them.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::kir {

/// The value of elementwise node `n` from its operands' expressions (nullptr for an absent
/// optional operand), in the compute type of its result (not yet rounded to a narrow float).
Expected<ExprRef> elementwiseValue(const ir::Node& n, const std::vector<ExprRef>& operands);

/// f'(x) of the unary op `of`, with the attributes of `n` (a UnaryGrad node, which carries the
/// forward op's attributes).
Expected<ExprRef> unaryDerivative(const ir::Node& n, ir::Op of, ExprRef x);

/// The op a UnaryGrad node differentiates (its `of` attribute).
Expected<ir::Op> derivativeOf(const ir::Node& n);

} // namespace sgc::kir
