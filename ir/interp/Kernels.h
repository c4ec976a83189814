// Shared declarations and index helpers of the interpreter's kernels.
#pragma once
#include "ir/shapes/Shapes.h"

#include <cstring>
#include <functional>

namespace sgc::ir {

struct EvalCtx {
  const Node& node;
  std::vector<const Tensor*> in; ///< nullptr where absent
  std::vector<Tensor> out;       ///< allocated from the shape rule's static types
  InferCtx* shapes = nullptr;    ///< the shape context (for geometry helpers)

  bool present(size_t i) const { return i < in.size() && in[i]; }
  Error fail(const std::string& msg) const { return makeError(describe(node) + ": " + msg); }
};

std::vector<int64_t> stridesOf(const std::vector<int64_t>& shape);

/// The softmax cross-entropy loss of scores c.in[0] and targets c.in[1] (the node's reduction and
/// ignore_index), weighted by `w` (null: none), into `out`; with `logProb`, each score's log
/// probability there too. SoftmaxCrossEntropyLoss, and SceLossGrad's loss result.
Error sceLoss(EvalCtx& c, const Tensor* w, Tensor& out, Tensor* logProb);

/// Calls fn(index) for every multi-index of `shape` in row-major order.
void forEachIndex(const std::vector<int64_t>& shape, const std::function<void(const std::vector<int64_t>&)>& fn);

/// Offset into a tensor of shape `from` broadcast to the rank of `idx`.
int64_t broadcastOffset(const std::vector<int64_t>& idx, const std::vector<int64_t>& from);

/// For each output element of shape `out`, the offset into input of shape `in` under broadcasting.
std::vector<int64_t> broadcastOffsets(const std::vector<int64_t>& out, const std::vector<int64_t>& in);

inline void copyElement(Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  size_t s = dtypeSize(src.dtype);
  std::memcpy(dst.bytes.data() + di * s, src.bytes.data() + si * s, s);
}

/// Calls fn(offset, k) for each kernel position k of the window at output
/// position `o` (spatial dims) that falls inside the input (spatial sizes
/// `in`); offset is the row-major offset of that input position.
template <typename F>
void forWindow(const Window& w, const std::vector<int64_t>& in, const std::vector<int64_t>& o, F fn) {
  forEachIndex(w.kernel, [&](const std::vector<int64_t>& k) {
    int64_t off = 0;
    for (size_t d = 0; d < in.size(); ++d) {
      int64_t pos = o[d] * w.strides[d] - w.padBegin[d] + k[d] * w.dilations[d];
      if (pos < 0 || pos >= in[d]) return;
      off = off * in[d] + pos;
    }
    fn(off, k);
  });
}

/// AveragePool's divisor with count_include_pad: window positions inside the padded input.
int64_t paddedWindowCount(const Window& w, const std::vector<int64_t>& in, const std::vector<int64_t>& o);

/// d/dx of the unary elementwise op `of` with the attributes of `n` (ir/interp/Elementwise.cpp,
/// beside the op's value); nullptr where it has none.
std::function<double(double)> unaryDerivative(const Node& n, Op of);

/// double -> int64 without undefined behaviour for NaN or out-of-range values.
int64_t toInt(double v);

} // namespace sgc::ir
