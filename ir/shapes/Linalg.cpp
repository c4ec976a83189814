// Shape rules of MatMul, Gemm, fused attention, convolution and pooling.
#include "ir/shapes/Shapes.h"

#include <algorithm>

namespace sgc::ir {

Error inferMatMul(InferCtx& c) {
  const Type &a = c.in[0], &b = c.in[1];
  if (a.dtype != b.dtype) return c.fail("operands have different dtypes");
  if (!a.ranked || !b.ranked) {
    c.out[0] = Type::unranked(a.dtype);
    return Error::success();
  }
  if (a.rank() < 1 || b.rank() < 1) return c.fail("operands must have rank 1 or more");
  std::vector<Dim> da = a.dims, db = b.dims;
  if (da.size() == 1) da.insert(da.begin(), Dim::of(1));
  if (db.size() == 1) db.push_back(Dim::of(1));
  Dim k1 = da.back(), k2 = db[db.size() - 2];
  if (k1.isStatic() && k2.isStatic() && k1.value != k2.value)
    return c.fail("inner dims differ: " + toString(a) + " x " + toString(b));
  auto batch = broadcastDims(c, {da.begin(), da.end() - 2}, {db.begin(), db.end() - 2});
  if (!batch) return batch.takeError();
  std::vector<Dim> out = *batch;
  if (a.rank() > 1) out.push_back(da[da.size() - 2]);
  if (b.rank() > 1) out.push_back(db.back());
  c.out[0] = Type::ranked_(a.dtype, out);
  return Error::success();
}

Error inferGemm(InferCtx& c) {
  const Type &a = c.in[0], &b = c.in[1];
  if (a.dtype != b.dtype) return c.fail("operands have different dtypes");
  if (!a.ranked || !b.ranked) {
    c.out[0] = Type::unranked(a.dtype);
    return Error::success();
  }
  if (a.rank() != 2 || b.rank() != 2) return c.fail("A and B must be matrices");
  bool ta = c.node.getInt("transA", 0), tb = c.node.getInt("transB", 0);
  Dim m = a.dims[ta ? 1 : 0], k1 = a.dims[ta ? 0 : 1], k2 = b.dims[tb ? 1 : 0], n = b.dims[tb ? 0 : 1];
  if (k1.isStatic() && k2.isStatic() && k1.value != k2.value) return c.fail("inner dims differ");
  c.out[0] = Type::ranked_(a.dtype, {m, n});
  if (c.present(2) && c.in[2].ranked) {
    auto bd = broadcastDims(c, c.out[0].dims, c.in[2].dims);
    if (!bd) return bd.takeError();
    if (bd->size() != 2) return c.fail("C must broadcast to [M, N]");
  }
  return Error::success();
}

Expected<Window> windowGeometry(const InferCtx& c, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel) {
  size_t r = in.size();
  Window w;
  w.kernel = kernel;
  w.strides = c.node.getInts("strides", std::vector<int64_t>(r, 1));
  w.dilations = c.node.getInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = c.node.getInts("pads", std::vector<int64_t>(2 * r, 0));
  if (w.kernel.size() != r || w.strides.size() != r || w.dilations.size() != r || pads.size() != 2 * r)
    return c.fail("kernel_shape, strides, dilations and pads must match the " + std::to_string(r) + " spatial dims");
  std::string autoPad = c.node.getString("auto_pad", "NOTSET");
  bool ceil = c.node.getInt("ceil_mode", 0);
  for (size_t i = 0; i < r; ++i) {
    int64_t k = w.kernel[i], s = w.strides[i], d = w.dilations[i];
    if (k < 1 || s < 1 || d < 1 || pads[i] < 0 || pads[i + r] < 0)
      return c.fail("kernel, strides and dilations must be positive and pads non-negative");
    int64_t ext = d * (k - 1) + 1, pb = pads[i], pe = pads[i + r], out;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      out = (in[i] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + ext - in[i]);
      pb = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (autoPad == "VALID") {
      pb = pe = 0;
      out = in[i] >= ext ? (in[i] - ext) / s + 1 : 0;
    } else if (autoPad == "NOTSET") {
      int64_t span = in[i] + pb + pe - ext;
      if (span < 0) return c.fail("the window is larger than the padded input");
      out = (ceil ? (span + s - 1) / s : span / s) + 1;
      if (ceil && (out - 1) * s >= in[i] + pb) --out; // the last window must start inside
    } else {
      return c.fail("unknown auto_pad '" + autoPad + "'");
    }
    w.padBegin.push_back(pb);
    w.padEnd.push_back(pe);
    w.outSize.push_back(out);
  }
  return w;
}

/// Output type [N, channels, spatial...] for a window op over input 0.
static Error windowOutput(InferCtx& c, Dim channels, std::vector<int64_t> kernel) {
  const Type& x = c.in[0];
  c.setAll(Type::unranked(x.dtype));
  if (!x.ranked) return Error::success();
  if (x.rank() < 3) return c.fail("input must be [N, C, spatial...], got " + toString(x));
  std::vector<Dim> dims{x.dims[0], channels};
  std::vector<int64_t> spatial;
  for (int64_t i = 2; i < x.rank(); ++i) spatial.push_back(x.dims[i].value);
  if (kernel.empty()) return c.fail("kernel_shape is required");
  bool known = std::all_of(spatial.begin(), spatial.end(), [](int64_t d) { return d >= 0; });
  if (!known) {
    dims.resize(x.rank(), Dim::unknown());
  } else {
    auto w = windowGeometry(c, spatial, kernel);
    if (!w) return w.takeError();
    for (int64_t o : w->outSize) dims.push_back(Dim::of(o));
  }
  c.setAll(Type::ranked_(x.dtype, dims));
  if (c.out.size() > 1) c.out[1].dtype = DType::I64;
  return Error::success();
}

Error inferConv(InferCtx& c) {
  const Type &x = c.in[0], &w = c.in[1];
  if (!w.ranked || !x.ranked) {
    c.out[0] = Type::unranked(x.dtype);
    return Error::success();
  }
  if (x.rank() < 3) return c.fail("input must be [N, C, spatial...], got " + toString(x));
  if (w.rank() != x.rank()) return c.fail("weight rank must equal input rank");
  if (c.present(2) && c.in[2].ranked && (c.in[2].rank() != 1 || (c.in[2].dims[0].isStatic() && w.dims[0].isStatic() && c.in[2].dims[0].value != w.dims[0].value)))
    return c.fail("bias must be a vector of the " + toString(w.dims[0]) + " output channels");
  int64_t group = c.node.getInt("group", 1);
  if (group < 1) return c.fail("group must be positive");
  if (x.dims[1].isStatic() && w.dims[1].isStatic() && x.dims[1].value != w.dims[1].value * group)
    return c.fail("input channels " + toString(x.dims[1]) + " do not match weight " + toString(w) + " with group " +
                  std::to_string(group));
  std::vector<int64_t> kernel;
  for (int64_t i = 2; i < w.rank(); ++i) kernel.push_back(w.dims[i].isStatic() ? w.dims[i].value : 1);
  if (c.node.has("kernel_shape") && c.node.getInts("kernel_shape") != kernel && w.isStatic())
    return c.fail("kernel_shape differs from the weight's spatial dims");
  if (w.dims[0].isStatic() && w.dims[0].value % group) return c.fail("output channels must divide by group");
  return windowOutput(c, w.dims[0], kernel);
}

Error inferPool(InferCtx& c) {
  Dim ch = c.in[0].ranked && c.in[0].rank() > 1 ? c.in[0].dims[1] : Dim::unknown();
  return windowOutput(c, ch, c.node.getInts("kernel_shape"));
}

Error inferGlobalPool(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = x;
  if (!x.ranked) return Error::success();
  if (x.rank() < 3) return c.fail("input must be [N, C, spatial...]");
  for (int64_t i = 2; i < x.rank(); ++i) c.out[0].dims[i] = Dim::of(1);
  return Error::success();
}

/// Dims a and b must agree where both are static.
static bool compatible(const Dim& a, const Dim& b) { return !a.isStatic() || !b.isStatic() || a.value == b.value; }

/// FusedAttention(x, x, x) {layout = "bt3hd"}: x [..., T, 3, H, D] holds q, k and v at 0, 1, 2
/// of its third-last dim; y [..., T, H, D], lse [..., T, H].
static Error inferPackedAttention(InferCtx& c, const Type& x, DType stat) {
  if (c.node.inputs[1] != c.node.inputs[0] || c.node.inputs[2] != c.node.inputs[0])
    return c.fail("with layout bt3hd the queries, keys and values are one tensor, passed three times");
  if (!x.ranked) {
    c.out = {Type::unranked(x.dtype), Type::unranked(stat)};
    return Error::success();
  }
  size_t r = x.dims.size();
  if (r < 4 || !compatible(x.dims[r - 3], Dim::of(3))) return c.fail("with layout bt3hd the operand must be [..., T, 3, H, D]");
  std::vector<Dim> y(x.dims.begin(), x.dims.end());
  y.erase(y.begin() + (long)(r - 3));
  c.out[0] = Type::ranked_(x.dtype, y);
  y.pop_back();
  c.out[1] = Type::ranked_(stat, y);
  return Error::success();
}

Error inferAttention(InferCtx& c) {
  const Type &q = c.in[0], &k = c.in[1], &v = c.in[2];
  if (q.dtype != k.dtype || q.dtype != v.dtype) return c.fail("queries, keys and values have different dtypes");
  if (!isFloat(q.dtype)) return c.fail("attention needs floating-point operands");
  DType stat = q.dtype == DType::F64 ? DType::F64 : DType::F32;
  if (!q.ranked || !k.ranked || !v.ranked) {
    c.out = {Type::unranked(q.dtype), Type::unranked(stat)};
    return Error::success();
  }
  // layout "bhtd" (default): [..., T, D]; "bthd": [..., T, H, D] (heads after positions);
  // "bt3hd": q, k and v are one tensor [..., T, 3, H, D], the result [..., T, H, D].
  std::string layout = c.node.getString("layout", "bhtd");
  if (layout == "bt3hd") return inferPackedAttention(c, q, stat);
  if (layout != "bhtd" && layout != "bthd") return c.fail("unknown layout '" + layout + "' (expected bhtd, bthd or bt3hd)");
  size_t r = q.dims.size(), t = layout == "bthd" ? 3 : 2;
  if (r < t || k.dims.size() != r || v.dims.size() != r)
    return c.fail(std::string("queries, keys and values must be ") + (t == 3 ? "[..., T, H, D]" : "[..., T, D]") + " of one rank");
  for (size_t d = 0; d + 1 < r; ++d) {
    if (d == r - t) continue;
    if (layout == "bhtd" && d + 3 == r) { // grouped-query attention: k and v heads may each serve several query heads
      if (!compatible(k.dims[d], v.dims[d])) return c.fail("keys and values differ in their heads");
      if (q.dims[d].isStatic() && k.dims[d].isStatic() ? k.dims[d].value <= 0 || q.dims[d].value % k.dims[d].value
                                                         : !compatible(q.dims[d], k.dims[d]))
        return c.fail("the query heads are not a multiple of the key and value heads");
      continue;
    }
    if (!compatible(q.dims[d], k.dims[d]) || !compatible(q.dims[d], v.dims[d])) return c.fail("leading dims differ");
  }
  if (!compatible(q.dims[r - 1], k.dims[r - 1])) return c.fail("queries and keys differ in their last dim");
  if (!compatible(k.dims[r - t], v.dims[r - t])) return c.fail("keys and values differ in length");
  std::vector<Dim> y(q.dims.begin(), q.dims.end() - 1);
  // result_layout "bthd": from [..., H, T, D] operands, the result [..., T, H, Dv] (and the row
  // statistics [..., T, H]), as the head transpose that follows attention in most models.
  if (c.node.has("result_layout")) {
    if (c.node.getString("result_layout", "") != "bthd" || layout != "bhtd" || r < 3)
      return c.fail("result_layout \"bthd\" goes with layout \"bhtd\" operands [..., H, T, D]");
    std::swap(y[r - 3], y[r - 2]);
  }
  c.out[1] = Type::ranked_(stat, y);
  y.push_back(v.dims.back());
  c.out[0] = Type::ranked_(q.dtype, y);
  return Error::success();
}

Error inferAttentionGrad(InferCtx& c) {
  // With layout "bt3hd" the first result is the packed operand's whole gradient; dk and dv are absent.
  if (c.node.getString("layout", "bhtd") == "bt3hd" && (c.node.outputs[1] || c.node.outputs[2]))
    return c.fail("with layout bt3hd the gradient has one result for the packed queries, keys and values (dk and dv absent)");
  c.out = {c.in[0], c.in[1], c.in[2], c.in[4]};
  // The optional scratch (a GPU form's workspace) keeps the type its pass gave it: bf16 [n].
  if (c.node.outputs.size() > 4 && c.node.outputs[4]) {
    const Type& t = c.node.outputs[4]->type;
    if (t.dtype != DType::BF16 || !t.ranked || t.rank() != 1 || !t.dims[0].isStatic())
      return c.fail("the scratch result (the fifth) must be bf16 [n] with n static");
    c.out.push_back(t);
  }
  // Grouped keys and values: their gradients per query head, [..., H, T, D] (the training step sums each group).
  const Type& q = c.in[0];
  if (c.node.getString("layout", "bhtd") == "bhtd" && q.ranked && q.rank() >= 3)
    for (int i = 1; i <= 2; ++i)
      if (c.out[i].ranked && c.out[i].rank() == q.rank()) c.out[i].dims[q.rank() - 3] = q.dims[q.rank() - 3];
  return Error::success();
}

namespace {

/// The paged-cache operands shared by KvCacheWrite and PagedAttention: a token operand x
/// [N, H, 1, D] (keys, values or queries) against the pool [blocks, 2, page, H, D], the block
/// tables i32 [S, max blocks] and the tokens' sequences and positions i32 [N].
Error checkPaged(InferCtx& c, const Type& x, const Type& pool, size_t tables) {
  if (x.dtype != pool.dtype || !isFloat(pool.dtype)) return c.fail("the cache and the tokens' keys, values or queries must share one floating-point dtype");
  for (size_t i = tables; i < tables + 3; ++i)
    if (c.in[i].dtype != DType::I32) return c.fail("block tables, sequences and positions must be i32");
  if (!x.ranked || !pool.ranked || !c.in[tables].ranked || !c.in[tables + 1].ranked || !c.in[tables + 2].ranked) return Error::success();
  if (pool.rank() != 5 || !compatible(pool.dims[1], Dim::of(2))) return c.fail("the cache must be [blocks, 2, page, heads, head dim]");
  if (x.rank() != 4 || !compatible(x.dims[2], Dim::of(1)) || !compatible(x.dims[1], pool.dims[3]) || !compatible(x.dims[3], pool.dims[4]))
    return c.fail("tokens must be [N, heads, 1, head dim] with the cache's heads and head dim");
  if (c.in[tables].rank() != 2) return c.fail("block tables must be [sequences, max blocks]");
  for (size_t i = tables + 1; i < tables + 3; ++i)
    if (c.in[i].rank() != 1 || !compatible(c.in[i].dims[0], x.dims[0])) return c.fail("sequences and positions must be [N], one per token");
  return Error::success();
}

} // namespace

Error inferKvCacheWrite(InferCtx& c) {
  if (c.in[1] != c.in[2]) return c.fail("keys and values differ in dtype or shape");
  if (Error e = checkPaged(c, c.in[1], c.in[0], 3)) return e;
  c.out[0] = c.in[0];
  return Error::success();
}

Error inferPagedAttention(InferCtx& c) {
  if (Error e = checkPaged(c, c.in[0], c.in[1], 2)) return e;
  c.out[0] = c.in[0];
  return Error::success();
}

} // namespace sgc::ir
