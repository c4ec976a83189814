// Interpreter kernels of elementwise ops, computed in float64 (floats) or
// int64 (integers and bool).
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {
namespace {

double gelu(double x, bool tanhApprox) {
  if (tanhApprox) return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

double softplus(double x) { return x > 30 ? x : std::log1p(std::exp(x)); }

double roundHalfEven(double x) { return std::nearbyint(x); }

/// The float function of a unary op (attributes read from the node).
std::function<double(double)> unaryFloat(const Node& n) {
  double alpha = n.getFloat("alpha", 0), gamma = n.getFloat("gamma", 0), beta = n.getFloat("beta", 0);
  switch (n.op) {
  case Op::Neg: return [](double x) { return -x; };
  case Op::Abs: return [](double x) { return std::fabs(x); };
  case Op::Sign: return [](double x) { return double((x > 0) - (x < 0)); };
  case Op::Reciprocal: return [](double x) { return 1 / x; };
  case Op::Sqrt: return [](double x) { return std::sqrt(x); };
  case Op::Exp: return [](double x) { return std::exp(x); };
  case Op::Log: return [](double x) { return std::log(x); };
  case Op::Erf: return [](double x) { return std::erf(x); };
  case Op::Tanh: return [](double x) { return std::tanh(x); };
  case Op::Sigmoid: return [](double x) { return 1 / (1 + std::exp(-x)); };
  case Op::Relu: return [](double x) { return x > 0 ? x : 0.0; };
  case Op::LeakyRelu: alpha = n.getFloat("alpha", 0.01); return [=](double x) { return x >= 0 ? x : alpha * x; };
  case Op::Elu: alpha = n.getFloat("alpha", 1); return [=](double x) { return x >= 0 ? x : alpha * (std::exp(x) - 1); };
  case Op::Selu:
    alpha = n.getFloat("alpha", 1.67326319217681884765625);
    gamma = n.getFloat("gamma", 1.05070102214813232421875);
    return [=](double x) { return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha); };
  case Op::Celu: alpha = n.getFloat("alpha", 1); return [=](double x) { return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1)); };
  case Op::Gelu: {
    bool t = n.getString("approximate", "none") == "tanh";
    return [=](double x) { return gelu(x, t); };
  }
  case Op::Softplus: return softplus;
  case Op::Softsign: return [](double x) { return x / (1 + std::fabs(x)); };
  case Op::HardSigmoid:
    alpha = n.getFloat("alpha", 0.2);
    beta = n.getFloat("beta", 0.5);
    return [=](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); };
  case Op::HardSwish: return [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); };
  case Op::ThresholdedRelu: alpha = n.getFloat("alpha", 1); return [=](double x) { return x > alpha ? x : 0.0; };
  case Op::Mish: return [](double x) { return x * std::tanh(softplus(x)); };
  case Op::Floor: return [](double x) { return std::floor(x); };
  case Op::Ceil: return [](double x) { return std::ceil(x); };
  case Op::Round: return roundHalfEven;
  case Op::Sin: return [](double x) { return std::sin(x); };
  case Op::Cos: return [](double x) { return std::cos(x); };
  case Op::Tan: return [](double x) { return std::tan(x); };
  case Op::Asin: return [](double x) { return std::asin(x); };
  case Op::Acos: return [](double x) { return std::acos(x); };
  case Op::Atan: return [](double x) { return std::atan(x); };
  case Op::Sinh: return [](double x) { return std::sinh(x); };
  case Op::Cosh: return [](double x) { return std::cosh(x); };
  case Op::Asinh: return [](double x) { return std::asinh(x); };
  case Op::Acosh: return [](double x) { return std::acosh(x); };
  case Op::Atanh: return [](double x) { return std::atanh(x); };
  case Op::Swish: alpha = n.getFloat("alpha", 1); return [=](double x) { return x / (1 + std::exp(-alpha * x)); };
  case Op::Shrink:
    alpha = n.getFloat("lambd", 0.5), beta = n.getFloat("bias", 0);
    return [=](double x) { return x < -alpha ? x + beta : x > alpha ? x - beta : 0.0; };
  default: return nullptr;
  }
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

} // namespace

