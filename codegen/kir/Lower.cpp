// The lowering of elementwise groups and reductions (see Lower.h).
#include "codegen/kir/Lower.h"

#include "codegen/kir/Builder.h"
#include "codegen/kir/ElementwiseMath.h"

#include <cmath>
#include <optional>
#include <map>
#include <set>

namespace sgc::kir {
namespace {

using ir::Op;

std::vector<int64_t> strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

/// The index into a tensor of shape `in` broadcast to `out`, from the flat output index `flat`.
ExprRef broadcastIndex(ExprRef flat, const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  if (in == out) return flat;
  auto so = strides(out), si = strides(in);
  size_t lead = out.size() - in.size();
  ExprRef idx = constant(0, Scalar::I64);
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    ExprRef coord = binary(KOp::IMod, binary(KOp::IDiv, flat, constant((double)so[lead + d], Scalar::I64)),
                           constant((double)out[lead + d], Scalar::I64));
    idx = binary(KOp::Add, idx, binary(KOp::Mul, coord, constant((double)si[d], Scalar::I64)));
  }
  return idx;
}

/// The values of a fused group as expressions: each value the group computes, at each index its
/// readers ask for (memoized by the index expression, so that a value read where the kernel
/// iterates is computed once), and every other value loaded.
struct GroupLowering {
  Builder& b;
  ExprRef flat;                                              ///< the kernel's element
  std::map<const ir::Value*, const ir::Node*> computed;      ///< values the group computes
  std::map<std::pair<const ir::Value*, const Expr*>, std::pair<ExprRef, ExprRef>> memo; ///< (value, index) -> (index, element)
  std::optional<Error> failed;                                ///< the first error

  /// Element `index` (flat, in v's shape) of v.
  ExprRef at(const ir::Value* v, const ExprRef& index) {
    auto key = std::make_pair(v, index.get());
    if (auto it = memo.find(key); it != memo.end()) return it->second.second;
    auto p = computed.find(v);
    ExprRef e = p == computed.end() ? b.ld(v, index) : element(*p->second, index);
    memo[key] = {index, e};
    return e;
  }

  ExprRef fail(const ir::Node& n, const std::string& msg) {
    if (!failed) failed = makeError(ir::describe(n) + ": " + msg);
    return constant(0, Scalar::I64);
  }

  /// Element `index` of n's result.
  ExprRef element(const ir::Node& n, const ExprRef& index) {
    const std::vector<int64_t>& shape = n.outputs[0]->type.shape();
    if (isFusibleMovement(n)) {
      const ir::Value* x = n.input(0);
      if (keepsElementOrder(n)) return at(x, index);
      if (n.op == ir::Op::Expand) return at(x, broadcastIndex(index, shape, x->type.shape()));
      auto e = movedElement(n, Builder::coords(index, shape), [&](size_t k, ExprRef offset) { return at(n.input(k), offset); });
      if (!e) return fail(n, errorText(e.takeError()));
      return *e;
    }
    std::vector<ExprRef> a;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ir::Value* v = n.input(i);
      if (!v || (n.op == Op::CastLike && i == 1)) { // CastLike's second operand gives only a dtype
        a.push_back(nullptr);
        continue;
      }
      if (!v->type.isStatic()) return fail(n, "input %" + v->name + " has no static shape");
      a.push_back(at(v, broadcastIndex(index, shape, v->type.shape())));
    }
    auto e = elementwiseValue(n, a);
    if (!e) return fail(n, errorText(e.takeError()));
    // A narrow float result is rounded as if it were stored: the interpreter rounds every node's result.
    ir::DType dt = n.outputs[0]->type.dtype;
    ExprRef v = cast(*e, computeType(dt));
    if (dt == ir::DType::BF16) v = unary(KOp::RoundBf16, v);
    if (dt == ir::DType::F16) v = unary(KOp::RoundF16, v);
    return v;
  }
};

} // namespace

