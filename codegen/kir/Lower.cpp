// The lowering of elementwise groups and reductions (see Lower.h).
#include "codegen/kir/Lower.h"

#include "codegen/kir/Builder.h"
#include "codegen/kir/ElementwiseMath.h"

#include <cmath>
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

struct GroupLowering {
  Builder& b;
  std::map<const ir::Value*, ExprRef> exprs; ///< values computed inside the group
  std::vector<int64_t> outShape;
  ExprRef flat;

  Error fail(const ir::Node& n, const std::string& msg) { return makeError(ir::describe(n) + ": " + msg); }

  Expected<ExprRef> operand(const ir::Node& n, size_t i) {
    const ir::Value* v = n.input(i);
    if (!v) return fail(n, "absent inputs are not fused");
    if (exprs.count(v)) return exprs[v];
    if (!v->type.isStatic()) return fail(n, "input %" + v->name + " has no static shape");
    return b.ld(v, broadcastIndex(flat, outShape, v->type.shape()));
  }

  Expected<ExprRef> expression(const ir::Node& n) {
    std::vector<ExprRef> a;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!n.input(i) || (n.op == Op::CastLike && i == 1)) { // CastLike's second operand gives only a dtype
        a.push_back(nullptr);
        continue;
      }
      auto e = operand(n, i);
      if (!e) return e.takeError();
      a.push_back(*e);
    }
    return elementwiseValue(n, a);
  }
};

} // namespace

bool isFusibleElementwise(const ir::Node& n) {
  if (ir::opClass(n.op) != ir::OpClass::Elementwise) return false;
  if (n.op == Op::UnaryGrad) // f'(x) * dy: elementwise when x and dy have the result's shape
    return n.inputs[0]->type == n.outputs[0]->type && n.inputs[1]->type == n.outputs[0]->type;
  return true;
}

Expected<ExprRef> chainExpression(Builder& b, const std::vector<const ir::Node*>& chain, const ir::Value* seedValue, ExprRef seed,
                                  ExprRef flat) {
  GroupLowering L{b, {}, {}, std::move(flat)};
  const ir::Value* out = chain.back()->outputs[0];
  if (!out->type.isStatic()) return makeError("%" + out->name + " has no static shape");
  L.outShape = out->type.shape();
  if (seedValue) L.exprs[seedValue] = std::move(seed);
  for (const ir::Node* n : chain) {
    if (!isFusibleElementwise(*n)) return L.fail(*n, "not an elementwise op the code generator fuses");
    if (n->outputs[0]->type.shape() != L.outShape) return L.fail(*n, "its result shape differs from the group's");
    auto e = L.expression(*n);
    if (!e) return e.takeError();
    // A narrow float result is rounded as if it were stored: the interpreter rounds every node's result.
    ir::DType dt = n->outputs[0]->type.dtype;
    ExprRef v = cast(*e, computeType(dt));
    if (dt == ir::DType::BF16) v = unary(KOp::RoundBf16, v);
    if (dt == ir::DType::F16) v = unary(KOp::RoundF16, v);
    L.exprs[n->outputs[0]] = v;
  }
  return L.exprs.at(out);
}

Expected<Kernel> lowerElementwise(const std::string& name, const std::vector<const ir::Node*>& group) {
  if (group.empty()) return makeError("an empty elementwise group");
  Builder b(name);
  int i = b.newLoopVar();
  auto e = chainExpression(b, group, nullptr, nullptr, loopVar(i));
  if (!e) return e.takeError();
  const ir::Value* out = group.back()->outputs[0];
  return b.finish(loop(i, out->type.staticNumel().value(), true, {b.st(out, loopVar(i), *e)}));
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
  Scalar t = computeType(x->type.dtype);
  ExprRef v = load(0, binary(KOp::Add, indexOf(loopVar(0), kept), indexOf(loopVar(1), red)), t);
  ExprRef acc = local(0, t);
  KOp combine = KOp::Add;
  double init = 0;
  switch (n.op) {
  case Op::ReduceSum: case Op::ReduceMean: break;
  case Op::ReduceSumSquare: case Op::ReduceL2: v = binary(KOp::Mul, v, v); break;
  case Op::ReduceMax: combine = KOp::Max, init = -INFINITY; break;
  case Op::ReduceMin: combine = KOp::Min, init = INFINITY; break;
  default: return makeError(ir::describe(n) + ": not a reduction the code generator lowers");
  }
  ExprRef result = acc;
  if (n.op == Op::ReduceMean) result = binary(KOp::Div, acc, constant((double)extent, t));
  if (n.op == Op::ReduceL2) result = unary(KOp::Sqrt, acc);
  Kernel k;
  k.name = name;
  k.buffers = {{x->name, x->type.dtype, x->type.staticNumel().value(), false},
               {y->name, y->type.dtype, y->type.staticNumel().value(), true}};
  k.body = loop(0, outer, true,
                {let(0, constant(init, t)), loop(1, extent, false, {set(0, binary(combine, acc, v))}), store(1, loopVar(0), result)});
  k.numLoopVars = 2;
  k.numLocals = 1;
  return k;
}

} // namespace sgc::kir