/// d/dx of the unary op `of`, with the attributes of `n` (a UnaryGrad node carries the forward
/// op's); nullptr where `of` has no derivative.
std::function<double(double)> unaryDerivative(const Node& n, Op of) {
  double alpha = n.getFloat("alpha", 0), gamma = 0;
  switch (of) {
  case Op::Identity: return [](double) { return 1.0; };
  case Op::Neg: return [](double) { return -1.0; };
  case Op::Abs: return [](double x) { return double((x > 0) - (x < 0)); };
  case Op::Reciprocal: return [](double x) { return -1 / (x * x); };
  case Op::Sqrt: return [](double x) { return 0.5 / std::sqrt(x); };
  case Op::Exp: return [](double x) { return std::exp(x); };
  case Op::Log: return [](double x) { return 1 / x; };
  case Op::Erf: return [](double x) { return 2 / std::sqrt(M_PI) * std::exp(-x * x); };
  case Op::Tanh: return [](double x) { return 1 - std::tanh(x) * std::tanh(x); };
  case Op::Sigmoid: return [](double x) { return sigmoid(x) * (1 - sigmoid(x)); };
  case Op::Relu: return [](double x) { return x > 0 ? 1.0 : 0.0; };
  case Op::LeakyRelu: alpha = n.getFloat("alpha", 0.01); return [=](double x) { return x > 0 ? 1.0 : alpha; };
  case Op::Elu: alpha = n.getFloat("alpha", 1); return [=](double x) { return x > 0 ? 1.0 : alpha * std::exp(x); };
  case Op::Selu:
    alpha = n.getFloat("alpha", 1.67326319217681884765625);
    gamma = n.getFloat("gamma", 1.05070102214813232421875);
    return [=](double x) { return x > 0 ? gamma : gamma * alpha * std::exp(x); };
  case Op::Celu: alpha = n.getFloat("alpha", 1); return [=](double x) { return x > 0 ? 1.0 : std::exp(x / alpha); };
  case Op::Gelu:
    if (n.getString("approximate", "none") == "tanh")
      return [](double x) {
        double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
      };
    return [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  case Op::Softplus: return sigmoid;
  case Op::Softsign: return [](double x) { return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x))); };
  case Op::HardSigmoid:
    alpha = n.getFloat("alpha", 0.2), gamma = n.getFloat("beta", 0.5);
    return [=](double x) {
      double v = alpha * x + gamma;
      return v > 0 && v < 1 ? alpha : 0.0;
    };
  case Op::HardSwish: return [](double x) { return x < -3 ? 0.0 : x > 3 ? 1.0 : (2 * x + 3) / 6; };
  case Op::ThresholdedRelu: alpha = n.getFloat("alpha", 1); return [=](double x) { return x > alpha ? 1.0 : 0.0; };
  case Op::Mish:
    return [](double x) {
      double t = std::tanh(softplus(x));
      return t + x * (1 - t * t) * sigmoid(x);
    };
  case Op::Sin: return [](double x) { return std::cos(x); };
  case Op::Cos: return [](double x) { return -std::sin(x); };
  case Op::Tan: return [](double x) { return 1 + std::tan(x) * std::tan(x); };
  case Op::Asin: return [](double x) { return 1 / std::sqrt(1 - x * x); };
  case Op::Acos: return [](double x) { return -1 / std::sqrt(1 - x * x); };
  case Op::Atan: return [](double x) { return 1 / (1 + x * x); };
  case Op::Sinh: return [](double x) { return std::cosh(x); };
  case Op::Cosh: return [](double x) { return std::sinh(x); };
  case Op::Asinh: return [](double x) { return 1 / std::sqrt(x * x + 1); };
  case Op::Acosh: return [](double x) { return 1 / std::sqrt(x * x - 1); };
  case Op::Atanh: return [](double x) { return 1 / (1 - x * x); };
  case Op::Swish:
    alpha = n.getFloat("alpha", 1);
    return [=](double x) {
      double s = sigmoid(alpha * x);
      return s + alpha * x * s * (1 - s);
    };
  case Op::Shrink: alpha = n.getFloat("lambd", 0.5); return [=](double x) { return x < -alpha || x > alpha ? 1.0 : 0.0; };
  default: return nullptr;
  }
}

namespace {

bool isIntegerSafeUnary(Op op) {
  return op == Op::Neg || op == Op::Abs || op == Op::Sign || op == Op::Relu;
}

} // namespace

