// ONNX ops that sgc's IR holds as compositions of its own ops, built at
// import as their ONNX definitions write them (most are ONNX functions):
// RMSNormalization and RotaryEmbedding (opset 23), Attention (Attention.cpp).
// Such an op needs no shape rule, interpreter kernel, gradient or lowering of
// its own: its parts have them.
#include "frontend/onnx/Build.h"

#include <cmath>

namespace sgc::onnx_import {
namespace {

using ir::Op;

/// RMSNormalization(X, scale) {axis, epsilon, stash_type}: X / sqrt(mean(X^2) + epsilon) over
/// the dims from axis on, computed in the stash type, cast back, times scale.
Error rmsNormalization(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  Build b{c, name};
  auto x = inputOf(c, n, 0), scale = inputOf(c, n, 1);
  if (!x) return x.takeError();
  if (!scale) return scale.takeError();
  if (!*x || !*scale) return c.fail("X and scale are required");
  auto xs = b.dims(*x); // the rank alone: batch and sequence may be symbolic
  if (!xs) return xs.takeError();
  int64_t r = (int64_t)xs->size(), axis = intAttr(n, "axis", -1);
  if (axis < -r || axis >= r) return c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < r; ++a) axes.push_back(a);
  auto stash = ir::dtypeFromOnnx((int32_t)intAttr(n, "stash_type", 1));
  if (!stash) return c.fail("stash_type names no dtype sgc knows");
  ir::Value* xf = b.op(Op::Cast, {*x}, {{"to", std::string(ir::dtypeName(*stash))}});
  ir::Value* ms = b.op(Op::ReduceMean, {b.op(Op::Mul, {xf, xf}), b.ints(axes)}, {{"keepdims", int64_t(1)}});
  ir::Value* rms = b.op(Op::Sqrt, {b.op(Op::Add, {ms, b.scalarLike(floatAttr(n, "epsilon", 1e-5), xf)})});
  ir::Value* normalized = b.op(Op::CastLike, {b.op(Op::Div, {xf, rms}), *x});
  b.output(n, 0, b.op(Op::Mul, {normalized, *scale}));
  return Error::success();
}

/// RotaryEmbedding(X, cos, sin, position_ids?) {interleaved, rotary_embedding_dim, num_heads}: the
/// first rotary_embedding_dim channels of each head rotated by its position's angles, in halves
/// or interleaved pairs; X as [B, H, S, D] or [B, S, H * D].
Error rotaryEmbedding(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  Build b{c, name};
  auto inputs = inputsOf(c, n, 4);
  if (!inputs) return inputs.takeError();
  std::vector<ir::Value*>& in = *inputs;
  if (!in[0] || !in[1] || !in[2]) return c.fail("X, cos_cache and sin_cache are required");
  auto xs = b.dims(in[0]); // batch and sequence may be symbolic
  if (!xs) return xs.takeError();
  ir::Value* x = in[0];
  if (xs->size() == 4) x = b.op(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  else if (xs->size() == 3 && intAttr(n, "num_heads", 0) > 0) x = b.op(Op::Reshape, {x, b.ints({0, 0, intAttr(n, "num_heads", 0), -1})});
  else return c.fail("X must be [B, H, S, D], or [B, S, H * D] with num_heads");
  auto s = b.dims(x); // [B, S, H, D]
  if (!s) return s.takeError();
  int64_t D = (*s)[3], R = intAttr(n, "rotary_embedding_dim", 0);
  if (D < 0) return c.fail("the head size of X must be static");
  if (R == 0) R = D;
  if (R % 2 || R > D) return c.fail("rotary_embedding_dim must be even and at most the head size");
  auto slice = [&](ir::Value* v, int64_t from, int64_t to, int64_t step) {
    return b.op(Op::Slice, {v, b.ints({from}), b.ints({to}), b.ints({3}), b.ints({step})});
  };
  ir::Value* rot = R == D ? x : slice(x, 0, R, 1);
  ir::Value *cosv = in[1], *sinv = in[2];
  if (in[3]) {
    cosv = b.op(Op::Gather, {cosv, in[3]}, {{"axis", int64_t(0)}});
    sinv = b.op(Op::Gather, {sinv, in[3]}, {{"axis", int64_t(0)}});
  }
  cosv = b.op(Op::Unsqueeze, {cosv, b.ints({2})});
  sinv = b.op(Op::Unsqueeze, {sinv, b.ints({2})});
  bool interleaved = intAttr(n, "interleaved", 0);
  ir::Value* x1 = interleaved ? slice(rot, 0, R, 2) : slice(rot, 0, R / 2, 1);
  ir::Value* x2 = interleaved ? slice(rot, 1, R, 2) : slice(rot, R / 2, R, 1);
  ir::Value* real = b.op(Op::Sub, {b.op(Op::Mul, {cosv, x1}), b.op(Op::Mul, {sinv, x2})});
  ir::Value* imag = b.op(Op::Add, {b.op(Op::Mul, {sinv, x1}), b.op(Op::Mul, {cosv, x2})});
  ir::Value* out;
  if (interleaved) {
    ir::Value* pairs = b.op(Op::Concat, {b.op(Op::Unsqueeze, {real, b.ints({-1})}), b.op(Op::Unsqueeze, {imag, b.ints({-1})})},
                            {{"axis", int64_t(-1)}});
    out = b.op(Op::Reshape, {pairs, b.ints({0, 0, 0, R})});
  } else {
    out = b.op(Op::Concat, {real, imag}, {{"axis", int64_t(-1)}});
  }
  if (R < D) out = b.op(Op::Concat, {out, slice(x, R, D, 1)}, {{"axis", int64_t(-1)}});
  if (xs->size() == 4) out = b.op(Op::Transpose, {out}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  else out = b.op(Op::Reshape, {out, b.ints({0, 0, -1})});
  b.output(n, 0, out);
  return Error::success();
}

/// ConvTranspose(X, W, B?): the gradient of a convolution with respect to its input, which
/// ConvGradInput computes (the weight layout [C_in, C_out / group, k...] is the forward
/// convolution's), over the output shape the attributes give, plus the bias.
Error convTranspose(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  Build b{c, name};
  auto x = inputOf(c, n, 0), w = inputOf(c, n, 1), bias = inputOf(c, n, 2);
  if (!x) return x.takeError();
  if (!w) return w.takeError();
  if (!bias) return bias.takeError();
  if (!*x || !*w) return c.fail("X and W are required");
  auto xs = b.shape(*x), ws = b.shape(*w);
  if (!xs) return xs.takeError();
  if (!ws) return ws.takeError();
  size_t r = xs->size();
  if (r < 3 || ws->size() != r) return c.fail("X and W must be [N, C, spatial...] of one rank");
  size_t sp = r - 2;
  int64_t group = intAttr(n, "group", 1);
  std::vector<int64_t> k(ws->begin() + 2, ws->end());
  k = intsAttr(n, "kernel_shape", k);
  auto strides = intsAttr(n, "strides", std::vector<int64_t>(sp, 1)), dil = intsAttr(n, "dilations", std::vector<int64_t>(sp, 1));
  auto outPad = intsAttr(n, "output_padding", std::vector<int64_t>(sp, 0)), pads = intsAttr(n, "pads", std::vector<int64_t>(2 * sp, 0));
  auto outShape = intsAttr(n, "output_shape", {});
  std::string autoPad = stringAttr(n, "auto_pad", "");
  if (k.size() != sp || strides.size() != sp || dil.size() != sp || outPad.size() != sp || pads.size() != 2 * sp)
    return c.fail("kernel_shape, strides, dilations, output_padding and pads must give every spatial dim");
  if (outShape.size() > sp) outShape.erase(outShape.begin(), outShape.end() - sp); // [N, C, spatial] written whole
  if (!outShape.empty() && outShape.size() != sp) return c.fail("output_shape must give every spatial dim");
  if (outShape.empty() && (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER"))
    for (size_t i = 0; i < sp; ++i) outShape.push_back((*xs)[2 + i] * strides[i]);
  std::vector<int64_t> out{(*xs)[0], (*ws)[1] * group};
  for (size_t i = 0; i < sp; ++i) {
    int64_t full = strides[i] * ((*xs)[2 + i] - 1) + outPad[i] + (k[i] - 1) * dil[i] + 1;
    if (!outShape.empty()) { // the padding that gives the asked size; a larger size gets zeros at the end
      int64_t total = std::max<int64_t>(full - outShape[i], 0);
      pads[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[sp + i] = total - pads[i];
    }
    out.push_back(outShape.empty() ? full - pads[i] - pads[sp + i] : outShape[i]);
    if (out.back() < 1) return c.fail("the output would have no elements along spatial dim " + std::to_string(i));
  }
  ir::Value* y = b.op(ir::Op::ConvGradInput, {*x, *w, b.ints(out)},
                      {{"strides", strides}, {"pads", pads}, {"dilations", dil}, {"group", group}, {"kernel_shape", k}});
  if (*bias) {
    std::vector<int64_t> bshape{out[1]};
    bshape.insert(bshape.end(), sp, 1);
    y = b.op(ir::Op::Add, {y, b.op(ir::Op::Reshape, {*bias, b.ints(bshape)})});
  }
  b.output(n, 0, y);
  return Error::success();
}

using Decomposition = Error (*)(ImportCtx&, const onnx::NodeProto&, const std::string&);

struct Entry {
  const char* op;
  int since;
  Decomposition build;
};

const Entry kDecomposed[] = {
    {"Attention", 23, importAttention},
    {"RMSNormalization", 23, rmsNormalization},
    {"RotaryEmbedding", 23, rotaryEmbedding},
    {"ConvTranspose", 1, convTranspose},
    {"Einsum", 12, importEinsum},
};

const Entry* find(const onnx::NodeProto& n) {
  if (!n.domain().empty() && n.domain() != "ai.onnx") return nullptr;
  for (const Entry& e : kDecomposed)
    if (n.op_type() == e.op) return &e;
  return nullptr;
}

} // namespace

bool isDecomposed(const onnx::NodeProto& n) { return find(n) != nullptr; }

Error importDecomposed(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  const Entry* e = find(n);
  if (c.opset < e->since) return c.fail("op " + n.op_type() + " does not exist in opset " + std::to_string(c.opset));
  for (const auto& o : n.output())
    if (!o.empty() && c.graph.findValue(o)) return c.fail("output '" + o + "' is defined twice");
  return e->build(c, n, name);
}

} // namespace sgc::onnx_import
