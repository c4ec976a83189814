// laneStep (see LaneStep.h).
#include "codegen/kir/LaneStep.h"

#include <numeric>

namespace sgc::kir {
namespace {

/// The same across the lanes: index(base) itself, of which nothing more is known.
LaneStep fixed() { return {true, 0, 1, false}; }

/// x * y, 1 where that overflows (a divisor of the product either way).
int64_t product(int64_t x, int64_t y) {
  int64_t p;
  return __builtin_mul_overflow(x, y, &p) ? 1 : p;
}

/// step * width, the distance the lanes reach; 0 where that overflows (no claim is made then).
int64_t reachOf(int64_t step, int width) {
  int64_t p;
  return __builtin_mul_overflow(step, (int64_t)width, &p) ? 0 : p;
}

} // namespace

bool LaneSteps::dependsOn(const Expr& e) {
  auto it = moves_.find(&e);
  if (it != moves_.end()) return it->second;
  bool d = e.kind == ExprKind::LoopVar && e.id == loop_;
  for (size_t i = 0; !d && i < e.args.size(); ++i) d = dependsOn(*e.args[i]);
  return moves_[&e] = d;
}

LaneStep LaneSteps::of(const Expr& e) {
  auto it = steps_.find(&e);
  if (it != steps_.end()) return it->second;
  return steps_[&e] = compute(e);
}

LaneStep LaneSteps::compute(const Expr& e) {
  if (!dependsOn(e)) {
    if (e.kind == ExprKind::Const && e.type == Scalar::I64) return {true, 0, e.bits < 0 ? -e.bits : e.bits, e.bits >= 0};
    return fixed();
  }
  if (e.kind == ExprKind::LoopVar) return {true, 1, width_, true}; // base + u, base = i * width
  if (e.kind != ExprKind::Binary || e.type != Scalar::I64) return {};
  LaneStep a = of(*e.args[0]), b = of(*e.args[1]);
  if (!a.affine || !b.affine) return {};
  const Expr& rhs = *e.args[1];
  bool constRhs = rhs.kind == ExprKind::Const && rhs.type == Scalar::I64;
  switch (e.op) {
  case KOp::Add: return {true, a.step + b.step, std::gcd(a.divisor, b.divisor), a.nonNegative && b.nonNegative};
  case KOp::Sub: return {true, a.step - b.step, std::gcd(a.divisor, b.divisor), false};
  case KOp::Mul: {
    const Expr& lhs = *e.args[0];
    LaneStep p{true, 0, product(a.divisor, b.divisor), a.nonNegative && b.nonNegative};
    if (a.step == 0 && b.step == 0) return p;
    if (b.step == 0 && constRhs) return p.step = a.step * rhs.bits, p;
    if (a.step == 0 && lhs.kind == ExprKind::Const) return p.step = b.step * lhs.bits, p;
    return {};
  }
  case KOp::IDiv:
  case KOp::IMod: {
    if (!constRhs || rhs.bits <= 0) return {};
    int64_t d = rhs.bits;
    if (d == 1) return e.op == KOp::IDiv ? a : LaneStep{true, 0, 0, true}; // x / 1 = x, x % 1 = 0
    if (a.step == 0) return {true, 0, e.op == KOp::IMod ? std::gcd(a.divisor, d) : 1, a.nonNegative};
    // index(base) and d multiples of step * width, index(base) >= 0: index(base) % d + step * u
    // stays below d, so the quotient does not move and the remainder moves as the dividend.
    int64_t reach = reachOf(a.step, width_);
    if (a.step < 0 || reach <= 0 || !a.nonNegative || a.divisor % reach != 0 || d % reach != 0) return {};
    if (e.op == KOp::IDiv) return {true, 0, 1, true};
    return {true, a.step, std::gcd(a.divisor, d), true};
  }
  case KOp::Within:
    if (!constRhs) return {};
    if (a.step == 0) return {true, 0, 1, true};
    if (!stepsWithin(a, rhs.bits, width_)) return {};
    return {true, a.step, reachOf(a.step, width_), true};
  default: return {};
  }
}

bool stepsWithin(const LaneStep& x, int64_t n, int width) {
  int64_t reach = reachOf(x.step, width);
  return x.affine && x.step > 0 && reach > 1 && n % reach == 0 && x.divisor % reach == 0;
}

LaneStep laneStep(const Expr& e, int loop, int width) { return LaneSteps(loop, width).of(e); }

} // namespace sgc::kir
