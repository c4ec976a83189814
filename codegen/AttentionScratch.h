// Scratch for the attention gradient's GPU form. On Hopper, at grouped heads of 128 (grouped-
// query attention), the dK/dV kernel stores dS^T (bf16, a 64 x 64 block per pair of key and
// query blocks that see each other) for a dq kernel of one warpgroup product a block pair, so
// that a block pair costs five products rather than seven (the dq kernel would otherwise compute
// S and dP again; kir's scoreScratchElements says where that pays). Those
// bytes are FusedAttentionGrad's optional fifth result: the memory plan gives them a place and a
// lifetime like any result's, and nothing reads them after the node. Their contents are not
// the node's meaning: the interpreter and the CPU's kernels leave them unwritten.
#pragma once
#include "codegen/kir/LowerOps.h"
#include "ir/Graph.h"

namespace sgc::codegen {

/// Gives each FusedAttentionGrad of `g` whose GPU form on `arch` stores dS^T its scratch (a fifth
/// result, bf16 [n]); returns how many it gave one. Run after the passes that build the training
/// step, as the last change to the graph before code generation.
int addAttentionScratch(ir::Graph& g, kir::GpuArch arch);

} // namespace sgc::codegen
