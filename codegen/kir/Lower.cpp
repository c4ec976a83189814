// The lowering of elementwise groups and reductions (see Lower.h).
#include "codegen/kir/Lower.h"

#include "codegen/kir/Builder.h"

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
    ExprRef coord = binary("imod", binary("idiv", flat, constant((double)so[lead + d], Scalar::I64)),
                           constant((double)out[lead + d], Scalar::I64));
    idx = binary("add", idx, binary("mul", coord, constant((double)si[d], Scalar::I64)));
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
      if (!n.input(i) && (n.op == Op::Clip)) {
        a.push_back(nullptr);
        continue;
      }
      auto e = operand(n, i);
      if (!e) return e.takeError();
      a.push_back(*e);
    }
    Scalar t = computeType(n.outputs[0]->type.dtype);
    auto c = [&](double v) { return constant(v, a[0]->type); };
    switch (n.op) {
    case Op::Identity: return a[0];
    case Op::Neg: return unary("neg", a[0]);
    case Op::Abs: return unary("abs", a[0]);
    case Op::Exp: return unary("exp", a[0]);
    case Op::Log: return unary("log", a[0]);
    case Op::Sqrt: return unary("sqrt", a[0]);
    case Op::Reciprocal: return binary("div", c(1), a[0]);
    case Op::Tanh: return unary("tanh", a[0]);
    case Op::Erf: return unary("erf", a[0]);
    case Op::Sigmoid: return binary("div", c(1), binary("add", c(1), unary("exp", unary("neg", a[0]))));
    case Op::Relu: return binary("max", a[0], c(0));
    case Op::LeakyRelu: return select(binary("ge", a[0], c(0)), a[0], binary("mul", a[0], c(n.getFloat("alpha", 0.01))));
    case Op::Gelu: {
      ExprRef x = a[0];
      if (n.getString("approximate", "none") == "tanh") {
        ExprRef inner = binary("mul", c(std::sqrt(2 / M_PI)), binary("add", x, binary("mul", c(0.044715), binary("mul", x, binary("mul", x, x)))));
        return binary("mul", binary("mul", c(0.5), x), binary("add", c(1), unary("tanh", inner)));
      }
      return binary("mul", binary("mul", c(0.5), x), binary("add", c(1), unary("erf", binary("mul", x, c(M_SQRT1_2)))));
    }
    case Op::Add: return binary("add", a[0], a[1]);
    case Op::Sub: return binary("sub", a[0], a[1]);
    case Op::Mul: return binary("mul", a[0], a[1]);
    case Op::Div: return binary("div", a[0], a[1]);
    case Op::Pow: {
      const ir::Value* e = n.input(1);
      if (e->kind == ir::ValueKind::Const && e->data->numel() == 1 && e->data->getF(0) == 2) return binary("mul", a[0], a[0]);
      return binary("pow", a[0], cast(a[1], a[0]->type));
    }
    case Op::Min: return binary("min", a[0], a[1]);
    case Op::Max: return binary("max", a[0], a[1]);
    case Op::Equal: return binary("eq", a[0], a[1]);
    case Op::Less: return binary("lt", a[0], a[1]);
    case Op::LessOrEqual: return binary("le", a[0], a[1]);
    case Op::Greater: return binary("gt", a[0], a[1]);
    case Op::GreaterOrEqual: return binary("ge", a[0], a[1]);
    case Op::Where: return select(a[0], a[1], a[2]);
    case Op::UnaryGrad: {
      auto d = unaryDerivative(n, a[0]);
      if (!d) return d.takeError();
      return binary("mul", *d, a[1]);
    }
    case Op::Cast: return cast(a[0], t);
    case Op::Clip: {
      ExprRef r = a[0];
      if (a.size() > 1 && a[1]) r = binary("max", r, a[1]);
      if (a.size() > 2 && a[2]) r = binary("min", r, a[2]);
      return r;
    }
    default: return fail(n, "not an elementwise op the code generator fuses");
    }
  }
};

} // namespace

bool isFusibleElementwise(const ir::Node& n) {
  switch (n.op) {
  case Op::Identity: case Op::Neg: case Op::Abs: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Reciprocal:
  case Op::Tanh: case Op::Erf: case Op::Sigmoid: case Op::Relu: case Op::LeakyRelu: case Op::Gelu: case Op::Add:
  case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Equal: case Op::Less: case Op::LessOrEqual:
  case Op::Greater: case Op::GreaterOrEqual: case Op::Where: case Op::Cast: case Op::Clip:
    return true;
  case Op::Min: case Op::Max: return n.inputs.size() == 2;
  case Op::UnaryGrad: // f'(x) * dy: elementwise when x and dy have the result's shape
    return n.inputs[0]->type == n.outputs[0]->type && n.inputs[1]->type == n.outputs[0]->type;
  default: return false;
  }
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
    if (dt == ir::DType::BF16) v = unary("round_bf16", v);
    if (dt == ir::DType::F16) v = unary("round_f16", v);
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
      ExprRef coord = binary("imod", binary("idiv", flat, constant((double)inner, Scalar::I64)), constant((double)shape[d], Scalar::I64));
      idx = binary("add", idx, binary("mul", coord, constant((double)st[d], Scalar::I64)));
      inner *= shape[d];
    }
    return idx;
  };
  int64_t outer = 1, extent = 1;
  for (int64_t d : kept) outer *= shape[d];
  for (int64_t d : red) extent *= shape[d];
  Scalar t = computeType(x->type.dtype);
  ExprRef v = load(0, binary("add", indexOf(loopVar(0), kept), indexOf(loopVar(1), red)), t);
  ExprRef acc = local(0, t);
  std::string combine = "add";
  double init = 0;
  switch (n.op) {
  case Op::ReduceSum: case Op::ReduceMean: break;
  case Op::ReduceSumSquare: case Op::ReduceL2: v = binary("mul", v, v); break;
  case Op::ReduceMax: combine = "max", init = -INFINITY; break;
  case Op::ReduceMin: combine = "min", init = INFINITY; break;
  default: return makeError(ir::describe(n) + ": not a reduction the code generator lowers");
  }
  ExprRef result = acc;
  if (n.op == Op::ReduceMean) result = binary("div", acc, constant((double)extent, t));
  if (n.op == Op::ReduceL2) result = unary("sqrt", acc);
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
