// The kernel IR's scalar operations (kir::KOp) as LLVM IR, for x86-64 and
// NVPTX. On x86-64 transcendental functions call libm (which every .so may
// link); NVPTX has no libm, so they are written out here from PTX's
// approximate exp2/log2/sin/cos, with the range reductions that keep them
// within a few ulp of f32 over the whole range; f64 ones from range
// reductions and series (erf in f64 keeps the f32 formula's 1.5e-7).
#pragma once
#include "codegen/kir/Kernel.h"
#include "codegen/llvm/Emitter.h"

#include <llvm/IR/IRBuilder.h>

namespace sgc::codegen {

class MathEmitter {
public:
  MathEmitter(llvm::Module& m, llvm::IRBuilder<>& b, Target t) : m_(m), b_(b), t_(t) {}

  Expected<llvm::Value*> unary(kir::KOp op, llvm::Value* x);
  Expected<llvm::Value*> binary(kir::KOp op, llvm::Value* a, llvm::Value* c);

  /// bf16 is stored as its 16 bits; these convert by hand (round to nearest even, NaN kept quiet;
  /// on the GPU by cvt.rn.bf16.f32, which rounds alike and gives NaN as the canonical one).
  llvm::Value* floatToBf16(llvm::Value* f);
  llvm::Value* bf16ToFloat(llvm::Value* bits);

private:
  bool gpu() const { return t_ == Target::NVPTX; }
  llvm::Value* c(llvm::Value* like, double v) { return llvm::ConstantFP::get(like->getType(), v); }
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args);
  llvm::Value* libm(const char* f32Name, const char* f64Name, std::vector<llvm::Value*> args);

  llvm::Value* horner(llvm::Value* x, const std::vector<double>& coeffs); ///< sum of coeffs[i] x^i
  llvm::Value* reciprocal(llvm::Value* x);
  llvm::Value* pow2(llvm::Value* n);
  llvm::Value* exp64(llvm::Value* x);
  llvm::Value* log64(llvm::Value* x);
  llvm::Value* sinCos64(llvm::Value* x, bool sine);
  Expected<llvm::Value*> exp(llvm::Value* x);
  Expected<llvm::Value*> log(llvm::Value* x);
  Expected<llvm::Value*> exp2(llvm::Value* x);
  Expected<llvm::Value*> expm1(llvm::Value* x);
  Expected<llvm::Value*> log1p(llvm::Value* x);
  Expected<llvm::Value*> tanh(llvm::Value* x);
  Expected<llvm::Value*> erf(llvm::Value* x);
  Expected<llvm::Value*> sinCos(llvm::Value* x, bool sine);
  Expected<llvm::Value*> atan(llvm::Value* x);
  Expected<llvm::Value*> pow(llvm::Value* a, llvm::Value* e);
  Expected<llvm::Value*> compare(kir::KOp op, llvm::Value* a, llvm::Value* c);

  llvm::Module& m_;
  llvm::IRBuilder<>& b_;
  Target t_;
};

} // namespace sgc::codegen
