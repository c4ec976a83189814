// Shape rules of the IR-only gradient and optimizer ops.
#include "ir/shapes/Shapes.h"

namespace sgc::ir {

/// A result of dtype `t` whose shape is the value of input `i` (a shape tensor).
static Type shapeFromInput(const InferCtx& c, size_t i, DType t) {
  if (auto s = c.ints(i)) return Type::of(t, *s);
  const Type& st = c.in[i];
  if (st.ranked && st.rank() == 1 && st.dims[0].isStatic() && st.dims[0].value <= kMaxRank)
    return Type::ranked_(t, std::vector<Dim>(st.dims[0].value, Dim::unknown()));
  return Type::unranked(t);
}

Error inferSumTo(InferCtx& c) {
  DType t = c.in[0].dtype;
  if (c.node.attrs.count("to")) { // a wider type to accumulate and round in (passes/WidenSums)
    auto to = dtypeFromName(c.node.getString("to", ""));
    if (!to || !isFloat(*to) || !isFloat(t)) return c.fail("attribute 'to' must name a floating-point dtype for a floating-point sum");
    t = *to;
  }
  c.out[0] = shapeFromInput(c, 1, t);
  if (c.out[0].isStatic() && c.in[0].isStatic()) {
    auto b = broadcastDims(c, c.out[0].dims, c.in[0].dims);
    if (!b) return b.takeError();
    if (*b != c.in[0].dims) return c.fail(toString(c.in[0]) + " does not broadcast from " + toString(c.out[0]));
  }
  return Error::success();
}

Error inferUnaryGrad(InferCtx& c) {
  c.out[0] = c.in[1];
  return Error::success();
}

Error inferLayerNormGrad(InferCtx& c) {
  c.out = {c.in[0], c.in[1], c.in[1]};
  return Error::success();
}

Error inferRmsNormGrad(InferCtx& c) {
  c.out = {c.in[0], c.in[1]};
  return Error::success();
}

Error inferBatchNormGrad(InferCtx& c) {
  if (c.in[0].ranked && c.in[0].rank() < 2) return c.fail("input must be [N, C, ...]");
  c.out = {c.in[0], c.in[1], c.in[1]};
  return Error::success();
}

Error inferLossGrad(InferCtx& c) {
  c.out[0] = c.in[0];
  if (c.out.size() > 1) { // SceLossGrad's loss: as SoftmaxCrossEntropyLoss gives it
    const Type& target = c.in[1];
    DType t = c.in[0].dtype;
    if (c.node.attrs.count("to")) {
      auto to = dtypeFromName(c.node.getString("to", ""));
      if (!to || !isFloat(*to)) return c.fail("attribute 'to' must name a floating-point dtype");
      t = *to;
    }
    c.out[1] = c.node.getString("reduction", "mean") == "none" ? Type{t, target.ranked, target.dims} : Type::ranked_(t, {});
  }
  return Error::success();
}

Error inferScatterGrad(InferCtx& c) {
  size_t shapeInput = c.node.op == Op::SliceGrad || c.node.op == Op::ResizeGrad ? 1 : 2;
  c.out[0] = shapeFromInput(c, shapeInput, c.in[0].dtype);
  if (c.out[0].ranked && c.out[0].rank() < 3 && (c.node.op == Op::ConvGradInput || c.node.op == Op::ConvGradWeight))
    return c.fail("the convolution shape must be [N, C, spatial...]");
  return Error::success();
}

Error inferPoolGrad(InferCtx& c) {
  c.out[0] = c.in[0];
  std::string mode = c.node.getString("mode", "");
  if (mode != "max" && mode != "avg") return c.fail("mode must be \"max\" or \"avg\"");
  return Error::success();
}

Error inferOptimizerUpdate(InferCtx& c) {
  // Tensors shaped like the parameter: SgdUpdate (p, g, -, -, buf?), AdamUpdate (p, g, m, v).
  std::vector<size_t> like = c.node.op == Op::SgdUpdate ? std::vector<size_t>{1, 4} : std::vector<size_t>{1, 2, 3};
  for (size_t i : like)
    if (c.present(i) && c.in[i].ranked && c.in[0].ranked && c.in[i].dims != c.in[0].dims)
      return c.fail("input " + std::to_string(i) + " must have the parameter's shape " + toString(c.in[0]));
  size_t apply = c.node.op == Op::SgdUpdate ? 5 : 6;
  if (c.present(apply) && (c.in[apply].dtype != DType::Bool || (c.in[apply].ranked && c.in[apply].rank() != 0)))
    return c.fail("the apply input must be a bool scalar");
  c.setAll(c.in[0]);
  if (c.node.op == Op::AdamUpdate && c.out.size() > 3) c.out[3].dtype = DType::BF16; // the parameter's bf16 copy
  return Error::success();
}

Error inferCollective(InferCtx& c) {
  if (c.out.size() != c.in.size()) return c.fail("one result per input");
  c.out = c.in;
  return Error::success();
}

/// The `world` attribute of a ZeRO-1 collective, and its 1-D input's length.
static Expected<std::pair<int64_t, std::optional<int64_t>>> worldAndLength(InferCtx& c) {
  int64_t world = c.node.getInt("world", 0);
  if (world < 1) return c.fail("needs a world size (attribute world >= 1)");
  if (c.in[0].ranked && c.in[0].rank() != 1) return c.fail("takes a flat (1-D) tensor, not " + toString(c.in[0]));
  return std::make_pair(world, c.in[0].staticNumel());
}

Error inferShardOfRanks(InferCtx& c) {
  auto wl = worldAndLength(c);
  if (!wl) return wl.takeError();
  auto [world, n] = *wl;
  if (n && *n % world) return c.fail("length " + std::to_string(*n) + " does not split into " + std::to_string(world) + " shards");
  c.out[0] = n ? Type::of(c.in[0].dtype, {*n / world}) : Type::ranked_(c.in[0].dtype, {Dim::unknown()});
  return Error::success();
}

Error inferGatherOfRanks(InferCtx& c) {
  auto wl = worldAndLength(c);
  if (!wl) return wl.takeError();
  auto [world, n] = *wl;
  c.out[0] = n ? Type::of(c.in[0].dtype, {*n * world}) : Type::ranked_(c.in[0].dtype, {Dim::unknown()});
  return Error::success();
}

/// ONNX's preview optimizers: inputs (R, T, then `groups` lists of n tensors),
/// outputs (groups - 1) lists: the new X and the new state tensors.
Error inferPreviewOptimizer(InferCtx& c) {
  int groups = c.node.op == Op::Adam ? 4 : 3;
  int64_t rest = (int64_t)c.in.size() - 2;
  if (rest <= 0 || rest % groups) return c.fail("expected R, T and " + std::to_string(groups) + " lists of tensors of one length");
  int64_t n = rest / groups;
  if ((int64_t)c.out.size() != n * (groups - 1)) return c.fail("expected " + std::to_string(n * (groups - 1)) + " outputs");
  for (int64_t i = 0; i < n; ++i) {
    c.out[i] = c.in[2 + i]; // new X
    for (int k = 2; k < groups; ++k) c.out[(k - 1) * n + i] = c.in[2 + k * n + i];
  }
  return Error::success();
}

} // namespace sgc::ir
