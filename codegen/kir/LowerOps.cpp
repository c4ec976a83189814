// Dispatch of node lowerings (see LowerOps.h).
#include "codegen/kir/LowerOps.h"

#include "codegen/kir/Builder.h"
#include "codegen/kir/Lower.h"

namespace sgc::kir {

#define LOWERING(F) Expected<std::vector<Kernel>> F(const std::string& name, const ir::Node& n);
LOWERING(lowerCopy)
LOWERING(lowerPaged)
LOWERING(lowerTranspose)
LOWERING(lowerExpand)
LOWERING(lowerSlice)
LOWERING(lowerConcat)
LOWERING(lowerSplit)
LOWERING(lowerGather)
LOWERING(lowerGatherGrad)
LOWERING(lowerSumTo)
LOWERING(lowerMatMul)
LOWERING(lowerGemm)
LOWERING(lowerSoftmax)
LOWERING(lowerSoftmaxGrad)
LOWERING(lowerLayerNorm)
LOWERING(lowerLayerNormGrad)
LOWERING(lowerLoss)
LOWERING(lowerUnaryGrad)
LOWERING(lowerOptimizer)
LOWERING(lowerConvFamily)
LOWERING(lowerPool)
LOWERING(lowerPoolGrad)
LOWERING(lowerPad)
LOWERING(lowerBatchNorm)
LOWERING(lowerGlobalPool)
LOWERING(lowerDropout)
LOWERING(lowerAttention)
#undef LOWERING

Expected<std::vector<Kernel>> lowerNode(const std::string& name, const ir::Node& n) {
  for (const ir::Value* v : n.inputs)
    if (v && !v->type.isStatic()) return makeError(ir::describe(n) + ": input %" + v->name + " has no static shape");
  for (const ir::Value* v : n.outputs)
    if (v && !v->type.isStatic()) return makeError(ir::describe(n) + ": result %" + v->name + " has no static shape");
  if (isFusibleElementwise(n)) {
    auto k = lowerElementwise(name, {&n});
    if (!k) return k.takeError();
    return std::vector<Kernel>{std::move(*k)};
  }
  using ir::Op;
  switch (n.op) {
  case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceMax: case Op::ReduceMin: case Op::ReduceSumSquare: case Op::ReduceL2: {
    auto k = lowerReduce(name, n);
    if (!k) return k.takeError();
    return std::vector<Kernel>{std::move(*k)};
  }
  case Op::Reshape: case Op::Flatten: case Op::Squeeze: case Op::Unsqueeze: return lowerCopy(name, n);
  case Op::Transpose: return lowerTranspose(name, n);
  case Op::Expand: return lowerExpand(name, n);
  case Op::Slice: return lowerSlice(name, n);
  case Op::Concat: return lowerConcat(name, n);
  case Op::Split: return lowerSplit(name, n);
  case Op::Gather: return lowerGather(name, n);
  case Op::GatherGrad: return lowerGatherGrad(name, n);
  case Op::SumTo: return lowerSumTo(name, n);
  case Op::MatMul: return lowerMatMul(name, n);
  case Op::Gemm: return lowerGemm(name, n);
  case Op::Softmax: case Op::LogSoftmax: return lowerSoftmax(name, n);
  case Op::SoftmaxGrad: return lowerSoftmaxGrad(name, n);
  case Op::LayerNormalization: return lowerLayerNorm(name, n);
  case Op::LayerNormGrad: return lowerLayerNormGrad(name, n);
  case Op::SoftmaxCrossEntropyLoss: case Op::NegativeLogLikelihoodLoss: case Op::SceLossGrad: case Op::NllLossGrad:
    return lowerLoss(name, n);
  case Op::UnaryGrad: return lowerUnaryGrad(name, n);
  case Op::SgdUpdate: case Op::AdamUpdate: return lowerOptimizer(name, n);
  case Op::Conv: case Op::ConvGradInput: case Op::ConvGradWeight: return lowerConvFamily(name, n);
  case Op::MaxPool: case Op::AveragePool: return lowerPool(name, n);
  case Op::PoolGrad: return lowerPoolGrad(name, n);
  case Op::Pad: return lowerPad(name, n);
  case Op::BatchNormalization: case Op::BatchNormGrad: return lowerBatchNorm(name, n);
  case Op::GlobalAveragePool: case Op::GlobalMaxPool: return lowerGlobalPool(name, n);
  case Op::Dropout: return lowerDropout(name, n);
  case Op::FusedAttention: case Op::FusedAttentionGrad: return lowerAttention(name, n);
  case Op::KvCacheWrite: case Op::PagedAttention: return lowerPaged(name, n);
  case Op::AllReduce: { // one rank: each reduced gradient is the gradient itself
    std::vector<Kernel> ks;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Builder b(name + "_" + std::to_string(i));
      int e = b.newLoopVar();
      const ir::Value *in = n.inputs[i], *out = n.outputs[i];
      ks.push_back(b.finish(loop(e, out->type.staticNumel().value(), true, {b.st(out, loopVar(e), b.ld(in, loopVar(e)))})));
    }
    return ks;
  }
  default: return makeError(ir::describe(n) + ": code generation for " + std::string(ir::opName(n.op)) + " is not built yet");
  }
}

} // namespace sgc::kir
