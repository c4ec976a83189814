// The scalar operations of the kernel IR as LLVM IR (see EmitMath.h).
#include "codegen/llvm/EmitMath.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cmath>

namespace sgc::codegen {

using kir::KOp;

llvm::Value* MathEmitter::intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
  return b_.CreateIntrinsic(id, {args[0]->getType()}, args);
}

llvm::Value* MathEmitter::libm(const char* f32Name, const char* f64Name, std::vector<llvm::Value*> args) {
  llvm::Type* t = args[0]->getType();
  std::vector<llvm::Type*> params(args.size(), t);
  llvm::FunctionCallee f = m_.getOrInsertFunction(t->isDoubleTy() ? f64Name : f32Name, llvm::FunctionType::get(t, params, false));
  return b_.CreateCall(f, args);
}

llvm::Value* MathEmitter::floatToBf16(llvm::Value* f) {
  if (gpu()) return b_.CreateBitCast(b_.CreateFPTrunc(f, b_.getBFloatTy()), b_.getInt16Ty()); // cvt.rn.bf16.f32 (sm_80 on)
  llvm::Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
  llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
  llvm::Value* rounded = b_.CreateLShr(b_.CreateAdd(bits, b_.CreateAdd(b_.getInt32(0x7fff), lsb)), 16);
  llvm::Value* quiet = b_.CreateOr(b_.CreateLShr(bits, 16), b_.getInt32(0x40));
  llvm::Value* isNan = b_.CreateFCmpUNO(f, f);
  return b_.CreateTrunc(b_.CreateSelect(isNan, quiet, rounded), b_.getInt16Ty());
}

llvm::Value* MathEmitter::bf16ToFloat(llvm::Value* bits) {
  return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(bits, b_.getInt32Ty()), 16), b_.getFloatTy());
}

llvm::Value* MathEmitter::horner(llvm::Value* x, const std::vector<double>& coeffs) {
  llvm::Value* p = c(x, coeffs.back());
  for (size_t i = coeffs.size() - 1; i-- > 0;) p = b_.CreateFAdd(b_.CreateFMul(p, x), c(x, coeffs[i]));
  return p;
}

/// 2^n for an i64 n in [-1074, 1023], as two factors that are each a normal double.
llvm::Value* MathEmitter::pow2(llvm::Value* n) {
  llvm::Value* n1 = b_.CreateAShr(n, 1);
  llvm::Value* n2 = b_.CreateSub(n, n1);
  auto f = [&](llvm::Value* k) { return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(k, b_.getInt64(1023)), 52), b_.getDoubleTy()); };
  return b_.CreateFMul(f(n1), f(n2));
}

/// exp of an f64 on the GPU: x = n ln 2 + r with |r| <= ln 2 / 2 (a two-part ln 2), e^r by its
/// series to r^13 (truncation under 1e-17), times 2^n.
llvm::Value* MathEmitter::exp64(llvm::Value* x) {
  llvm::Value* n = intrinsic(llvm::Intrinsic::roundeven, {b_.CreateFMul(x, c(x, M_LOG2E))});
  n = intrinsic(llvm::Intrinsic::maxnum, {intrinsic(llvm::Intrinsic::minnum, {n, c(x, 1024)}), c(x, -1075)});
  llvm::Value* r = b_.CreateFSub(b_.CreateFSub(x, b_.CreateFMul(n, c(x, 6.93147180369123816490e-01))), b_.CreateFMul(n, c(x, 1.90821492927058770002e-10)));
  std::vector<double> k(14);
  double f = 1;
  for (int i = 0; i < 14; ++i) k[i] = 1 / f, f *= i + 1;
  llvm::Value* v = b_.CreateFMul(horner(r, k), pow2(b_.CreateFPToSI(n, b_.getInt64Ty())));
  v = b_.CreateSelect(b_.CreateFCmpOGT(x, c(x, 709.79)), c(x, INFINITY), v);
  v = b_.CreateSelect(b_.CreateFCmpOLT(x, c(x, -745.2)), c(x, 0), v);
  return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, v);
}

