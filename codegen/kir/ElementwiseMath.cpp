// Elementwise formulas and derivatives as kernel IR (see ElementwiseMath.h).
#include "codegen/kir/ElementwiseMath.h"

#include <cmath>

namespace sgc::kir {
namespace {

using ir::Op;

ExprRef one(const ExprRef& x) { return constantLike(x, 1); }
ExprRef zero(const ExprRef& x) { return constantLike(x, 0); }
ExprRef sigmoid(const ExprRef& x) { return 1 / (1 + exp(-x)); }
ExprRef softplus(const ExprRef& x) { return select(gt(x, 30), x, log1p(exp(x))); }
ExprRef sign(const ExprRef& x) { return select(gt(x, 0), one(x), select(lt(x, 0), -one(x), zero(x))); }
ExprRef square(const ExprRef& x) { return x * x; }

const double kSeluAlpha = 1.67326319217681884765625, kSeluGamma = 1.05070102214813232421875;

ExprRef gelu(const ir::Node& n, const ExprRef& x) {
  if (n.getString("approximate", "none") == "tanh")
    return 0.5 * x * (1 + tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + erf(x * M_SQRT1_2));
}

/// Trigonometric and hyperbolic functions from the kernel IR's sin, cos, atan, exp and log.
ExprRef asin(const ExprRef& x) { return atan(x / sqrt(1 - x * x)); }
ExprRef acos(const ExprRef& x) { return 2 * atan(sqrt((1 - x) / (1 + x))); }
ExprRef sinh(const ExprRef& x) { return (expm1(x) - expm1(-x)) * 0.5; }
ExprRef cosh(const ExprRef& x) { return (exp(x) + exp(-x)) * 0.5; }
ExprRef asinh(const ExprRef& x) {
  ExprRef a = abs(x);
  ExprRef r = log1p(a + a * a / (1 + sqrt(1 + a * a)));
  return select(lt(x, 0), -r, r);
}
ExprRef acosh(const ExprRef& x) { return log(x + sqrt(x * x - 1)); }
ExprRef atanh(const ExprRef& x) { return 0.5 * log1p(2 * x / (1 - x)); }

/// Mod: C's remainder with fmod = 1; otherwise the remainder takes the divisor's sign (a zero
/// remainder too, on floats), as numpy's.
ExprRef mod(const ir::Node& n, const ExprRef& a, const ExprRef& b) {
  ExprRef r = binary(KOp::Rem, a, b);
  if (n.getInt("fmod", 0)) return r;
  ExprRef fix = binary(KOp::And, ne(r, zero(r)), binary(KOp::Xor, lt(r, 0), lt(b, 0)));
  r = select(fix, r + b, r);
  if (a->type == Scalar::I64) return r;
  return select(eq(r, 0), select(lt(b, 0), constantLike(r, -0.0), zero(r)), r);
}

ExprRef pow(const ir::Node& n, const ExprRef& a, const ExprRef& b) {
  const ir::Value* e = n.input(1);
  if (e->kind == ir::ValueKind::Const && e->data->numel() == 1 && e->data->getF(0) == 2) return a * a;
  if (a->type == Scalar::I64) return cast(pow(cast(a, Scalar::F64), cast(b, Scalar::F64)), Scalar::I64);
  return pow(a, cast(b, a->type));
}

/// BitShift of integers (loaded zero- or sign-extended into i64): a shift by a negative amount
/// or by the dtype's width or more gives 0, or on the right -1 for a negative signed value.
ExprRef shift(const ir::Node& n, const ExprRef& a, const ExprRef& b) {
  ir::DType t = n.input(0)->type.dtype;
  bool left = n.getString("direction", "") == "LEFT", sign = ir::isSignedInt(t);
  ExprRef s = binary(left ? KOp::Shl : sign ? KOp::AShr : KOp::Shr, a, b);
  ExprRef out = left || !sign ? zero(a) : select(lt(a, 0), constantLike(a, -1), zero(a));
  return select(binary(KOp::And, ge(b, 0), lt(b, 8.0 * (double)ir::dtypeSize(t))), s, out);
}

ExprRef isInf(const ir::Node& n, const ExprRef& x) {
  ExprRef pos = eq(x, INFINITY), neg = eq(x, -INFINITY), no = constant(0, Scalar::I1);
  return binary(KOp::Or, n.getInt("detect_positive", 1) ? pos : no, n.getInt("detect_negative", 1) ? neg : no);
}

/// The value of a one-operand op.
std::optional<ExprRef> unaryValue(const ir::Node& n, const ExprRef& x) {
  double alpha = n.getFloat("alpha", 0);
  switch (n.op) {
  case Op::Identity: return x;
  case Op::Neg: return -x;
  case Op::Abs: return abs(x);
  case Op::Sign: return sign(x);
  case Op::Reciprocal: return 1 / x;
  case Op::Sqrt: return sqrt(x);
  case Op::Exp: return exp(x);
  case Op::Log: return log(x);
  case Op::Erf: return erf(x);
  case Op::Tanh: return tanh(x);
  case Op::Sigmoid: return sigmoid(x);
  case Op::Relu: return max(x, 0);
  case Op::LeakyRelu: return select(ge(x, 0), x, x * n.getFloat("alpha", 0.01));
  case Op::Elu: return select(ge(x, 0), x, n.getFloat("alpha", 1) * expm1(x));
  case Op::Selu: return select(gt(x, 0), n.getFloat("gamma", kSeluGamma) * x,
                               n.getFloat("gamma", kSeluGamma) * n.getFloat("alpha", kSeluAlpha) * expm1(x));
  case Op::Celu: alpha = n.getFloat("alpha", 1); return max(x, 0) + min(alpha * expm1(x / alpha), 0);
  case Op::Gelu: return gelu(n, x);
  case Op::Softplus: return softplus(x);
  case Op::Softsign: return x / (1 + abs(x));
  case Op::HardSigmoid: return max(min(n.getFloat("alpha", 0.2) * x + n.getFloat("beta", 0.5), 1), 0);
  case Op::HardSwish: return x * max(min(x / 6 + 0.5, 1), 0);
  case Op::ThresholdedRelu: return select(gt(x, n.getFloat("alpha", 1)), x, zero(x));
  case Op::Mish: return x * tanh(softplus(x));
  case Op::Floor: return floor(x);
  case Op::Ceil: return ceil(x);
  case Op::Round: return unary(KOp::RoundEven, x);
  case Op::Sin: return sin(x);
  case Op::Cos: return cos(x);
  case Op::Tan: return sin(x) / cos(x);
  case Op::Asin: return asin(x);
  case Op::Acos: return acos(x);
  case Op::Atan: return atan(x);
  case Op::Sinh: return sinh(x);
  case Op::Cosh: return cosh(x);
  case Op::Asinh: return asinh(x);
  case Op::Acosh: return acosh(x);
  case Op::Atanh: return atanh(x);
  case Op::Not: case Op::BitwiseNot: return unary(KOp::Not, x);
  case Op::Swish: return x * sigmoid(n.getFloat("alpha", 1) * x);
  case Op::Shrink: {
    double l = n.getFloat("lambd", 0.5), bias = n.getFloat("bias", 0);
    return select(lt(x, -l), x + bias, select(gt(x, l), x - bias, zero(x)));
  }
  case Op::IsNaN: return x->type == Scalar::I1 || x->type == Scalar::I64 ? constant(0, Scalar::I1) : unary(KOp::IsNan, x);
  case Op::IsInf: return x->type == Scalar::I1 || x->type == Scalar::I64 ? constant(0, Scalar::I1) : isInf(n, x);
  default: return std::nullopt;
  }
}

/// The value of a two-operand op.
std::optional<ExprRef> binaryValue(const ir::Node& n, const ExprRef& a, const ExprRef& b) {
  switch (n.op) {
  case Op::Add: return a + b;
  case Op::Sub: return a - b;
  case Op::Mul: return a * b;
  case Op::Div: return a / b;
  case Op::Pow: return pow(n, a, b);
  case Op::Mod: return mod(n, a, b);
  case Op::PRelu: return select(lt(a, 0), a * b, a);
  case Op::And: case Op::BitwiseAnd: return binary(KOp::And, a, b);
  case Op::BitwiseOr: return binary(KOp::Or, a, b);
  case Op::BitwiseXor: return binary(KOp::Xor, a, b);
  case Op::BitShift: return shift(n, a, b);
  case Op::Or: return binary(KOp::Or, a, b);
  case Op::Xor: return binary(KOp::Xor, a, b);
  case Op::Equal: return eq(a, b);
  case Op::Less: return lt(a, b);
  case Op::LessOrEqual: return le(a, b);
  case Op::Greater: return gt(a, b);
  case Op::GreaterOrEqual: return ge(a, b);
  default: return std::nullopt;
  }
}

/// Min, Max, Sum and Mean of any number of operands.
ExprRef variadicValue(const ir::Node& n, const std::vector<ExprRef>& a) {
  ExprRef r = a[0];
  for (size_t i = 1; i < a.size(); ++i)
    r = n.op == Op::Min ? min(r, a[i]) : n.op == Op::Max ? max(r, a[i]) : r + a[i];
  return n.op == Op::Mean ? r / (double)a.size() : r;
}

} // namespace

Expected<ir::Op> derivativeOf(const ir::Node& n) {
  std::string of = n.getString("of", "");
  auto op = ir::opFromName(of);
  if (!op || ir::opClass(*op) != ir::OpClass::Elementwise) return makeError(ir::describe(n) + ": 'of' names no elementwise op: '" + of + "'");
  return *op;
}

Expected<ExprRef> elementwiseValue(const ir::Node& n, const std::vector<ExprRef>& a) {
  Scalar t = computeType(n.outputs[0]->type.dtype);
  auto fail = [&] { return makeError(ir::describe(n) + ": not an elementwise op the code generator fuses"); };
  switch (n.op) {
  case Op::Cast: case Op::CastLike: return cast(a[0], t);
  case Op::Clip: {
    ExprRef r = a[0];
    if (a.size() > 1 && a[1]) r = max(r, a[1]);
    if (a.size() > 2 && a[2]) r = min(r, a[2]);
    return r;
  }
  case Op::Where: return select(a[0], a[1], a[2]);
  case Op::Min: case Op::Max: case Op::Sum: case Op::Mean: return variadicValue(n, a);
  case Op::UnaryGrad: {
    auto of = derivativeOf(n);
    if (!of) return of.takeError();
    auto d = unaryDerivative(n, *of, a[0]);
    if (!d) return d.takeError();
    return *d * a[1];
  }
  default: break;
  }
  if (a.size() == 1)
    if (auto v = unaryValue(n, a[0])) return *v;
  if (a.size() == 2)
    if (auto v = binaryValue(n, a[0], a[1])) return *v;
  return fail();
}

Expected<ExprRef> unaryDerivative(const ir::Node& n, ir::Op of, ExprRef x) {
  ExprRef o = one(x), z = zero(x);
  double alpha = n.getFloat("alpha", 0);
  switch (of) {
  case Op::Identity: return o;
  case Op::Neg: return -o;
  case Op::Abs: return sign(x);
  case Op::Reciprocal: return -1 / (x * x);
  case Op::Sqrt: return 0.5 / sqrt(x);
  case Op::Exp: return exp(x);
  case Op::Log: return 1 / x;
  case Op::Erf: return 2 / std::sqrt(M_PI) * exp(-(x * x));
  case Op::Tanh: return 1 - square(tanh(x));
  case Op::Sigmoid: return sigmoid(x) * (1 - sigmoid(x));
  case Op::Relu: return select(gt(x, 0), o, z);
  case Op::LeakyRelu: return select(gt(x, 0), o, constantLike(x, n.getFloat("alpha", 0.01)));
  case Op::Elu: return select(gt(x, 0), o, n.getFloat("alpha", 1) * exp(x));
  case Op::Selu: return select(gt(x, 0), constantLike(x, n.getFloat("gamma", kSeluGamma)),
                               n.getFloat("gamma", kSeluGamma) * n.getFloat("alpha", kSeluAlpha) * exp(x));
  case Op::Celu: return select(gt(x, 0), o, exp(x / n.getFloat("alpha", 1)));
  case Op::Gelu:
    if (n.getString("approximate", "none") == "tanh") {
      double k = std::sqrt(2 / M_PI);
      ExprRef th = tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * (k * (1 + 3 * 0.044715 * x * x));
    }
    {
      // d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-u^2) / sqrt(2 pi) with u = x / sqrt(2):
      // the exp(-u^2) that erf(u) computes on the GPU, so that the kernel computes it once.
      ExprRef u = x * M_SQRT1_2;
      return 0.5 * (1 + erf(u)) + x * (1 / std::sqrt(2 * M_PI) * exp(-(u * u)));
    }
  case Op::Softplus: return sigmoid(x);
  case Op::Softsign: return 1 / square(1 + abs(x));
  case Op::HardSigmoid: {
    alpha = n.getFloat("alpha", 0.2);
    ExprRef v = alpha * x + n.getFloat("beta", 0.5);
    return select(binary(KOp::And, gt(v, 0), lt(v, 1)), constantLike(x, alpha), z);
  }
  case Op::HardSwish: return select(lt(x, -3), z, select(gt(x, 3), o, (2 * x + 3) / 6));
  case Op::ThresholdedRelu: return select(gt(x, n.getFloat("alpha", 1)), o, z);
  case Op::Mish: {
    ExprRef t = tanh(softplus(x));
    return t + x * (1 - t * t) * sigmoid(x);
  }
  case Op::Sin: return cos(x);
  case Op::Cos: return -sin(x);
  case Op::Tan: return 1 + square(sin(x) / cos(x));
  case Op::Asin: return 1 / sqrt(1 - x * x);
  case Op::Acos: return -1 / sqrt(1 - x * x);
  case Op::Atan: return 1 / (1 + x * x);
  case Op::Sinh: return cosh(x);
  case Op::Cosh: return sinh(x);
  case Op::Asinh: return 1 / sqrt(x * x + 1);
  case Op::Acosh: return 1 / sqrt(x * x - 1);
  case Op::Atanh: return 1 / (1 - x * x);
  case Op::Swish: {
    double a = n.getFloat("alpha", 1);
    ExprRef s = sigmoid(a * x);
    return s + a * x * s * (1 - s);
  }
  case Op::Shrink: {
    double l = n.getFloat("lambd", 0.5);
    return select(binary(KOp::Or, lt(x, -l), gt(x, l)), o, z);
  }
  default: return makeError(ir::describe(n) + ": " + std::string(ir::opName(of)) + " has no derivative");
  }
}

} // namespace sgc::kir
