// Lowering of every other op the code generator supports into kernels (one
// or more per node): data movement, matrix products, row-wise ops (softmax,
// normalization, losses and their gradients), fused attention, convolution
// and pooling, optimizer updates. Kernels whose body is not one parallel loop run as a
// single serial call.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <optional>
#include <vector>

namespace sgc::kir {

/// The kernels of one node; `name` prefixes their names. Errors name the
/// node and what is not generated yet.
Expected<std::vector<Kernel>> lowerNode(const std::string& name, const ir::Node& n);

/// A MatMul or Gemm followed by elementwise nodes applied to its result
/// (group[0] is the product), as one kernel.
Expected<std::vector<Kernel>> lowerProductGroup(const std::string& name, const std::vector<const ir::Node*>& group);

/// A matrix product as a strided batch of row-major GEMMs, the form a GEMM
/// library (cuBLASLt) takes: for each b < batch,
///   y[b] (m x n) = op(a[b]) (m x k) * op(b[b]) (k x n),
/// with op a transpose when transA/transB, and a[b] at element strideA * b
/// (0: one matrix shared by the batch), b[b] at strideB * b, y[b] at m * n * b.
/// y is the buffer the kernel group writes (its epilogue's result).
struct GemmShape {
  const ir::Value *a, *b, *y;
  int64_t m, n, k, batch, strideA, strideB;
  bool transA, transB;
};

/// The product leading `group` as a GemmShape, when it is one: f32, bf16 or
/// f16 operands whose batch dims are the result's or absent.
std::optional<GemmShape> gemmShape(const std::vector<const ir::Node*>& group);

/// A batch of products sharing b, with a's matrices stacked untransposed, as
/// one product of batch x m rows: a decoder's [tokens, 1, k] by its [k, n]
/// weight is one [tokens, k] x [k, n] GEMM, not `tokens` matrix-vector ones
/// that each read the whole weight.
void foldBatchIntoRows(GemmShape& s);

/// What `group` computes on top of its product (Gemm's alpha and C, the
/// elementwise chain), as a kernel that rewrites the product in y in place,
/// one element per parallel iteration; none when the product is all.
Expected<std::optional<Kernel>> lowerProductEpilogue(const std::string& name, const std::vector<const ir::Node*>& group);

/// What the GPU targets of a program share: `hopper` when every one is sm_90 (kernels may use
/// its warpgroup products, kir::wgmmaBf16), else forms every target since sm_80 runs.
struct GpuArch {
  bool hopper = false;
};

/// The GPU form of a node whose generic kernel gives a GPU too little
/// parallelism (few long reductions; see LowerGpu.cpp); none when the
/// generic kernels suit a GPU too.
Expected<std::optional<std::vector<Kernel>>> lowerForGpu(const std::string& name, const ir::Node& n, GpuArch arch = {});

/// The tensor-core form of FusedAttention and FusedAttentionGrad (LowerAttentionGpu.cpp); none
/// when it does not apply (operands other than bf16, sizes not multiples of 16). On Hopper the
/// forward pass's products are warpgroup ones where the head dims are multiples of 64.
Expected<std::optional<std::vector<Kernel>>> attentionGpu(const std::string& name, const ir::Node& n, GpuArch arch = {});

/// The bf16 elements of the scratch that FusedAttentionGrad `n`'s GPU form on `arch` wants as its
/// fifth result (dS^T for a dq kernel of one product; codegen/AttentionScratch.h), or 0: none.
int64_t attentionScratchElements(const ir::Node& n, GpuArch arch);

/// The GPU form of PagedAttention (LowerPaged.cpp): a warp per token and head, reading 16 bytes
/// a lane; none when it does not apply (a cache other than bf16, a head dim not a multiple of 64,
/// pages not a multiple of 8 tokens).
Expected<std::optional<std::vector<Kernel>>> pagedAttentionGpu(const std::string& name, const ir::Node& n);

/// A row-wise op with the elementwise nodes fused around it on a GPU: `prologue` computes one
/// of its operands (nothing else reads the prologue's values); `epilogue` applies to its result;
/// `storeResult`: nodes outside the group read the row op's result too.
struct RowGroup {
  std::vector<const ir::Node*> prologue;
  const ir::Node* row;
  std::vector<const ir::Node*> epilogue;
  bool storeResult;                ///< whether the row op's result is stored (read outside the group)
  std::vector<bool> storeEpilogue; ///< per epilogue node, whether its result is stored (the last's always)
  bool storePrologue = false;      ///< whether the prologue's result is stored too (read outside the group:
                                   ///< a residual sum that a LayerNormalization's GPU form stores as it reads it)
};

/// Whether `n` is a row-wise op that takes a prologue and an epilogue (softmax, its gradient, the
/// normalizations and theirs), or a prologue only: a sum over leading dims (SumTo: a bias
/// gradient, its GPU form column sums a block per tile).
bool isRowOp(const ir::Node& n);

/// Whether a row op takes an epilogue: not a column sum, whose results are whole only when every
/// block has added its share.
inline bool takesEpilogue(const ir::Node& n) { return n.op != ir::Op::SumTo; }

/// Whether a row op's GPU form may store its prologue's result as it reads it
/// (RowGroup::storePrologue): the normalizations' (LayerNormalization, RmsNorm) and the column
/// sums' (a bias gradient's sum of the GELU gradient, which the products read too).
inline bool storesPrologue(const ir::Node& n) {
  return n.op == ir::Op::LayerNormalization || n.op == ir::Op::RmsNorm || n.op == ir::Op::SumTo;
}

/// The normalizations share their lowerings (CPU and GPU). Whether one subtracts its rows' mean:
/// LayerNormalization and LayerNormGrad do; RmsNorm and RmsNormGrad do not (the mean taken as 0,
/// the "variance" the mean square, no bias).
inline bool centered(const ir::Node& n) { return n.op == ir::Op::LayerNormalization || n.op == ir::Op::LayerNormGrad; }
/// A normalization's result holding each row's 1 / sqrt(variance + epsilon), if asked for:
/// LayerNormalization's third (after the mean), RmsNorm's second.
inline const ir::Value* invStdOut(const ir::Node& n) {
  size_t i = centered(n) ? 2 : 1;
  return n.outputs.size() > i ? n.outputs[i] : nullptr;
}
/// A normalization gradient's saved statistics: LayerNormGrad's (x, scale, dy, mean, invstd),
/// RmsNormGrad's (x, scale, dy, invstd).
inline const ir::Value* meanIn(const ir::Node& n) { return centered(n) ? n.input(3) : nullptr; }
inline const ir::Value* invStdIn(const ir::Node& n) { return n.input(centered(n) ? 4 : 3); }

/// The GPU form of a row group: one kernel, a warp per row; none when the row op has no such
/// form (rows not a multiple of 32 long, another axis).
Expected<std::optional<std::vector<Kernel>>> lowerRowGroupGpu(const std::string& name, const RowGroup& g);

/// Whether a kernel runs as one serial call (its body is not a parallel loop, nor a horizontal block of them).
inline bool isSerial(const Kernel& k) { return !(k.body->kind == StmtKind::Loop && k.body->parallel) && !isHorizontal(k); }

} // namespace sgc::kir
