// Aten ops of networks (see Aten.def): products, normalizations,
// convolutions and pooling, losses and attention, as IR ops.
#include "frontend/torchscript/Aten.h"

#include <cmath>

namespace sgc::ts_import {
namespace {

using ir::Op;

Expected<ir::Value*> matmul(Call& c, ir::Value* a, ir::Value* b) {
  Val va = tensorVal(a), vb = tensorVal(b);
  ir::DType t = promote({&va, &vb});
  auto x = castTo(c, a, t);
  if (!x) return x.takeError();
  auto y = castTo(c, b, t);
  if (!y) return y.takeError();
  return c.c.op(Op::MatMul, {*x, *y});
}

Expected<ir::Value*> transposeLast(Call& c, ir::Value* x) {
  int64_t r = rankOf(x);
  std::vector<int64_t> perm(r);
  for (int64_t i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[r - 1], perm[r - 2]);
  return c.c.op(Op::Transpose, {x}, {{"perm", perm}});
}

/// ints given as one int or a list of `n` (torch's _pair), for conv and pool arguments.
Expected<std::vector<int64_t>> pairOf(Call& c, size_t i, const std::string& name, size_t n, std::vector<int64_t> def) {
  const Val* v = c.arg(i, name);
  if (!v || v->k == Val::K::None) return def;
  auto r = c.ints(i, name);
  if (!r) return r.takeError();
  if (r->empty()) return def;
  if (r->size() == 1) return std::vector<int64_t>(n, (*r)[0]);
  if (r->size() != n) return c.fail("argument '" + name + "' has " + std::to_string(r->size()) + " numbers, expected " + std::to_string(n));
  return *r;
}

/// pads for the IR (all begins, then all ends) from torch's symmetric padding.
std::vector<int64_t> symmetric(const std::vector<int64_t>& p) {
  std::vector<int64_t> r = p;
  r.insert(r.end(), p.begin(), p.end());
  return r;
}

Expected<Val> conv(Call& c, size_t strideAt, size_t padAt, size_t dilationAt, size_t groupsAt) {
  auto x = c.tensor(0, "input");
  if (!x) return x.takeError();
  auto w = c.tensor(1, "weight");
  if (!w) return w.takeError();
  auto b = c.tensorOr(2, "bias");
  if (!b) return b.takeError();
  size_t n = (size_t)rankOf(*w) - 2;
  auto strides = pairOf(c, strideAt, "stride", n, std::vector<int64_t>(n, 1));
  if (!strides) return strides.takeError();
  auto dil = pairOf(c, dilationAt, "dilation", n, std::vector<int64_t>(n, 1));
  if (!dil) return dil.takeError();
  std::map<std::string, ir::Attr> attrs{{"strides", *strides}, {"dilations", *dil}, {"group", c.integerOr(groupsAt, "groups", 1)}};
  const Val* p = c.arg(padAt, "padding");
  if (p && p->k == Val::K::Str) {
    if (p->s == "same") attrs["auto_pad"] = std::string("SAME_UPPER");
    else if (p->s != "valid") return c.fail("padding '" + p->s + "' is not one torch has");
  } else {
    auto pads = pairOf(c, padAt, "padding", n, std::vector<int64_t>(n, 0));
    if (!pads) return pads.takeError();
    attrs["pads"] = symmetric(*pads);
  }
  std::vector<ir::Value*> ins{*x, *w};
  if (*b) ins.push_back(*b);
  return wrap(c.c.op(Op::Conv, ins, std::move(attrs)));
}

/// A buffer that a training step updates (BatchNorm's running statistics): a parameter the
/// optimizer leaves alone (passes/TrainingStep makes its new value an update).
ir::Value* updatedBuffer(Ctx& c, ir::Value* v) {
  if (v->kind != ir::ValueKind::Const) return v;
  bool pickled = false;
  for (const auto& [py, value] : c.tensors) pickled = pickled || value == v;
  if (!pickled) return v;
  auto& consts = c.graph.consts;
  consts.erase(std::remove(consts.begin(), consts.end(), v), consts.end());
  v->kind = ir::ValueKind::Param;
  c.graph.params.push_back(v);
  return v;
}

/// A 2-d pooling's input and window (kernel_size, stride: the kernel by default, padding).
struct Pool {
  ir::Value* x;
  std::map<std::string, ir::Attr> attrs;
};
Expected<Pool> poolWindow(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto k = pairOf(c, 1, "kernel_size", 2, {});
  if (!k) return k.takeError();
  if (k->size() != 2) return c.fail("takes a kernel size");
  auto s = pairOf(c, 2, "stride", 2, *k);
  if (!s) return s.takeError();
  auto p = pairOf(c, 3, "padding", 2, {0, 0});
  if (!p) return p.takeError();
  return Pool{*x, {{"kernel_shape", *k}, {"strides", *s}, {"pads", symmetric(*p)}}};
}

/// A normalization's input, its normalized_shape and its weight (nullptr: none).
struct Norm {
  ir::Value *x, *weight;
  std::vector<int64_t> shape;
};
Expected<Norm> normArgs(Call& c) {
  auto x = c.tensor(0, "input");
  if (!x) return x.takeError();
  auto shape = c.ints(1, "normalized_shape");
  if (!shape) return shape.takeError();
  auto w = c.tensorOr(2, "weight");
  if (!w) return w.takeError();
  return Norm{*x, *w, *shape};
}

/// (self, target, weight, reduction, ignore_index) -> the loss op over class indices.
Expected<Val> loss(Call& c, Op op) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto target = c.tensor(1, "target");
  if (!target) return target.takeError();
  auto weight = c.tensorOr(2, "weight");
  if (!weight) return weight.takeError();
  int64_t r = c.integerOr(3, "reduction", 1);
  static const char* names[] = {"none", "mean", "sum"};
  if (r < 0 || r > 2) return c.fail("reduction " + std::to_string(r) + " is not one torch has");
  if ((*target)->type.dtype != ir::DType::I64 && (*target)->type.dtype != ir::DType::I32)
    return c.fail("probability targets are not supported: the target must hold class indices");
  std::vector<ir::Value*> ins{*x, *target};
  if (*weight) ins.push_back(*weight);
  return wrap(c.c.op(op, ins, {{"reduction", std::string(names[r])}, {"ignore_index", c.integerOr(4, "ignore_index", -100)}}));
}

} // namespace

