// The GPU's float64 math (codegen/llvm/EmitMath.cpp: exp, log, sin, cos, atan
// and what is built on them) uses only generic LLVM operations, so it runs on
// this CPU too: each function is emitted with the NVPTX formulas into an
// x86-64 module, JIT-compiled and compared with libm over a wide range.
#include "codegen/llvm/EmitMath.h"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/Support/TargetSelect.h>

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace sgc;

namespace {

using Fn = double (*)(double);

struct Case {
  const char* name;
  kir::KOp op;
  double (*ref)(double);
  double lo, hi, tol; ///< inputs, relative tolerance (erf keeps its f32 formula's error)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GpuMath : public ::testing::TestWithParam<Case> {};

TEST_P(GpuMath, MatchesLibm) {
  const Case& cs = GetParam();
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = std::make_unique<llvm::Module>("gpu_math", *ctx);
  llvm::IRBuilder<> b(*ctx);
  auto* f = llvm::Function::Create(llvm::FunctionType::get(b.getDoubleTy(), {b.getDoubleTy()}, false), llvm::Function::ExternalLinkage, "f", *m);
  b.SetInsertPoint(llvm::BasicBlock::Create(*ctx, "entry", f));
  codegen::MathEmitter math(*m, b, codegen::Target::NVPTX);
  auto v = math.unary(cs.op, f->getArg(0));
  ASSERT_TRUE(!!v) << errorText(v.takeError());
  b.CreateRet(*v);
  auto jit = llvm::orc::LLJITBuilder().create();
  ASSERT_TRUE(!!jit);
  ASSERT_FALSE((*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))));
  auto sym = (*jit)->lookup("f");
  ASSERT_TRUE(!!sym);
  Fn fn = sym->toPtr<Fn>();
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(cs.lo, cs.hi);
  double worst = 0;
  for (int i = 0; i < 20000; ++i) {
    double x = i < 3 ? (i == 0 ? cs.lo : i == 1 ? cs.hi : 0.5 * (cs.lo + cs.hi)) : u(rng);
    double got = fn(x), want = cs.ref(x);
    if (std::isinf(want) || want == 0) {
      EXPECT_EQ(got, want) << cs.name << "(" << x << ")";
      continue;
    }
    worst = std::max(worst, std::fabs(got - want) / std::fabs(want));
  }
  EXPECT_LE(worst, cs.tol) << cs.name;
  for (double special : {(double)NAN, (double)INFINITY, -(double)INFINITY, 0.0}) // NaN stays NaN where libm gives NaN
    if (std::isnan(cs.ref(special))) {
      EXPECT_TRUE(std::isnan(fn(special))) << cs.name << "(" << special << ")";
    }
}

double erfRef(double x) { return std::erf(x); }
double exp2Ref(double x) { return std::exp2(x); }

INSTANTIATE_TEST_SUITE_P(
    F64, GpuMath,
    ::testing::Values(Case{"Exp", kir::KOp::Exp, ::exp, -740, 709, 1e-14}, Case{"ExpNearZero", kir::KOp::Exp, ::exp, -1e-3, 1e-3, 1e-15},
                      Case{"Exp2", kir::KOp::Exp2, exp2Ref, -1020, 1023, 2e-13}, // x ln 2 rounded first
                      Case{"Log", kir::KOp::Log, ::log, 1e-300, 1e300, 1e-14}, Case{"LogNearOne", kir::KOp::Log, ::log, 0.5, 2, 1e-13},
                      Case{"LogSubnormal", kir::KOp::Log, ::log, 1e-320, 1e-310, 1e-13}, Case{"Sin", kir::KOp::Sin, ::sin, -100, 100, 1e-11},
                      Case{"Cos", kir::KOp::Cos, ::cos, -100, 100, 1e-11}, Case{"Atan", kir::KOp::Atan, ::atan, -50, 50, 1e-14},
                      Case{"Tanh", kir::KOp::Tanh, ::tanh, -20, 20, 1e-12}, Case{"Expm1", kir::KOp::Expm1, ::expm1, -5, 5, 1e-12},
                      Case{"Log1p", kir::KOp::Log1p, ::log1p, -0.9, 10, 1e-12}, Case{"Erf", kir::KOp::Erf, erfRef, -4, 4, 5e-7}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

} // namespace
