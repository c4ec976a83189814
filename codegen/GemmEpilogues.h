// What cuBLASLt's epilogues compute on a GPU in place of kernels:
//
//   bias   a product group that only adds a vector to the product (MatMul then
//          Add, or a Gemm with C): its BIAS epilogue;
//   GELU   a product (with or without that bias) whose result (or a view of
//          it) a tanh-approximated Gelu reads in a later kernel of its own (or
//          followed by views): GELU_AUX(_BIAS) writes the GELU into that
//          kernel's result and the product into the group's own (its aux
//          output, which the backward pass reads); or a product group that
//          ends in that Gelu: GELU(_BIAS);
//
// Not the gradient: cuBLASLt's DGELU epilogue was measured slower than the
// product and the UnaryGrad kernel apart (GPT-2's MLP on the H200: 0.47 ms
// against 0.12 + 0.12 a layer).
//
// cuBLASLt's GELU is the tanh approximation (approximate = "tanh" in the IR),
// computed in f32 on the accumulator before the result is rounded. The GPU
// skips the Gelu kernel when cuBLASLt has an algorithm for the
// epilogue, and runs it after the plain product otherwise; the CPU runs the
// kernels. Decided before the memory plan: a lone Gelu's result is written at
// the product's position (`earlierWrites`).
#pragma once
#include "codegen/kir/LowerOps.h"
#include "ir/Graph.h"

#include <map>
#include <optional>
#include <vector>

namespace sgc::codegen {

/// The bias of a product group that only adds one to the product (MatMul, then Add of it; or a
/// Gemm whose C is it, alpha and beta 1): a vector of the result's columns and dtype; else null.
const ir::Value* gemmBias(const std::vector<const ir::Node*>& group, const kir::GemmShape& s);

struct GemmGelu {
  size_t product;             ///< the product's schedule position
  std::optional<size_t> gelu; ///< that of the lone Gelu; none: the product's group ends in it
  const ir::Value* result;    ///< the Gelu's result
  const ir::Value* input;     ///< cuBLASLt's aux output: the product's result a lone Gelu reads; else null
  const ir::Value* bias;      ///< the bias the GELU's input adds to the product, else null
};

struct GemmGelus {
  std::vector<GemmGelu> fused;
  std::map<const ir::Value*, int> earlierWrites; ///< each result -> its product's position
};

GemmGelus fuseGemmGelus(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule);

} // namespace sgc::codegen