/// log of an f64 on the GPU: x = m 2^e with m in [sqrt(1/2), sqrt(2)) from its bits (subnormals
/// scaled first), log m = 2 atanh((m - 1) / (m + 1)) by its series to s^23.
llvm::Value* MathEmitter::log64(llvm::Value* x) {
  llvm::Value* tiny = b_.CreateFCmpOLT(x, c(x, 0x1p-1022));
  llvm::Value* xs = b_.CreateSelect(tiny, b_.CreateFMul(x, c(x, 0x1p54)), x);
  llvm::Value* bits = b_.CreateBitCast(xs, b_.getInt64Ty());
  llvm::Value* e = b_.CreateSub(b_.CreateAnd(b_.CreateLShr(bits, 52), b_.getInt64(0x7ff)), b_.getInt64(1023));
  e = b_.CreateSelect(tiny, b_.CreateSub(e, b_.getInt64(54)), e);
  llvm::Value* m = b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(bits, b_.getInt64(0x000fffffffffffffLL)), b_.getInt64(0x3ff0000000000000LL)), b_.getDoubleTy());
  llvm::Value* big = b_.CreateFCmpOGT(m, c(x, M_SQRT2));
  m = b_.CreateSelect(big, b_.CreateFMul(m, c(x, 0.5)), m);
  llvm::Value* ef = b_.CreateSIToFP(b_.CreateSelect(big, b_.CreateAdd(e, b_.getInt64(1)), e), b_.getDoubleTy());
  llvm::Value* s = b_.CreateFDiv(b_.CreateFSub(m, c(x, 1)), b_.CreateFAdd(m, c(x, 1)));
  std::vector<double> k;
  for (int i = 0; i < 12; ++i) k.push_back(2.0 / (2 * i + 1));
  llvm::Value* lm = b_.CreateFMul(s, horner(b_.CreateFMul(s, s), k));
  llvm::Value* v = b_.CreateFAdd(b_.CreateFMul(ef, c(x, 6.93147180369123816490e-01)), b_.CreateFAdd(lm, b_.CreateFMul(ef, c(x, 1.90821492927058770002e-10))));
  v = b_.CreateSelect(b_.CreateFCmpOEQ(x, c(x, INFINITY)), x, v);
  v = b_.CreateSelect(b_.CreateFCmpOEQ(x, c(x, 0)), c(x, -INFINITY), v);
  return b_.CreateSelect(b_.CreateFCmpULT(x, c(x, 0)), c(x, NAN), v); // also NaN for NaN
}

/// exp and log on the GPU: PTX's ex2/lg2 for f32; f64 by range reduction and series.
Expected<llvm::Value*> MathEmitter::exp(llvm::Value* x) {
  if (!gpu()) return intrinsic(llvm::Intrinsic::exp, {x});
  if (x->getType()->isDoubleTy()) return exp64(x);
  return (llvm::Value*)b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_f, {}, {b_.CreateFMul(x, c(x, M_LOG2E))});
}

/// 2^x: on the GPU ex2 itself for f32 (exp costs a multiplication more), exp's series for f64.
/// f32's ex2 flushes results under 2^-126 to zero (KirOps.def): ex2 without .ftz costs ptxas three
/// instructions more (a compare and two predicated multiplies around MUFU.EX2), a quarter of the
/// attention forward's loop.
Expected<llvm::Value*> MathEmitter::exp2(llvm::Value* x) {
  if (!gpu()) return intrinsic(llvm::Intrinsic::exp2, {x});
  if (x->getType()->isDoubleTy()) return exp64(b_.CreateFMul(x, c(x, M_LN2)));
  return (llvm::Value*)b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_ftz_f, {}, {x});
}

Expected<llvm::Value*> MathEmitter::log(llvm::Value* x) {
  if (!gpu()) return intrinsic(llvm::Intrinsic::log, {x});
  if (x->getType()->isDoubleTy()) return log64(x);
  return (llvm::Value*)b_.CreateFMul(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_lg2_approx_f, {}, {x}), c(x, M_LN2));
}