bool isFusibleElementwise(const ir::Node& n) {
  if (n.op == Op::Expand) return n.input(0) && n.outputs[0]->type.isStatic() && n.input(0)->type.isStatic();
  if (ir::opClass(n.op) != ir::OpClass::Elementwise) return false;
  if (n.op == Op::UnaryGrad) // f'(x) * dy: elementwise when x and dy have the result's shape
    return n.inputs[0]->type == n.outputs[0]->type && n.inputs[1]->type == n.outputs[0]->type;
  return true;
}

Expected<ExprRef> chainExpression(Builder& b, const std::vector<const ir::Node*>& chain, const ir::Value* seedValue, ExprRef seed,
                                  ExprRef flat, std::map<const ir::Value*, ExprRef>* all) {
  GroupLowering L{b, flat, {}, {}, {}};
  const ir::Value* out = chain.back()->outputs[0];
  if (!out->type.isStatic()) return makeError("%" + out->name + " has no static shape");
  for (const ir::Node* n : chain) {
    if (!isFusible(*n)) return makeError(ir::describe(*n) + ": not an elementwise op the code generator fuses");
    if (!n->outputs[0]->type.isStatic()) return makeError(ir::describe(*n) + ": result %" + n->outputs[0]->name + " has no static shape");
    L.computed[n->outputs[0]] = n;
  }
  if (seedValue) L.memo[{seedValue, flat.get()}] = {flat, std::move(seed)};
  ExprRef result = L.at(out, flat);
  if (all) // the values of the kernel's shape, at its element
    for (const ir::Node* n : chain)
      if (n->outputs[0]->type.shape() == out->type.shape()) (*all)[n->outputs[0]] = L.at(n->outputs[0], flat);
  if (L.failed) return std::move(*L.failed);
  return result;
}

Expected<Kernel> lowerElementwise(const std::string& name, const std::vector<const ir::Node*>& group,
                                  const std::set<const ir::Value*>& stored) {
  if (group.empty()) return makeError("an empty elementwise group");
  Builder b(name);
  int i = b.newLoopVar();
  std::map<const ir::Value*, ExprRef> all;
  auto e = chainExpression(b, group, nullptr, nullptr, loopVar(i), &all);
  if (!e) return e.takeError();
  std::vector<StmtRef> stores;
  for (const ir::Node* n : group) {
    const ir::Value* v = n->outputs[0];
    if (n != group.back() && !stored.count(v)) continue;
    if (!all.count(v)) return makeError(ir::describe(*n) + ": a result stored by a fused kernel must have the kernel's shape");
    stores.push_back(b.st(v, loopVar(i), all.at(v)));
  }
  return b.finish(loop(i, group.back()->outputs[0]->type.staticNumel().value(), true, std::move(stores)));
}

