// Hopper's warpgroup instructions as inline assembly (see EmitHopper.h).
#include "codegen/llvm/EmitHopper.h"

#include <llvm/IR/InlineAsm.h>

namespace sgc::codegen {

llvm::Value* HopperEmitter::call(llvm::Type* result, const std::string& text, const std::string& constraints, const std::vector<llvm::Value*>& args) {
  std::vector<llvm::Type*> types;
  for (llvm::Value* a : args) types.push_back(a->getType());
  auto* fnTy = llvm::FunctionType::get(result, types, false);
  return b_.CreateCall(llvm::InlineAsm::get(fnTy, text, constraints + (constraints.empty() ? "" : ",") + "~{memory}", true), args);
}

// The descriptor: the start address >> 4 (14 bits); the leading byte offset >> 4 (K-major: unused,
// 16; MN-major: from one 64-column block of the tile to the next, rows * 128); the stride byte
// offset >> 4 (8 rows of 128 bytes: 1024); the 128-byte swizzle (1 in bits 62-63). `bytes` more
// is (bytes >> 4) more in the start address's field, with no carry out of it while the address
// stays in the shared window.
HopperEmitter::Descriptor HopperEmitter::descriptor(llvm::Value* address, int64_t bytes, const kir::WgmmaTile& tile) {
  uint64_t lbo = tile.mnMajor ? (uint64_t)tile.rows * 128 : 16, sbo = 1024;
  uint64_t fixed = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (1ull << 62);
  return {b_.CreateOr(b_.CreateLShr(b_.CreateAnd(address, b_.getInt64(0x3FFFF)), b_.getInt64(4)), b_.getInt64(fixed)), bytes};
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 {d...}, {a0..a3} | a-desc, b-desc,
// scale-d (1: D += A B; 0: D = A B), imm-scale-a 1, imm-scale-b 1, (imm-trans-a,) imm-trans-b.
// A descriptor with bytes to add is summed into a register of the assembly's own scope first.
llvm::Value* HopperEmitter::product(size_t n, const std::vector<llvm::Value*>& acc, const std::vector<llvm::Value*>& a, const Descriptor& aTile,
                                    const Descriptor& b, bool bMnMajor, bool aMnMajor) {
  std::vector<llvm::Value*> args;
  std::string regs, constraints, sums;
  for (size_t i = 0; i < n; ++i) regs += (i ? ", $" : "$") + std::to_string(i), constraints += "=f,";
  size_t at = n;
  // The descriptor operand `d` as the assembly reads it: $N, or `name` = $N + its bytes >> 4.
  auto operand = [&](const Descriptor& d, const char* name) {
    args.push_back(d.base), constraints += "l,";
    std::string op = "$" + std::to_string(at++);
    if (!d.bytes) return op;
    sums += std::string(".reg .b64 ") + name + "; add.s64 " + name + ", " + op + ", " + std::to_string(d.bytes >> 4) + "; ";
    return std::string(name);
  };
  std::string aText;
  if (aTile.base) {
    aText = operand(aTile, "sgc_da");
  } else {
    aText = "{";
    for (size_t i = 0; i < a.size(); ++i) args.push_back(a[i]), constraints += "r,", aText += (i ? ", $" : "$") + std::to_string(at++);
    aText += "}";
  }
  std::string bText = operand(b, "sgc_db");
  constraints.pop_back();
  std::string text = "wgmma.mma_async.sync.aligned.m64n" + std::to_string(2 * n) + "k16.f32.bf16.bf16 {" + regs + "}, " + aText + ", " + bText +
                     (acc.empty() ? ", 0" : ", 1") + ", 1, 1" + std::string(aTile.base ? (aMnMajor ? ", 1" : ", 0") : "") + (bMnMajor ? ", 1;" : ", 0;");
  if (!sums.empty()) text = "{ " + sums + text + " }";
  for (size_t i = 0; i < acc.size(); ++i) args.push_back(acc[i]), constraints += "," + std::to_string(i); // D tied to its old values
  return call(llvm::StructType::get(b_.getContext(), std::vector<llvm::Type*>(n, b_.getFloatTy())), text, constraints, args);
}

std::vector<llvm::Value*> HopperEmitter::wait(int64_t inFlight, const std::vector<llvm::Value*>& acc) {
  std::string text = "wgmma.wait_group.sync.aligned " + std::to_string(inFlight) + ";", constraints;
  if (acc.empty()) return call(b_.getVoidTy(), text, "", {}), std::vector<llvm::Value*>();
  for (size_t i = 0; i < acc.size(); ++i) constraints += (i ? ",=f" : "=f");
  for (size_t i = 0; i < acc.size(); ++i) constraints += "," + std::to_string(i);
  llvm::Type* result = acc.size() == 1 ? (llvm::Type*)b_.getFloatTy() : llvm::StructType::get(b_.getContext(), std::vector<llvm::Type*>(acc.size(), b_.getFloatTy()));
  llvm::Value* d = call(result, text, constraints, acc);
  std::vector<llvm::Value*> out;
  for (size_t i = 0; i < acc.size(); ++i) out.push_back(acc.size() == 1 ? d : b_.CreateExtractValue(d, (unsigned)i));
  return out;
}

} // namespace sgc::codegen