/// exp(x) - 1 (Kahan): with u = exp(x), (u - 1) x / log(u) cancels the rounding of u near 0.
Expected<llvm::Value*> MathEmitter::expm1(llvm::Value* x) {
  if (!gpu()) return libm("expm1f", "expm1", {x});
  auto u = exp(x);
  if (!u) return u;
  llvm::Value* um1 = b_.CreateFSub(*u, c(x, 1));
  auto lu = log(*u);
  if (!lu) return lu;
  llvm::Value* v = b_.CreateFDiv(b_.CreateFMul(um1, x), *lu);
  v = b_.CreateSelect(b_.CreateFCmpOEQ(um1, c(x, -1)), c(x, -1), v);
  v = b_.CreateSelect(b_.CreateFCmpOEQ(*u, c(x, INFINITY)), *u, v);
  return b_.CreateSelect(b_.CreateFCmpOEQ(*u, c(x, 1)), x, v);
}

/// log(1 + x) (Kahan): with u = 1 + x, log(u) x / (u - 1).
Expected<llvm::Value*> MathEmitter::log1p(llvm::Value* x) {
  if (!gpu()) return libm("log1pf", "log1p", {x});
  llvm::Value* u = b_.CreateFAdd(x, c(x, 1));
  auto lu = log(u);
  if (!lu) return lu;
  llvm::Value* v = b_.CreateFDiv(b_.CreateFMul(*lu, x), b_.CreateFSub(u, c(x, 1)));
  v = b_.CreateSelect(b_.CreateFCmpOEQ(u, c(x, INFINITY)), u, v);
  return b_.CreateSelect(b_.CreateFCmpOEQ(u, c(x, 1)), x, v);
}

/// 1 / x on the GPU for the formulas below: in f32 PTX's rcp.approx (1 ulp, subnormals flushed),
/// where an IEEE division takes a dozen instructions (GELU's forward and backward were bound by
/// them); in f64 a division.
llvm::Value* MathEmitter::reciprocal(llvm::Value* x) {
  if (x->getType()->isFloatTy()) return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_rcp_approx_ftz_f, {}, {x});
  return b_.CreateFDiv(c(x, 1), x);
}

/// tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)), stable for large |x|; near 0, where that
/// difference cancels, x (1 - x^2/3 + 2x^4/15). A reciprocal flushed to 0 leaves tanh at 1, its
/// value there.
Expected<llvm::Value*> MathEmitter::tanh(llvm::Value* x) {
  if (!gpu()) return libm("tanhf", "tanh", {x});
  llvm::Value* ax = intrinsic(llvm::Intrinsic::fabs, {x});
  auto e = exp(b_.CreateFMul(ax, c(x, 2)));
  if (!e) return e;
  llvm::Value* inv = reciprocal(b_.CreateFAdd(*e, c(x, 1)));
  llvm::Value* t = b_.CreateFSub(c(x, 1), b_.CreateFMul(c(x, 2), inv));
  llvm::Value* x2 = b_.CreateFMul(x, x);
  llvm::Value* small = b_.CreateFMul(x, b_.CreateFAdd(c(x, 1), b_.CreateFMul(x2, b_.CreateFAdd(c(x, -1.0 / 3), b_.CreateFMul(x2, c(x, 2.0 / 15))))));
  return b_.CreateSelect(b_.CreateFCmpOLT(ax, c(x, 1e-3)), small, intrinsic(llvm::Intrinsic::copysign, {t, x}));
}

/// erf: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7; in f32 with its rounding and the
/// approximate reciprocal under 4e-7); GPU precision is checked on the device.
Expected<llvm::Value*> MathEmitter::erf(llvm::Value* x) {
  if (!gpu()) return libm("erff", "erf", {x});
  llvm::Value* ax = intrinsic(llvm::Intrinsic::fabs, {x});
  llvm::Value* t = reciprocal(b_.CreateFAdd(c(x, 1), b_.CreateFMul(c(x, 0.3275911), ax)));
  const double k[] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592};
  llvm::Value* p = c(x, k[0]);
  for (int i = 1; i < 5; ++i) p = b_.CreateFAdd(b_.CreateFMul(p, t), c(x, k[i]));
  p = b_.CreateFMul(p, t);
  // exp(-x^2) from x itself, not |x|: the same value, and the same instructions as a GELU
  // gradient's exp(-u^2) (ElementwiseMath.cpp), which LLVM then computes once.
  auto e = exp(b_.CreateFNeg(b_.CreateFMul(x, x)));
  if (!e) return e;
  llvm::Value* big = intrinsic(llvm::Intrinsic::copysign, {b_.CreateFSub(c(x, 1), b_.CreateFMul(p, *e)), x});
  // Below 1/2 the series 2/sqrt(pi) (x - x^3/3 + x^5/10 - ...) (exact near 0, where the formula
  // above keeps its absolute error): to x^15 in f32 (the next term about 1e-11 there; in f32 the
  // same values as to x^23), to x^23 in f64.
  std::vector<double> series;
  double f = 1;
  for (int n = 0; n < (x->getType()->isFloatTy() ? 8 : 12); ++n, f *= n) series.push_back((n % 2 ? -1 : 1) * 2 / std::sqrt(M_PI) / (f * (2 * n + 1)));
  llvm::Value* small = b_.CreateFMul(x, horner(b_.CreateFMul(x, x), series));
  return b_.CreateSelect(b_.CreateFCmpOLT(ax, c(x, 0.5)), small, big);
}

