// ONNX's Attention (opsets 23 to 25) as IR ops at import, following its
// definition: heads split from 3-D inputs, the past keys and values
// concatenated in front, grouped-query heads repeated, Q and K scaled by
// sqrt(scale), the product softcapped, the mask (boolean, additive, causal
// with its bottom-right offset, sliding windows, padding of an external
// cache) added, the softmax in its precision with fully masked rows giving
// zeros, and the product with V. The decomposition trains and compiles like
// any graph, and fuse-attention can fuse it again.
#include "frontend/onnx/Build.h"

#include <cmath>

namespace sgc::onnx_import {
namespace {

using ir::Op;

/// [B, S, H * D] -> [B, H, S, D].
ir::Value* splitHeads(Build& b, ir::Value* x, int64_t heads) {
  ir::Value* r = b.op(Op::Reshape, {x, b.ints({0, 0, heads, -1})});
  return b.op(Op::Transpose, {r}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
}

/// The keys (or values) [B, Hkv, T, D] repeated for groups of `groups` query heads (B and T may
/// be symbolic).
ir::Value* repeatHeads(Build& b, ir::Value* k, int64_t kvHeads, int64_t dim, int64_t groups) {
  if (groups == 1) return k;
  ir::Value* u = b.op(Op::Unsqueeze, {k, b.ints({2})});
  ir::Value* e = b.op(Op::Expand, {u, b.ints({1, 1, groups, 1, 1})});
  return b.op(Op::Reshape, {e, b.ints({0, kvHeads * groups, -1, dim})});
}

ir::Value* both(Build& b, ir::Value* a, ir::Value* c) { return a ? b.op(Op::And, {a, c}) : c; }

struct Geometry {
  int64_t sq, st, pastLen; ///< sq, st: -1 when symbolic
  ir::Value *q, *k;        ///< whose shapes give sq and st then
};

/// 0, 1, ..., n - 1 as an i64 [n] (n = dim d of v when `n` is -1, computed from its shape).
ir::Value* positions(Build& b, int64_t n, ir::Value* v, int64_t d) {
  if (n >= 0) {
    std::vector<int64_t> iv(n);
    for (int64_t i = 0; i < n; ++i) iv[i] = i;
    return b.c.graph.addConst(b.c.graph.uniqueName(b.name + "/positions"), ir::Tensor::fromI64(ir::DType::I64, {n}, iv));
  }
  ir::Value* length = b.op(Op::Squeeze, {b.dimOf(v, d), b.ints({0})});
  return b.op(Op::Range, {b.int64(0), length, b.int64(1)});
}

/// Which keys each query may see, as a boolean [B|1, 1, Sq, St] (nullptr: all): the causal
/// frontier j <= p and the windows p - left <= j <= p + right at the query's absolute position
/// p = offset + i, and the external cache's padding j < nonpad[b].
ir::Value* allowedKeys(Build& b, const onnx::NodeProto& n, const Geometry& g, ir::Value* nonpad) {
  ir::Value* j = b.op(Op::Unsqueeze, {positions(b, g.st, g.k, 2), b.ints({0})});
  ir::Value* p = b.op(Op::Unsqueeze, {positions(b, g.sq, g.q, 2), b.ints({1})});
  ir::Value* perBatch = nonpad ? b.op(Op::Reshape, {nonpad, b.ints({-1, 1, 1, 1})}) : nullptr;
  if (perBatch) p = b.op(Op::Add, {p, b.op(Op::Sub, {perBatch, g.sq >= 0 ? b.int64(g.sq) : b.dimOf(g.q, 2)})});
  else if (g.pastLen) p = b.op(Op::Add, {p, b.int64(g.pastLen)});
  int64_t left = intAttr(n, "left_window_size", -1), right = intAttr(n, "right_window_size", -1);
  ir::Value* allowed = nullptr;
  if (intAttr(n, "is_causal", 0)) allowed = b.op(Op::LessOrEqual, {j, p});
  if (left >= 0) allowed = both(b, allowed, b.op(Op::GreaterOrEqual, {j, b.op(Op::Sub, {p, b.int64(left)})}));
  if (right >= 0) allowed = both(b, allowed, b.op(Op::LessOrEqual, {j, b.op(Op::Add, {p, b.int64(right)})}));
  if (perBatch) allowed = both(b, allowed, b.op(Op::Less, {j, perBatch}));
  return allowed;
}

/// The additive bias: 0 where allowed, -inf elsewhere, plus a float mask; a mask shorter than
/// the keys is padded with -inf.
Expected<ir::Value*> attentionBias(Build& b, const onnx::NodeProto& n, const Geometry& g, ir::Value* like, ir::Value* mask, ir::Value* nonpad) {
  ir::Value* allowed = allowedKeys(b, n, g, nonpad);
  ir::Value *zero = b.scalarLike(0, like), *ninf = b.scalarLike(-INFINITY, like);
  ir::Value* bias = allowed ? b.op(Op::Where, {allowed, zero, ninf}) : nullptr;
  if (!mask) return bias;
  auto ms = b.dims(mask);
  bool known = ms && !ms->empty() && ms->back() >= 0 && g.st >= 0;
  if (!ms) llvm::consumeError(ms.takeError()); // a rank only known at run time: padded then
  ir::Value* m = mask->type.dtype == ir::DType::Bool ? b.op(Op::Where, {mask, zero, ninf}) : mask;
  if (known && ms->back() < g.st) {
    m = b.op(Op::Pad, {m, b.ints({0, g.st - ms->back()}), ninf, b.ints({-1})});
  } else if (!known && !(ms && ms->empty())) { // padded by what the shapes say at run time (often nothing)
    ir::Value* last = b.op(Op::Gather, {b.op(Op::Shape, {mask}), b.ints({-1})}, {{"axis", int64_t(0)}});
    ir::Value* missing = b.op(Op::Sub, {g.st >= 0 ? b.ints({g.st}) : b.dimOf(g.k, 2), last});
    ir::Value* pads = b.op(Op::Concat, {b.ints({0}), missing}, {{"axis", int64_t(0)}});
    m = b.op(Op::Pad, {m, pads, ninf, b.ints({-1})});
  }
  return bias ? b.op(Op::Add, {bias, m}) : m;
}

} // namespace

Error importAttention(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  Build b{c, name};
  auto inputs = inputsOf(c, n, 7);
  if (!inputs) return inputs.takeError();
  std::vector<ir::Value*>& in = *inputs;
  if (!in[0] || !in[1] || !in[2]) return c.fail("Q, K and V are required");
  if ((in[4] == nullptr) != (in[5] == nullptr)) return c.fail("past_key and past_value go together");
  auto q0 = b.dims(in[0]); // batch and sequence may be symbolic; heads and head sizes may not
  if (!q0) return q0.takeError();
  bool threeD = q0->size() == 3;
  ir::Value *q = in[0], *k = in[1], *v = in[2];
  if (threeD) {
    if (!hasAttr(n, "q_num_heads") || !hasAttr(n, "kv_num_heads")) return c.fail("3-D inputs need q_num_heads and kv_num_heads");
    q = splitHeads(b, q, intAttr(n, "q_num_heads", 1));
    k = splitHeads(b, k, intAttr(n, "kv_num_heads", 1));
    v = splitHeads(b, v, intAttr(n, "kv_num_heads", 1));
  }
  int64_t pastLen = 0;
  if (in[4]) {
    auto ps = b.shape(in[4]);
    if (!ps) return ps.takeError();
    pastLen = (*ps)[2];
    k = b.op(Op::Concat, {in[4], k}, {{"axis", int64_t(2)}});
    v = b.op(Op::Concat, {in[5], v}, {{"axis", int64_t(2)}});
  }
  b.output(n, 1, k);
  b.output(n, 2, v);
  auto qs = b.dims(q), ks = b.dims(k), vs = b.dims(v);
  if (!qs) return qs.takeError();
  if (!ks) return ks.takeError();
  if (!vs) return vs.takeError();
  if (qs->size() != 4 || ks->size() != 4 || vs->size() != 4) return c.fail("Q, K and V must be 3-D or 4-D");
  for (const auto* s : {&*ks, &*vs})
    if ((*s)[1] < 1 || (*s)[3] < 1)
      return c.fail("the head counts and head sizes of K and V must be static, are " + ir::toString(k->type) + " and " + ir::toString(v->type));
  if ((*qs)[1] > 0 && (*qs)[1] % (*ks)[1]) return c.fail("query heads must be a multiple of key heads");
  // Query heads not known yet (a shape computed at run time): the product broadcasts the key
  // heads, which is the repetition when there is one key head or as many as query heads, and a
  // shape error at compile time otherwise.
  int64_t groups = (*qs)[1] > 0 ? (*qs)[1] / (*ks)[1] : 1;
  if ((*qs)[3] < 0) (*qs)[3] = (*ks)[3];
  k = repeatHeads(b, k, (*ks)[1], (*ks)[3], groups);
  v = repeatHeads(b, v, (*vs)[1], (*vs)[3], groups);
  double scale = floatAttr(n, "scale", 1 / std::sqrt((double)qs->back()));
  ir::Value* s = b.scalarLike(std::sqrt(scale), q);
  ir::Value* kt = b.op(Op::Transpose, {b.op(Op::Mul, {k, s})}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  ir::Value* scores = b.op(Op::MatMul, {b.op(Op::Mul, {q, s}), kt});
  int64_t mode = intAttr(n, "qk_matmul_output_mode", 0);
  ir::Value* qk = scores;
  double softcap = floatAttr(n, "softcap", 0);
  if (softcap > 0) {
    ir::Value* cap = b.scalarLike(softcap, q);
    scores = b.op(Op::Mul, {cap, b.op(Op::Tanh, {b.op(Op::Div, {scores, cap})})});
  }
  if (mode == 1) qk = scores;
  auto bias = attentionBias(b, n, Geometry{(*qs)[2], (*ks)[2], pastLen, q, k}, q, in[3], in[6]);
  if (!bias) return bias.takeError();
  if (*bias) scores = b.op(Op::Add, {scores, *bias});
  if (mode == 2) qk = scores;
  if (hasAttr(n, "softmax_precision")) {
    auto t = ir::dtypeFromOnnx((int32_t)intAttr(n, "softmax_precision", 1));
    if (!t) return c.fail("softmax_precision names no dtype sgc knows");
    scores = b.op(Op::Cast, {scores}, {{"to", std::string(ir::dtypeName(*t))}});
  }
  // A row with every key masked gives zeros, not the NaN of a softmax over -inf.
  ir::Value* rowMax = b.op(Op::ReduceMax, {scores, b.ints({-1})}, {{"keepdims", int64_t(1)}});
  ir::Value* dead = b.op(Op::Equal, {rowMax, b.scalarLike(-INFINITY, scores)});
  ir::Value* probs = b.op(Op::Where, {dead, b.scalarLike(0, scores), b.op(Op::Softmax, {scores}, {{"axis", int64_t(-1)}})});
  probs = b.op(Op::CastLike, {probs, q});
  if (mode == 3) qk = probs;
  b.output(n, 3, qk);
  ir::Value* y = b.op(Op::MatMul, {probs, v});
  if (threeD) y = b.op(Op::Reshape, {b.op(Op::Transpose, {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}), b.ints({0, 0, -1})});
  b.output(n, 0, y);
  return Error::success();
}

} // namespace sgc::onnx_import
