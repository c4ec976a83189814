// Helpers for writing op lowerings: buffers registered by IR value, index
// arithmetic (coordinates of a flat index, offsets of coordinates) and
// shorthand for kernel IR expressions.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Graph.h"
#include "ir/shapes/Shapes.h"

#include <functional>
#include <map>

namespace sgc::kir {

class Builder {
public:
  explicit Builder(const std::string& name) { k.name = name; }

  Kernel k;

  /// The buffer of an IR value (registered on first use).
  int buf(const ir::Value* v, bool written = false);
  ExprRef ld(const ir::Value* v, ExprRef index) { return load(buf(v), std::move(index), computeType(v->type.dtype)); }
  StmtRef st(const ir::Value* v, ExprRef index, ExprRef value) {
    return store(buf(v, true), std::move(index), cast(std::move(value), computeType(v->type.dtype)));
  }
  StmtRef atomic(const ir::Value* v, ExprRef index, ExprRef value) {
    return atomicAdd(buf(v, true), std::move(index), cast(std::move(value), computeType(v->type.dtype)));
  }
  int newLoopVar() { return k.numLoopVars++; }
  int newLocal() { return k.numLocals++; }

  static ExprRef i(int64_t v) { return constant((double)v, Scalar::I64); }
  static ExprRef add(ExprRef a, ExprRef b) { return binary(KOp::Add, std::move(a), std::move(b)); }
  static ExprRef sub(ExprRef a, ExprRef b) { return binary(KOp::Sub, std::move(a), std::move(b)); }
  static ExprRef mul(ExprRef a, ExprRef b) { return binary(KOp::Mul, std::move(a), std::move(b)); }
  static ExprRef div(ExprRef a, ExprRef b) { return binary(KOp::Div, std::move(a), std::move(b)); }
  static ExprRef c(double v, Scalar t) { return constant(v, t); }

  /// An index clamped to [0, n - 1], so that speculative loads stay inside their buffer.
  static ExprRef clamp(const ExprRef& x, int64_t n) { return binary(KOp::Min, binary(KOp::Max, x, i(0)), i(n - 1)); }
  /// An index into [0, n) for a speculative load, whose value is used only where x is in range:
  /// x there, elsewhere any index in range (KOp::Within; a vector loop picks one that keeps
  /// neighbouring lanes' loads neighbours).
  static ExprRef within(const ExprRef& x, int64_t n) { return binary(KOp::Within, x, i(n)); }

  /// Coordinates of flat index `flat` in `shape` (row-major).
  static std::vector<ExprRef> coords(ExprRef flat, const std::vector<int64_t>& shape);
  /// The flat offset of `coords` in `shape`.
  static ExprRef offset(const std::vector<ExprRef>& coords, const std::vector<int64_t>& shape);

  /// Finishes the kernel with `body` (a parallel loop, or serial statements).
  Kernel finish(StmtRef body) {
    k.body = std::move(body);
    return std::move(k);
  }

private:
  std::map<const ir::Value*, int> ids_;
};

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& shape);

/// A value's shape and element count: static when code is generated (lowerNode checks it).
inline std::vector<int64_t> shapeOf(const ir::Value* v) { return v->type.shape(); }
inline int64_t numel(const ir::Value* v) { return v->type.staticNumel().value(); }

/// The node's `axis` attribute (`def` when absent), counted from the front of a rank-`rank` operand.
inline int64_t axisOf(const ir::Node& n, int64_t rank, int64_t def = 0) {
  int64_t a = n.getInt("axis", def);
  return a < 0 ? a + rank : a;
}

/// Element `at` of index buffer `idx`, as an index into a dim of size d: negative values count
/// from the end; clamped into [0, d - 1] so that loads stay inside their buffer.
ExprRef gatheredIndex(Builder& b, const ir::Value* idx, ExprRef at, int64_t d);

/// The weight of class `cls` in a loss node over C classes: its `weights` element (1 without
/// them), 0 for the node's ignore_index.
ExprRef lossWeight(Builder& b, const ir::Node& n, const ir::Value* weights, int64_t C, ExprRef cls);

/// a[0] + a[1] + ... as a balanced tree: independent partial sums (and rounding that grows with
/// log n rather than n). `a` must not be empty.
ExprRef sumTree(std::vector<ExprRef> a);

/// `count` new locals of `b`, each set to init(e) by a statement appended to `out`.
std::vector<int> locals(Builder& b, int64_t count, std::vector<StmtRef>& out, const std::function<ExprRef(int64_t)>& init);

/// `body` run only where `cond` (an i1) holds: a serial loop of one iteration or none.
StmtRef when(Builder& b, ExprRef cond, std::vector<StmtRef> body);

/// A kernel writing zeros over all of `y` (where partial results then meet by atomic adds).
Kernel zeroKernel(const std::string& name, const ir::Value* y);

/// out[i] = value(coordinates of i in out's shape), one parallel iteration per element (the
/// iteration's loop variable is 0).
Kernel pointwise(const std::string& name, const ir::Value* out,
                 const std::function<ExprRef(Builder&, const std::vector<ExprRef>&)>& value);

/// The rows of a row-wise op along `axis` of `shape`: outer * inner rows of d elements, inner apart.
struct AxisRows {
  int64_t outer = 1, d = 1, inner = 1;
  AxisRows(const std::vector<int64_t>& shape, int64_t axis);
  /// The offset of element k of row `row`.
  ExprRef at(const ExprRef& row, const ExprRef& k) const;
};

/// What a shape rule sees of node `n`'s inputs from `from` on (types, and the values of the
/// constants), after `placeholders` absent ones: the geometry helpers of ir/shapes take it.
ir::InferCtx knownInputs(const ir::Node& n, size_t from = 0, size_t placeholders = 0);

} // namespace sgc::kir