/// sin and cos on the GPU: x reduced to [-pi, pi] by a two-part 2 pi (Cody and Waite), then
/// PTX's sin/cos.approx (absolute error under 2^-20.9 there).
Expected<llvm::Value*> MathEmitter::sinCos(llvm::Value* x, bool sine) {
  if (!gpu()) return intrinsic(sine ? llvm::Intrinsic::sin : llvm::Intrinsic::cos, {x});
  if (x->getType()->isDoubleTy()) return sinCos64(x, sine);
  const double hi = 6.28125, lo = 2 * M_PI - 6.28125;
  llvm::Value* k = intrinsic(llvm::Intrinsic::roundeven, {b_.CreateFMul(x, c(x, 1 / (2 * M_PI)))});
  llvm::Value* r = b_.CreateFSub(b_.CreateFSub(x, b_.CreateFMul(k, c(x, hi))), b_.CreateFMul(k, c(x, lo)));
  return (llvm::Value*)b_.CreateIntrinsic(sine ? llvm::Intrinsic::nvvm_sin_approx_f : llvm::Intrinsic::nvvm_cos_approx_f, {}, {r});
}

/// sin and cos of an f64 on the GPU: x = k pi/2 + r with |r| <= pi/4 (a three-part pi/2), the
/// series of sin r and cos r to r^17 and r^18, picked and signed by k mod 4.
llvm::Value* MathEmitter::sinCos64(llvm::Value* x, bool sine) {
  llvm::Value* k = intrinsic(llvm::Intrinsic::roundeven, {b_.CreateFMul(x, c(x, 2 / M_PI))});
  llvm::Value* r = b_.CreateFSub(x, b_.CreateFMul(k, c(x, 1.57079632673412561417e+00)));
  r = b_.CreateFSub(r, b_.CreateFMul(k, c(x, 6.07710050630396597660e-11)));
  r = b_.CreateFSub(r, b_.CreateFMul(k, c(x, 2.02226624879595063154e-21)));
  llvm::Value* r2 = b_.CreateFMul(r, r);
  std::vector<double> sk, ck;
  double f = 1;
  for (int i = 1; i <= 18; ++i) {
    f *= i;
    if (i % 2) sk.push_back((i / 2 % 2 ? -1 : 1) / f);
    else ck.push_back((i / 2 % 2 ? -1 : 1) / f);
  }
  ck.insert(ck.begin(), 1.0);
  llvm::Value* sr = b_.CreateFMul(r, horner(r2, sk));
  llvm::Value* cr = horner(r2, ck);
  llvm::Value* q = b_.CreateAnd(b_.CreateFPToSI(k, b_.getInt64Ty()), b_.getInt64(3));
  if (!sine) q = b_.CreateAnd(b_.CreateAdd(q, b_.getInt64(1)), b_.getInt64(3)); // cos x = sin(x + pi/2)
  llvm::Value* odd = b_.CreateICmpNE(b_.CreateAnd(q, b_.getInt64(1)), b_.getInt64(0));
  llvm::Value* v = b_.CreateSelect(odd, cr, sr);
  return b_.CreateSelect(b_.CreateICmpUGE(q, b_.getInt64(2)), b_.CreateFNeg(v), v);
}

