// Shape rules: for each op, the result types from the input types and the
// values of inputs that are known constants. One rule per row of Ops.def.
// The same rules serve shape inference (symbolic dims, some values unknown)
// and the interpreter (static shapes, every value known), so an op's shape
// semantics live in exactly one place.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <optional>
#include <vector>

namespace sgc::ir {

struct InferCtx {
  const Node& node;
  std::vector<Type> in;              ///< Undefined dtype where an input is absent
  std::vector<const Tensor*> values; ///< known input values, else nullptr
  std::vector<Type> out;             ///< filled by the rule, one per node output

  bool present(size_t i) const { return i < in.size() && in[i].dtype != DType::Undefined; }
  /// An error naming the node.
  Error fail(const std::string& msg) const { return makeError(describe(node) + ": " + msg); }
  /// The values of input i as integers, when it is a known constant.
  std::optional<std::vector<int64_t>> ints(size_t i) const;
  /// Sets every output to `t`.
  void setAll(const Type& t) { out.assign(out.size(), t); }
};

/// The largest rank sgc accepts; rules that take a rank from a value refuse larger ones.
constexpr int64_t kMaxRank = 64;

/// Runs the op's shape rule. Fills ctx.out.
Error inferNode(InferCtx& ctx);

// Helpers shared by rules and interpreter kernels.
Expected<int64_t> normalizeAxis(const InferCtx& c, int64_t axis, int64_t rank);
Expected<std::vector<Dim>> broadcastDims(const InferCtx& c, const std::vector<Dim>& a, const std::vector<Dim>& b);
std::vector<Dim> staticDims(const std::vector<int64_t>& shape);
/// The product of dims [from, to), or an unknown dim when one is not static.
Dim dimProduct(const std::vector<Dim>& dims, int64_t from, int64_t to);

/// Geometry of a convolution or pooling window along each spatial dim.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, padBegin, padEnd, outSize;
};
/// Computes the window from the node's attributes (kernel_shape, strides,
/// dilations, pads, auto_pad, ceil_mode) and static input spatial sizes.
Expected<Window> windowGeometry(const InferCtx& c, const std::vector<int64_t>& inSpatial,
                                const std::vector<int64_t>& kernel);

/// Start, step and count of a Slice along each axis of a static shape.
struct SliceDim {
  int64_t start = 0, step = 1, count = 0;
};
Expected<std::vector<SliceDim>> sliceGeometry(const InferCtx& c, const std::vector<int64_t>& shape);

/// Padding before and after each dim of a Pad node (pads, axes resolved).
struct PadGeometry {
  std::vector<int64_t> begin, end;
};
Expected<PadGeometry> padGeometry(const InferCtx& c, int64_t rank);

/// Resize's sizes: per axis the scale, the output size and the roi (tf_crop_and_resize).
struct ResizeGeometry {
  std::vector<double> scale, roiStart, roiEnd;
  std::vector<int64_t> out;
  /// Whether axis `a` (of input size `in`) is resampled at all: else it is left as it is.
  bool resizes(size_t a, int64_t in) const { return !(scale[a] == 1 && out[a] == in && roiStart[a] == 0 && roiEnd[a] == 1); }
};
Expected<ResizeGeometry> resizeGeometry(const InferCtx& c, const std::vector<int64_t>& in, const Tensor* roi, const Tensor* scales,
                                        const Tensor* sizes);
/// What one output position of a Resize axis reads: input positions (clamped), their weights,
/// and whether it lies outside the input (tf_crop_and_resize: it takes extrapolation_value).
struct ResizeTap {
  std::vector<int64_t> index;
  std::vector<double> weight;
  bool outside = false;
};
/// The taps of every output position of `axis` (input size `in`), by the node's attributes.
Expected<std::vector<ResizeTap>> resizeTaps(const InferCtx& c, const ResizeGeometry& g, int64_t axis, int64_t in);

} // namespace sgc::ir
