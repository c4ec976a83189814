// Shape rules of reductions, normalizations, dropout and losses.
#include "ir/shapes/Shapes.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace sgc::ir {

/// The sorted, normalized reduction axes of a Reduce* node over rank r, or
/// nullopt when they are not known. An empty result with noop means identity.
static Expected<std::optional<std::vector<int64_t>>> reduceAxes(const InferCtx& c, int64_t r) {
  std::vector<int64_t> axes;
  if (c.present(1)) {
    auto v = c.ints(1);
    if (!v) return std::optional<std::vector<int64_t>>();
    axes = *v;
  }
  if (axes.empty() && !c.node.getInt("noop_with_empty_axes", 0))
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  std::set<int64_t> s;
  for (int64_t a : axes) {
    auto n = normalizeAxis(c, a, r);
    if (!n) return n.takeError();
    if (!s.insert(*n).second) return c.fail("axis " + std::to_string(a) + " appears twice");
  }
  return std::optional<std::vector<int64_t>>(std::vector<int64_t>(s.begin(), s.end()));
}

Error inferReduce(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(x.dtype);
  if (!x.ranked) return Error::success();
  bool keep = c.node.getInt("keepdims", 1);
  auto axes = reduceAxes(c, x.rank());
  if (!axes) return axes.takeError();
  if (!*axes) {
    if (keep) c.out[0] = Type::ranked_(x.dtype, std::vector<Dim>(x.rank(), Dim::unknown()));
    return Error::success();
  }
  std::set<int64_t> s((*axes)->begin(), (*axes)->end());
  std::vector<Dim> dims;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (!s.count(i)) dims.push_back(x.dims[i]);
    else if (keep) dims.push_back(Dim::of(1));
  }
  c.out[0] = Type::ranked_(x.dtype, dims);
  return Error::success();
}

Error inferArgReduce(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(DType::I64);
  if (!x.ranked) return Error::success();
  auto axis = normalizeAxis(c, c.node.getInt("axis", 0), x.rank());
  if (!axis) return axis.takeError();
  std::vector<Dim> dims = x.dims;
  if (c.node.getInt("keepdims", 1)) dims[*axis] = Dim::of(1);
  else dims.erase(dims.begin() + *axis);
  c.out[0] = Type::ranked_(DType::I64, dims);
  return Error::success();
}

Error inferSample(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = Type::unranked(DType::I64);
  if (!x.ranked) return Error::success();
  if (x.rank() < 1 || !isFloat(x.dtype)) return c.fail("logits must be a float tensor of rank 1 or more");
  std::vector<Dim> rows(x.dims.begin(), x.dims.end() - 1);
  c.out[0] = Type::ranked_(DType::I64, rows);
  std::optional<int64_t> count = Type::ranked_(x.dtype, rows).staticNumel();
  const char* names[] = {"temperature", "top_k", "top_p", "seed", "counter"};
  for (size_t i = 1; i < 6; ++i) {
    const Type& t = c.in[i];
    bool wantFloat = i == 1 || i == 3;
    if (t.ranked && (wantFloat ? !isFloat(t.dtype) : !isInteger(t.dtype)))
      return c.fail(std::string(names[i - 1]) + " must be " + (wantFloat ? "a float" : "an integer") + " tensor");
    if (count && t.ranked && t.staticNumel() && *t.staticNumel() != *count)
      return c.fail(std::string(names[i - 1]) + " must hold one value per row of the logits (" + std::to_string(*count) + ")");
  }
  return Error::success();
}

Error inferLayerNorm(InferCtx& c) {
  const Type& x = c.in[0];
  c.setAll(x);
  if (!x.ranked) return Error::success();
  auto axis = normalizeAxis(c, c.node.getInt("axis", -1), x.rank());
  if (!axis) return axis.takeError();
  std::vector<Dim> stat(x.dims.begin(), x.dims.begin() + *axis);
  stat.resize(x.rank(), Dim::of(1));
  std::vector<Dim> normDims(x.dims.begin() + *axis, x.dims.end());
  for (size_t i = 1; i < 3; ++i) {
    if (!c.present(i) || !c.in[i].ranked) continue;
    auto b = broadcastDims(c, normDims, c.in[i].dims);
    if (!b) return b.takeError();
    if (*b != normDims) return c.fail(std::string(i == 1 ? "scale" : "bias") + " must broadcast to the normalized dims");
  }
  DType statType = x.dtype == DType::F64 ? DType::F64 : DType::F32;
  for (size_t i = 1; i < c.out.size(); ++i) c.out[i] = Type::ranked_(statType, stat);
  return Error::success();
}

Error inferBatchNorm(InferCtx& c) {
  const Type& x = c.in[0];
  c.out[0] = x;
  if (x.ranked && x.rank() < 2) return c.fail("input must be [N, C, ...]");
  for (size_t i = 1; i < c.out.size(); ++i) c.out[i] = c.in[3];
  return Error::success();
}

/// Input i, when present and ranked, must be a scalar or a one-element vector.
static Error checkScalar(const InferCtx& c, size_t i, const char* what) {
  if (!c.present(i) || !c.in[i].ranked) return Error::success();
  auto n = c.in[i].staticNumel();
  if (c.in[i].rank() > 1 || (n && *n != 1)) return c.fail(std::string(what) + " must be a scalar");
  return Error::success();
}

Error inferDropout(InferCtx& c) {
  if (Error e = checkScalar(c, 1, "ratio")) return e;
  if (Error e = checkScalar(c, 2, "training_mode")) return e;
  if (Error e = checkScalar(c, 3, "step")) return e;
  c.out[0] = c.in[0];
  if (c.out.size() > 1) {
    c.out[1] = c.in[0];
    c.out[1].dtype = DType::Bool;
  }
  return Error::success();
}

/// Loss output: [N, d1, ...] (the target's shape) without reduction, else a scalar.
static Error lossOutput(InferCtx& c) {
  const Type &scores = c.in[0], &target = c.in[1];
  if (!isInteger(target.dtype)) return c.fail("target must be an integer tensor");
  if (scores.ranked && scores.rank() < 2) return c.fail("scores must be [N, C, ...]");
  if (scores.ranked && target.ranked && target.rank() != scores.rank() - 1)
    return c.fail("target rank must be one less than the scores' rank");
  std::string red = c.node.getString("reduction", "mean");
  if (red != "none" && red != "sum" && red != "mean") return c.fail("unknown reduction '" + red + "'");
  c.out[0] = red == "none" ? Type{scores.dtype, target.ranked, target.dims} : Type::ranked_(scores.dtype, {});
  return Error::success();
}

Error inferSceLoss(InferCtx& c) {
  if (Error e = lossOutput(c)) return e;
  if (c.out.size() > 1) c.out[1] = c.in[0];
  if (c.node.attrs.count("to")) { // a wider type to compute and store in (passes/WidenSums)
    auto to = dtypeFromName(c.node.getString("to", ""));
    if (!to || !isFloat(*to) || !isFloat(c.in[0].dtype)) return c.fail("attribute 'to' must name a floating-point dtype");
    for (Type& t : c.out) t.dtype = *to;
  }
  return Error::success();
}

Error inferNllLoss(InferCtx& c) { return lossOutput(c); }

} // namespace sgc::ir