/// atan on the GPU: |x| > 1 through pi/2 - atan(1/|x|), then above tan(pi/8) through
/// pi/4 + atan((t - 1) / (t + 1)), leaving |t| <= 0.4142 for the odd series (to t^15 in f32,
/// t^41 in f64: truncation under 2e-8 and 1e-17).
Expected<llvm::Value*> MathEmitter::atan(llvm::Value* x) {
  if (!gpu()) return libm("atanf", "atan", {x});
  llvm::Value* ax = intrinsic(llvm::Intrinsic::fabs, {x});
  llvm::Value* big = b_.CreateFCmpOGT(ax, c(x, 1));
  llvm::Value* a = b_.CreateSelect(big, b_.CreateFDiv(c(x, 1), ax), ax);
  llvm::Value* mid = b_.CreateFCmpOGT(a, c(x, 0.41421356237309503));
  llvm::Value* t = b_.CreateSelect(mid, b_.CreateFDiv(b_.CreateFSub(a, c(x, 1)), b_.CreateFAdd(a, c(x, 1))), a);
  llvm::Value* t2 = b_.CreateFMul(t, t);
  int top = x->getType()->isDoubleTy() ? 41 : 15;
  llvm::Value* p = c(x, (top % 4 == 1 ? 1.0 : -1.0) / top);
  for (int k = top - 2; k >= 1; k -= 2) p = b_.CreateFAdd(b_.CreateFMul(p, t2), c(x, (k % 4 == 1 ? 1.0 : -1.0) / k));
  llvm::Value* r = b_.CreateFMul(p, t);
  r = b_.CreateSelect(mid, b_.CreateFAdd(r, c(x, M_PI / 4)), r);
  r = b_.CreateSelect(big, b_.CreateFSub(c(x, M_PI / 2), r), r);
  return intrinsic(llvm::Intrinsic::copysign, {r, x});
}

/// a^e: libm on the CPU; on the GPU |a|^e = exp(e log|a|), a negative base taking the sign of
/// an odd integer e (NaN for a fractional e), a zero exponent giving 1, as pow does.
Expected<llvm::Value*> MathEmitter::pow(llvm::Value* a, llvm::Value* e) {
  if (!gpu()) return libm("powf", "pow", {a, e});
  auto l = log(intrinsic(llvm::Intrinsic::fabs, {a}));
  if (!l) return l;
  auto r = exp(b_.CreateFMul(e, *l));
  if (!r) return r;
  llvm::Value* isInt = b_.CreateFCmpOEQ(intrinsic(llvm::Intrinsic::floor, {e}), e);
  llvm::Value* half = intrinsic(llvm::Intrinsic::floor, {b_.CreateFMul(e, c(e, 0.5))});
  llvm::Value* odd = b_.CreateFCmpUNE(b_.CreateFMul(half, c(e, 2)), e);
  llvm::Value* negBase = b_.CreateSelect(isInt, b_.CreateSelect(odd, b_.CreateFNeg(*r), *r), c(e, NAN));
  llvm::Value* v = b_.CreateSelect(b_.CreateFCmpOLT(a, c(a, 0)), negBase, *r);
  return b_.CreateSelect(b_.CreateFCmpOEQ(e, c(e, 0)), c(e, 1), v);
}

Expected<llvm::Value*> MathEmitter::compare(KOp op, llvm::Value* a, llvm::Value* v) {
  bool fp = a->getType()->isFloatingPointTy();
  using P = llvm::CmpInst::Predicate;
  P f = P::FCMP_OEQ, i = P::ICMP_EQ;
  switch (op) {
  case KOp::Eq: break;
  case KOp::Ne: f = P::FCMP_UNE, i = P::ICMP_NE; break;
  case KOp::Lt: f = P::FCMP_OLT, i = P::ICMP_SLT; break;
  case KOp::Le: f = P::FCMP_OLE, i = P::ICMP_SLE; break;
  case KOp::Gt: f = P::FCMP_OGT, i = P::ICMP_SGT; break;
  case KOp::Ge: f = P::FCMP_OGE, i = P::ICMP_SGE; break;
  default: return makeError(std::string("'") + kir::kopName(op) + "' is not a comparison");
  }
  return fp ? b_.CreateFCmp(f, a, v) : b_.CreateICmp(i, a, v);
}