Error evalUnary(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  Tensor& y = c.out[0];
  Op op = c.node.op;
  if (op == Op::Identity) {
    y.bytes = x.bytes;
    return Error::success();
  }
  if (op == Op::Not) {
    if (x.dtype != DType::Bool) return c.fail("input must be bool");
    for (int64_t i = 0; i < x.numel(); ++i) y.setI(i, !x.getI(i));
    return Error::success();
  }
  if (op == Op::BitwiseNot) {
    if (!isInteger(x.dtype)) return c.fail("input must be an integer");
    for (int64_t i = 0; i < x.numel(); ++i) y.setI(i, ~x.getI(i));
    return Error::success();
  }
  if (op == Op::IsNaN || op == Op::IsInf) {
    bool pos = c.node.getInt("detect_positive", 1), neg = c.node.getInt("detect_negative", 1);
    for (int64_t i = 0; i < x.numel(); ++i) {
      double v = isFloat(x.dtype) ? x.getF(i) : 0;
      y.setI(i, op == Op::IsNaN ? std::isnan(v) : std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)));
    }
    return Error::success();
  }
  if (!isFloat(x.dtype)) {
    if (!isIntegerSafeUnary(op) || x.dtype == DType::Bool)
      return c.fail("not defined for " + std::string(dtypeName(x.dtype)));
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t v = x.getI(i);
      int64_t r = op == Op::Neg ? -v : op == Op::Abs ? (v < 0 ? -v : v) : op == Op::Sign ? (v > 0) - (v < 0) : std::max<int64_t>(v, 0);
      y.setI(i, r);
    }
    return Error::success();
  }
  auto f = unaryFloat(c.node);
  if (!f) return c.fail("no float kernel");
  for (int64_t i = 0; i < x.numel(); ++i) y.setF(i, f(x.getF(i)));
  return Error::success();
}

Error evalClip(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  for (int i = 1; i < 3; ++i)
    if (c.present(i) && c.in[i]->numel() != 1) return c.fail("min and max must be scalars");
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (isFloat(x.dtype)) {
      double v = x.getF(i);
      if (c.present(1)) v = std::max(v, c.in[1]->getF(0));
      if (c.present(2)) v = std::min(v, c.in[2]->getF(0));
      c.out[0].setF(i, v);
    } else {
      int64_t v = x.getI(i);
      if (c.present(1)) v = std::max(v, c.in[1]->getI(0));
      if (c.present(2)) v = std::min(v, c.in[2]->getI(0));
      c.out[0].setI(i, v);
    }
  }
  return Error::success();
}

Error evalCast(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  Tensor& y = c.out[0];
  bool fromFloat = isFloat(x.dtype), toFloat = isFloat(y.dtype);
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    if (fromFloat) {
      double v = x.getF(i);
      if (toFloat) y.setF(i, v);
      else if (y.dtype == DType::Bool) y.setI(i, v != 0);
      else y.setI(i, toInt(v));
    } else if (toFloat) {
      y.setF(i, x.dtype == DType::U64 ? (double)(uint64_t)x.getI(i) : (double)x.getI(i));
    } else {
      y.setI(i, x.getI(i));
    }
  }
  return Error::success();
}

namespace {

/// Mod with fmod = 0 on floats (opset 28): the remainder takes the divisor's sign, as numpy's.
double floorMod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && (r < 0) != (b < 0)) r += b;
  return r == 0 ? std::copysign(0.0, b) : r;
}

double binaryFloat(Op op, double a, double b, bool fmod) {
  switch (op) {
  case Op::Add: return a + b;
  case Op::Sub: return a - b;
  case Op::Mul: return a * b;
  case Op::Div: return a / b;
  case Op::Pow: return std::pow(a, b);
  case Op::Mod: return fmod ? std::fmod(a, b) : floorMod(a, b);
  case Op::PRelu: return a < 0 ? a * b : a;
  case Op::Equal: return a == b;
  case Op::Less: return a < b;
  case Op::LessOrEqual: return a <= b;
  case Op::Greater: return a > b;
  case Op::GreaterOrEqual: return a >= b;
  default: return 0;
  }
}

