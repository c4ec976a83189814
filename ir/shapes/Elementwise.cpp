// Shape rules of elementwise ops: same-shape, casts, broadcasting, Where.
#include "ir/shapes/Shapes.h"

namespace sgc::ir {

Error inferSame(InferCtx& c) {
  for (size_t i = 1; i < c.in.size(); ++i) { // Clip's min/max, Trilu's k: scalars
    if (!c.present(i) || !c.in[i].ranked) continue;
    auto n = c.in[i].staticNumel();
    if (c.in[i].rank() > 1 || (n && *n != 1)) return c.fail("input " + std::to_string(i) + " must be a scalar");
  }
  c.setAll(c.in[0]);
  return Error::success();
}

Error inferSameBool(InferCtx& c) {
  c.setAll(c.in[0]);
  c.out[0].dtype = DType::Bool;
  return Error::success();
}

Error inferCast(InferCtx& c) {
  c.out[0] = c.in[0];
  if (c.node.op == Op::CastLike) {
    c.out[0].dtype = c.in[1].dtype;
    return Error::success();
  }
  auto to = dtypeFromName(c.node.getString("to", ""));
  if (!to) return c.fail("attribute 'to' must name a dtype, got '" + c.node.getString("to", "") + "'");
  c.out[0].dtype = *to;
  return Error::success();
}

/// Broadcast of all present inputs; the dtype of the first.
static Error broadcastAll(InferCtx& c, bool sameDType) {
  Type t = Type::ranked_(c.in[0].dtype, {});
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (!c.present(i)) return c.fail("input " + std::to_string(i) + " is absent");
    if (sameDType && c.in[i].dtype != t.dtype)
      return c.fail("input " + std::to_string(i) + " is " + std::string(dtypeName(c.in[i].dtype)) + ", expected " +
                    std::string(dtypeName(t.dtype)) + " like input 0");
    if (!c.in[i].ranked) t.ranked = false;
    if (!t.ranked) continue;
    auto d = broadcastDims(c, t.dims, c.in[i].dims);
    if (!d) return d.takeError();
    t.dims = std::move(*d);
  }
  if (!t.ranked) t.dims.clear();
  c.out[0] = t;
  return Error::success();
}

Error inferBroadcast(InferCtx& c) { return broadcastAll(c, true); }
Error inferBroadcastFirst(InferCtx& c) { return broadcastAll(c, false); }

Error inferBroadcastBool(InferCtx& c) {
  if (Error e = broadcastAll(c, true)) return e;
  c.out[0].dtype = DType::Bool;
  return Error::success();
}

Error inferWhere(InferCtx& c) {
  if (c.in[0].dtype != DType::Bool) return c.fail("condition must be bool");
  if (c.in[1].dtype != c.in[2].dtype) return c.fail("the two branches must have the same dtype");
  if (Error e = broadcastAll(c, false)) return e;
  c.out[0].dtype = c.in[1].dtype;
  return Error::success();
}

} // namespace sgc::ir