Expected<llvm::Value*> MathEmitter::unary(KOp op, llvm::Value* x) {
  bool fp = x->getType()->isFloatingPointTy();
  switch (op) {
  case KOp::Neg: return fp ? b_.CreateFNeg(x) : b_.CreateNeg(x);
  case KOp::Abs: return fp ? intrinsic(llvm::Intrinsic::fabs, {x}) : b_.CreateIntrinsic(llvm::Intrinsic::abs, {x->getType()}, {x, b_.getFalse()});
  case KOp::Not: return b_.CreateNot(x);
  default: break;
  }
  if (!fp) return makeError(std::string("'") + kir::kopName(op) + "' needs a floating-point operand");
  switch (op) {
  case KOp::Exp: return exp(x);
  case KOp::Exp2: return exp2(x);
  case KOp::Expm1: return expm1(x);
  case KOp::Log: return log(x);
  case KOp::Log1p: return log1p(x);
  case KOp::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {x});
  case KOp::Floor: return intrinsic(llvm::Intrinsic::floor, {x});
  case KOp::Ceil: return intrinsic(llvm::Intrinsic::ceil, {x});
  case KOp::RoundEven: return intrinsic(llvm::Intrinsic::roundeven, {x});
  case KOp::Tanh: return tanh(x);
  case KOp::Erf: return erf(x);
  case KOp::Sin: return sinCos(x, true);
  case KOp::Cos: return sinCos(x, false);
  case KOp::Atan: return atan(x);
  case KOp::IsNan: return b_.CreateFCmpUNO(x, x);
  case KOp::RoundBf16: return bf16ToFloat(floatToBf16(x));
  case KOp::RoundF16: return b_.CreateFPExt(b_.CreateFPTrunc(x, b_.getHalfTy()), x->getType());
  default: return makeError(std::string("'") + kir::kopName(op) + "' is not a unary op");
  }
}

Expected<llvm::Value*> MathEmitter::binary(KOp op, llvm::Value* a, llvm::Value* v) {
  bool fp = a->getType()->isFloatingPointTy();
  switch (op) {
  case KOp::Add: return fp ? b_.CreateFAdd(a, v) : b_.CreateAdd(a, v);
  case KOp::Sub: return fp ? b_.CreateFSub(a, v) : b_.CreateSub(a, v);
  case KOp::Mul: return fp ? b_.CreateFMul(a, v) : b_.CreateMul(a, v);
  case KOp::Div: return fp ? b_.CreateFDiv(a, v) : b_.CreateSDiv(a, v);
  case KOp::IDiv: return b_.CreateSDiv(a, v);
  case KOp::IMod: return b_.CreateSRem(a, v);
  case KOp::Rem: return fp ? b_.CreateFRem(a, v) : b_.CreateSRem(a, v);
  case KOp::And: return b_.CreateAnd(a, v);
  case KOp::Or: return b_.CreateOr(a, v);
  case KOp::Xor: return b_.CreateXor(a, v);
  case KOp::Shl: return b_.CreateShl(a, v);
  case KOp::Shr: return b_.CreateLShr(a, v);
  case KOp::AShr: return b_.CreateAShr(a, v);
  case KOp::Min: return fp ? intrinsic(llvm::Intrinsic::minimum, {a, v}) : intrinsic(llvm::Intrinsic::smin, {a, v});
  case KOp::Max: return fp ? intrinsic(llvm::Intrinsic::maximum, {a, v}) : intrinsic(llvm::Intrinsic::smax, {a, v});
  case KOp::Within:
    if (fp) return makeError("'within' needs integer operands");
    return intrinsic(llvm::Intrinsic::smin, {intrinsic(llvm::Intrinsic::smax, {a, llvm::ConstantInt::get(a->getType(), 0)}), b_.CreateSub(v, llvm::ConstantInt::get(v->getType(), 1))});
  case KOp::Pow:
    if (!fp) return makeError("'pow' needs floating-point operands");
    return pow(a, v);
  default: return compare(op, a, v);
  }
}

} // namespace sgc::codegen