Expected<int64_t> binaryInt(const EvalCtx& c, int64_t a, int64_t b) {
  switch (c.node.op) {
  case Op::Add: return (int64_t)((uint64_t)a + (uint64_t)b);
  case Op::Sub: return (int64_t)((uint64_t)a - (uint64_t)b);
  case Op::Mul: return (int64_t)((uint64_t)a * (uint64_t)b);
  case Op::Div:
  case Op::Mod: {
    if (b == 0) return c.fail("integer division by zero");
    if (a == INT64_MIN && b == -1) return c.node.op == Op::Div ? a : 0;
    if (c.node.op == Op::Div) return a / b;
    int64_t r = a % b;
    if (!c.node.getInt("fmod", 0) && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
  case Op::Pow: return toInt(std::pow((double)a, (double)b));
  case Op::PRelu: return a < 0 ? a * b : a;
  case Op::And: return a && b;
  case Op::Or: return a || b;
  case Op::Xor: return (a != 0) != (b != 0);
  case Op::Equal: return a == b;
  case Op::Less: return a < b;
  case Op::LessOrEqual: return a <= b;
  case Op::Greater: return a > b;
  case Op::GreaterOrEqual: return a >= b;
  case Op::BitwiseAnd: return a & b;
  case Op::BitwiseOr: return a | b;
  case Op::BitwiseXor: return a ^ b;
  case Op::BitShift: { // past the width (or negative): 0, or on the right -1 for a negative signed value
    DType t = c.node.input(0)->type.dtype;
    bool left = c.node.getString("direction", "") == "LEFT", sign = isSignedInt(t);
    if (b < 0 || b >= 8 * (int64_t)dtypeSize(t)) return int64_t(!left && sign && a < 0 ? -1 : 0);
    if (left) return (int64_t)((uint64_t)a << b);
    return sign ? a >> b : (int64_t)((uint64_t)a >> b);
  }
  default: return c.fail("not defined for integers");
  }
}

} // namespace

Error evalBinary(EvalCtx& c) {
  const Tensor &a = *c.in[0], &b = *c.in[1];
  Tensor& y = c.out[0];
  Op op = c.node.op;
  bool logical = op == Op::And || op == Op::Or || op == Op::Xor;
  if (logical && (a.dtype != DType::Bool || b.dtype != DType::Bool)) return c.fail("inputs must be bool");
  bool useFloat = isFloat(a.dtype) || (op == Op::Pow && isFloat(b.dtype));
  bool fmod = c.node.getInt("fmod", 0);
  auto offA = broadcastOffsets(y.shape, a.shape), offB = broadcastOffsets(y.shape, b.shape);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (useFloat) {
      double r = binaryFloat(op, a.getF(offA[i]), b.getF(offB[i]), fmod);
      if (isFloat(y.dtype)) y.setF(i, r);
      else y.setI(i, toInt(r));
      continue;
    }
    auto r = binaryInt(c, a.getI(offA[i]), b.getI(offB[i]));
    if (!r) return r.takeError();
    y.setI(i, *r);
  }
  return Error::success();
}

Error evalVariadic(EvalCtx& c) {
  Tensor& y = c.out[0];
  Op op = c.node.op;
  bool fl = isFloat(y.dtype);
  std::vector<double> accF(y.numel());
  std::vector<int64_t> accI(y.numel());
  for (size_t k = 0; k < c.in.size(); ++k) {
    auto off = broadcastOffsets(y.shape, c.in[k]->shape);
    for (int64_t i = 0; i < y.numel(); ++i) {
      double f = fl ? c.in[k]->getF(off[i]) : 0;
      int64_t v = fl ? 0 : c.in[k]->getI(off[i]);
      if (k == 0) {
        accF[i] = f;
        accI[i] = v;
      } else if (op == Op::Min) {
        accF[i] = std::isnan(f) || std::isnan(accF[i]) ? NAN : std::min(accF[i], f);
        accI[i] = std::min(accI[i], v);
      } else if (op == Op::Max) {
        accF[i] = std::isnan(f) || std::isnan(accF[i]) ? NAN : std::max(accF[i], f);
        accI[i] = std::max(accI[i], v);
      } else {
        accF[i] += f;
        accI[i] += v;
      }
    }
  }
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (op == Op::Mean) accF[i] /= (double)c.in.size();
    if (fl) y.setF(i, accF[i]);
    else y.setI(i, op == Op::Mean ? accI[i] / (int64_t)c.in.size() : accI[i]);
  }
  return Error::success();
}

Error evalWhere(EvalCtx& c) {
  Tensor& y = c.out[0];
  auto o0 = broadcastOffsets(y.shape, c.in[0]->shape), o1 = broadcastOffsets(y.shape, c.in[1]->shape),
       o2 = broadcastOffsets(y.shape, c.in[2]->shape);
  for (int64_t i = 0; i < y.numel(); ++i) {
    bool cond = c.in[0]->getI(o0[i]);
    copyElement(y, i, cond ? *c.in[1] : *c.in[2], cond ? o1[i] : o2[i]);
  }
  return Error::success();
}

} // namespace sgc::ir