Expected<Val> atenLinear(Call& c) {
  auto x = c.tensor(0, "input");
  if (!x) return x.takeError();
  auto w = c.tensor(1, "weight");
  if (!w) return w.takeError();
  auto b = c.tensorOr(2, "bias");
  if (!b) return b.takeError();
  auto wt = rankOf(*w) == 1 ? Expected<ir::Value*>(*w) : transposeLast(c, *w);
  if (!wt) return wt.takeError();
  auto y = matmul(c, *x, *wt);
  if (!y || !*b) return wrap(std::move(y));
  return wrap(c.c.op(Op::Add, {*y, *b}));
}
Expected<Val> atenMatmul(Call& c) {
  auto a = c.tensor(0, "self");
  if (!a) return a.takeError();
  auto b = c.tensor(1, "other");
  if (!b) return b.takeError();
  return wrap(matmul(c, *a, *b));
}
Expected<Val> atenAddmm(Call& c) {
  auto s = c.tensor(0, "self");
  if (!s) return s.takeError();
  auto a = c.tensor(1, "mat1");
  if (!a) return a.takeError();
  auto b = c.tensor(2, "mat2");
  if (!b) return b.takeError();
  double beta = c.realOr(3, "beta", 1), alpha = c.realOr(4, "alpha", 1);
  auto p = matmul(c, *a, *b);
  if (!p) return p.takeError();
  ir::Value *prod = *p, *bias = *s;
  ir::DType t = prod->type.dtype;
  if (alpha != 1) {
    auto m = c.c.op(Op::Mul, {prod, c.c.scalar(alpha, t)});
    if (!m) return m.takeError();
    prod = *m;
  }
  if (beta == 0) return tensorVal(prod);
  if (beta != 1) {
    auto m = c.c.op(Op::Mul, {bias, c.c.scalar(beta, t)});
    if (!m) return m.takeError();
    bias = *m;
  }
  return wrap(c.c.op(Op::Add, {prod, bias}));
}
/// layer_norm's node with `outputs` results (1: y; 3: y, mean, 1 / std with the reduced dims kept);
/// a missing weight is ones.
Expected<std::vector<ir::Value*>> layerNorm(Call& c, int outputs) {
  auto n = normArgs(c);
  if (!n) return n.takeError();
  auto b = c.tensorOr(3, "bias");
  if (!b) return b.takeError();
  int64_t count = 1;
  for (int64_t d : n->shape) count *= d;
  ir::Value* scale = n->weight ? n->weight : c.c.constant(ir::Tensor::fromF64(n->x->type.dtype, n->shape, std::vector<double>(count, 1)), "ones");
  std::vector<ir::Value*> ins{n->x, scale};
  if (*b) ins.push_back(*b);
  return c.c.ops(Op::LayerNormalization, ins, outputs, {{"axis", -(int64_t)n->shape.size()}, {"epsilon", c.realOr(4, "eps", 1e-5)}});
}
Expected<Val> atenLayerNorm(Call& c) {
  auto outs = layerNorm(c, 1);
  if (!outs) return outs.takeError();
  return tensorVal((*outs)[0]);
}
Expected<Val> atenNativeLayerNorm(Call& c) {
  auto outs = layerNorm(c, 3);
  if (!outs) return outs.takeError();
  return Val::list({tensorVal((*outs)[0]), tensorVal((*outs)[1]), tensorVal((*outs)[2])}, true);
}
/// x / sqrt(mean(x^2) + eps) * weight over the normalized dims; eps by default the dtype's epsilon.
Expected<Val> atenRmsNorm(Call& c) {
  auto n = normArgs(c);
  if (!n) return n.takeError();
  ir::Value* x = n->x;
  ir::DType t = x->type.dtype;
  double eps = c.realOr(3, "eps", t == ir::DType::F64 ? 2.220446049250313e-16 : t == ir::DType::F32 ? 1.1920928955078125e-07 : 0.0078125);
  std::vector<int64_t> axes;
  for (size_t i = 0; i < n->shape.size(); ++i) axes.push_back(rankOf(x) - 1 - (int64_t)i);
  auto sq = c.c.op(Op::Mul, {x, x});
  if (!sq) return sq.takeError();
  auto ms = c.c.op(Op::ReduceMean, {*sq, c.c.ints(axes)}, {{"keepdims", int64_t(1)}});
  if (!ms) return ms.takeError();
  auto sum = c.c.op(Op::Add, {*ms, c.c.scalar(eps, t)});
  if (!sum) return sum.takeError();
  auto root = c.c.op(Op::Sqrt, {*sum});
  if (!root) return root.takeError();
  auto inv = c.c.op(Op::Reciprocal, {*root});
  if (!inv) return inv.takeError();
  auto y = c.c.op(Op::Mul, {x, *inv});
  if (!y || !n->weight) return wrap(std::move(y));
  return wrap(c.c.op(Op::Mul, {*y, n->weight}));
}
Expected<Val> atenBatchNorm(Call& c) {
  auto x = c.tensor(0, "input");
  if (!x) return x.takeError();
  auto w = c.tensorOr(1, "weight");
  auto b = w ? c.tensorOr(2, "bias") : Expected<ir::Value*>(w.takeError());
  auto mean = b ? c.tensorOr(3, "running_mean") : Expected<ir::Value*>(b.takeError());
  auto var = mean ? c.tensorOr(4, "running_var") : Expected<ir::Value*>(mean.takeError());
  if (!var) return var.takeError();
  if (!*w || !*b || !*mean || !*var) return c.fail("batch_norm without affine parameters or running statistics is not supported");
  bool training = c.flag(5, "training", false);
  double momentum = c.realOr(6, "momentum", 0.1), eps = c.realOr(7, "eps", 1e-5);
  ir::Value *m = *mean, *v = *var;
  if (training) m = updatedBuffer(c.c, m), v = updatedBuffer(c.c, v);
  // ONNX's momentum weighs the running value: running = running * momentum + batch * (1 - momentum).
  auto outs = c.c.ops(Op::BatchNormalization, {*x, *w, *b, m, v}, training ? 3 : 1,
                      {{"epsilon", eps}, {"momentum", 1 - momentum}, {"training_mode", int64_t(training)}});
  if (!outs) return outs.takeError();
  return tensorVal((*outs)[0]);
}
Expected<Val> atenConvolution(Call& c) {
  if (c.flag(6, "transposed", false)) return c.fail("transposed convolutions are not supported");
  return conv(c, 3, 4, 5, 8);
}
Expected<Val> atenConv(Call& c) { return conv(c, 3, 4, 5, 6); }
Expected<Val> atenMaxPool2d(Call& c) {
  auto w = poolWindow(c);
  if (!w) return w.takeError();
  auto d = pairOf(c, 4, "dilation", 2, {1, 1});
  if (!d) return d.takeError();
  w->attrs["dilations"] = *d;
  w->attrs["ceil_mode"] = int64_t(c.flag(5, "ceil_mode", false));
  return wrap(c.c.op(Op::MaxPool, {w->x}, std::move(w->attrs)));
}
Expected<Val> atenAvgPool2d(Call& c) {
  auto w = poolWindow(c);
  if (!w) return w.takeError();
  const Val* div = c.arg(6, "divisor_override");
  if (div && div->k != Val::K::None) return c.fail("divisor_override is not supported");
  w->attrs["ceil_mode"] = int64_t(c.flag(4, "ceil_mode", false));
  w->attrs["count_include_pad"] = int64_t(c.flag(5, "count_include_pad", true));
  return wrap(c.c.op(Op::AveragePool, {w->x}, std::move(w->attrs)));
}
Expected<Val> atenAdaptiveAvgPool2d(Call& c) {
  auto x = c.tensor(0, "self");
  if (!x) return x.takeError();
  auto out = pairOf(c, 1, "output_size", 2, {});
  if (!out) return out.takeError();
  std::vector<int64_t> s = shapeOf(*x);
  if (out->size() != 2 || s.size() != 4) return c.fail("takes a 4-d input and an output size of 2");
  if ((*out)[0] == 1 && (*out)[1] == 1) return wrap(c.c.op(Op::GlobalAveragePool, {*x}));
  if (s[2] % (*out)[0] || s[3] % (*out)[1]) return c.fail("output size that does not divide the input's is not supported");
  std::vector<int64_t> k{s[2] / (*out)[0], s[3] / (*out)[1]};
  return wrap(c.c.op(Op::AveragePool, {*x}, {{"kernel_shape", k}, {"strides", k}}));
}
Expected<Val> atenCrossEntropy(Call& c) {
  if (c.realOr(5, "label_smoothing", 0) != 0) return c.fail("label_smoothing is not supported");
  return loss(c, Op::SoftmaxCrossEntropyLoss);
}
Expected<Val> atenNllLoss(Call& c) { return loss(c, Op::NegativeLogLikelihoodLoss); }
Expected<Val> atenSdpa(Call& c) {
  auto q = c.tensor(0, "query");
  auto k = q ? c.tensor(1, "key") : Expected<ir::Value*>(q.takeError());
  auto v = k ? c.tensor(2, "value") : Expected<ir::Value*>(k.takeError());
  auto mask = v ? c.tensorOr(3, "attn_mask") : Expected<ir::Value*>(v.takeError());
  if (!mask) return mask.takeError();
  if (c.realOr(4, "dropout_p", 0) != 0) return c.fail("attention dropout is not supported (export with dropout 0)");
  bool causal = c.flag(5, "is_causal", false);
  std::vector<int64_t> qs = shapeOf(*q), ks = shapeOf(*k);
  if (qs.size() < 2 || ks.size() != qs.size()) return c.fail("query and key must have the same rank, at least 2");
  int64_t r = (int64_t)qs.size(), L = qs[r - 2], S = ks[r - 2];
  ir::DType t = (*q)->type.dtype;
  double scale = c.realOr(6, "scale", 1 / std::sqrt((double)qs.back()));
  ir::Value *key = *k, *value = *v;
  if (r == 4 && qs[1] != ks[1]) { // grouped-query heads: each key head serves a group of query heads
    if (!c.flag(7, "enable_gqa", false) || qs[1] % ks[1]) return c.fail("query heads " + std::to_string(qs[1]) + " and key heads " + std::to_string(ks[1]) + " differ (without enable_gqa)");
    int64_t g = qs[1] / ks[1];
    for (ir::Value** x : {&key, &value}) {
      std::vector<int64_t> s = shapeOf(*x);
      auto u = c.c.op(Op::Unsqueeze, {*x, c.c.ints({2})});
      auto e = u ? c.c.op(Op::Expand, {*u, c.c.ints({s[0], s[1], g, s[2], s[3]})}) : Expected<ir::Value*>(u.takeError());
      auto re = e ? c.c.op(Op::Reshape, {*e, c.c.ints({s[0], s[1] * g, s[2], s[3]})}) : Expected<ir::Value*>(e.takeError());
      if (!re) return re.takeError();
      *x = *re;
    }
  }
  ir::Value* root = c.c.scalar(std::sqrt(scale), t);
  auto qScaled = c.c.op(Op::Mul, {*q, root});
  auto kScaled = qScaled ? c.c.op(Op::Mul, {key, root}) : Expected<ir::Value*>(qScaled.takeError());
  auto kt = kScaled ? transposeLast(c, *kScaled) : Expected<ir::Value*>(kScaled.takeError());
  auto scores = kt ? c.c.op(Op::MatMul, {*qScaled, *kt}) : Expected<ir::Value*>(kt.takeError());
  if (!scores) return scores.takeError();
  ir::Value* s = *scores;
  ir::Value *zero = c.c.scalar(0, t), *ninf = c.c.scalar(-INFINITY, t);
  auto addBias = [&](ir::Value* m) -> Error {
    auto bias = m->type.dtype == ir::DType::Bool ? c.c.op(Op::Where, {m, zero, ninf}) : castTo(c, m, t);
    auto sum = bias ? c.c.op(Op::Add, {s, *bias}) : Expected<ir::Value*>(bias.takeError());
    if (!sum) return sum.takeError();
    s = *sum;
    return Error::success();
  };
  if (causal) {
    std::vector<int64_t> allowed(L * S);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) allowed[i * S + j] = j <= i;
    if (Error e = addBias(c.c.constant(ir::Tensor::fromI64(ir::DType::Bool, {L, S}, allowed), "causal"))) return e;
  }
  if (*mask)
    if (Error e = addBias(*mask)) return e;
  auto p = c.c.op(Op::Softmax, {s}, {{"axis", int64_t(-1)}});
  if (!p) return p.takeError();
  return wrap(c.c.op(Op::MatMul, {*p, value}));
}

} // namespace sgc::ts_import