Expected<Kernel> lowerReduce(const std::string& name, const ir::Node& n) {
  const ir::Value *x = n.input(0), *y = n.outputs[0];
  if (!x->type.isStatic() || !y->type.isStatic()) return makeError(ir::describe(n) + ": shapes must be static");
  std::vector<int64_t> shape = x->type.shape(), axesIn;
  if (n.input(1)) {
    if (n.input(1)->kind != ir::ValueKind::Const) return makeError(ir::describe(n) + ": axes must be constant");
    axesIn = n.input(1)->data->toI64();
  }
  int64_t r = (int64_t)shape.size();
  std::set<int64_t> axes;
  for (int64_t a : axesIn) axes.insert(a < 0 ? a + r : a);
  if (axes.empty() && !n.getInt("noop_with_empty_axes", 0))
    for (int64_t i = 0; i < r; ++i) axes.insert(i);
  std::vector<int64_t> kept, red;
  for (int64_t i = 0; i < r; ++i) (axes.count(i) ? red : kept).push_back(i);
  auto st = strides(shape);
  // x index = sum over kept dims (coordinates from o) + over reduced dims (from j).
  auto indexOf = [&](ExprRef flat, const std::vector<int64_t>& dims) {
    ExprRef idx = constant(0, Scalar::I64);
    int64_t inner = 1;
    for (size_t q = dims.size(); q-- > 0;) {
      int64_t d = dims[q];
      ExprRef coord = binary(KOp::IMod, binary(KOp::IDiv, flat, constant((double)inner, Scalar::I64)), constant((double)shape[d], Scalar::I64));
      idx = binary(KOp::Add, idx, binary(KOp::Mul, coord, constant((double)st[d], Scalar::I64)));
      inner *= shape[d];
    }
    return idx;
  };
  int64_t outer = 1, extent = 1;
  for (int64_t d : kept) outer *= shape[d];
  for (int64_t d : red) extent *= shape[d];
  // Sums and products of floats accumulate in float64 (exact for the integers' i64 too); a
  // log-sum-exp subtracts the row's maximum first, in a pass of its own.
  Scalar t = computeType(x->type.dtype), a = accumulatorType(t);
  bool integer = t == Scalar::I64;
  auto at = [&](int j) { return binary(KOp::Add, indexOf(loopVar(0), kept), indexOf(loopVar(j), red)); };
  ExprRef v = cast(load(0, at(1), t), a), acc = local(0, a);
  KOp combine = KOp::Add;
  double init = 0;
  bool lse = n.op == Op::ReduceLogSumExp;
  switch (n.op) {
  case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceLogSum: break;
  case Op::ReduceSumSquare: case Op::ReduceL2: v = v * v; break;
  case Op::ReduceL1: v = abs(v); break;
  case Op::ReduceProd: combine = KOp::Mul, init = 1; break;
  case Op::ReduceMax: combine = t == Scalar::I1 ? KOp::Or : KOp::Max, init = -INFINITY; break; // bool: any, all
  case Op::ReduceMin: combine = t == Scalar::I1 ? KOp::And : KOp::Min, init = INFINITY; break;
  case Op::ReduceLogSumExp: v = exp(v - local(1, a)); break;
  default: return makeError(ir::describe(n) + ": not a reduction the code generator lowers");
  }
  ExprRef result = acc;
  if (n.op == Op::ReduceMean) result = acc / (double)extent;
  if (n.op == Op::ReduceL2) result = sqrt(acc);
  if (n.op == Op::ReduceLogSum) result = log(acc);
  if (lse) result = select(eq(local(1, a), -INFINITY), local(1, a), local(1, a) + log(acc)); // all -inf: -inf
  Kernel k;
  k.name = name;
  k.buffers = {{x->name, x->type.dtype, x->type.staticNumel().value(), false},
               {y->name, y->type.dtype, y->type.staticNumel().value(), true}};
  std::vector<StmtRef> body;
  if (lse) body = {let(1, constant(-INFINITY, a)), loop(2, extent, false, {set(1, max(local(1, a), cast(load(0, at(2), t), a)))})};
  ExprRef start = t == Scalar::I1 ? constant(init > 0, a) : constant(init, a);
  if (integer && !std::isfinite(init)) { // the dtype's own extremes: an empty reduction gives them
    ir::DType dt = x->type.dtype;
    int bits = (int)ir::dtypeSize(dt) * 8;
    bool uns = ir::isUnsignedInt(dt) || dt == ir::DType::Bool;
    int64_t lo = uns ? 0 : bits == 64 ? INT64_MIN : -(int64_t(1) << (bits - 1));
    int64_t hi = dt == ir::DType::Bool ? 1 : uns ? (bits == 64 ? -1 : (int64_t)((uint64_t(1) << bits) - 1)) : bits == 64 ? INT64_MAX : (int64_t(1) << (bits - 1)) - 1;
    start = constantI64(init > 0 ? hi : lo);
  }
  body.push_back(let(0, start));
  body.push_back(loop(1, extent, false, {set(0, binary(combine, acc, v))}));
  body.push_back(store(1, loopVar(0), cast(result, computeType(y->type.dtype))));
  k.body = loop(0, outer, true, body);
  k.numLoopVars = 3;
  k.numLocals = 2;
  return k;
}

} // namespace sgc::kir
