// Hopper's warpgroup instructions (PTX of sm_90a: wgmma and the fences around it) as LLVM IR.
// LLVM 19 has no intrinsics for them, so each is inline assembly, volatile and clobbering memory:
// LLVM keeps them in order with each other and with the shared memory accesses around them, and
// a product's accumulators are its tied operands, so that LLVM reads them only after the wait
// that follows it (kir::wgmmaBf16 says what the statements mean).
#pragma once
#include "codegen/kir/Kernel.h"

#include <llvm/IR/IRBuilder.h>

#include <string>
#include <vector>

namespace sgc::codegen {

class HopperEmitter {
public:
  explicit HopperEmitter(llvm::IRBuilder<>& b) : b_(b) {}

  /// wgmma.fence, wgmma.commit_group, fence.proxy.async.shared::cta.
  void fence() { call(b_.getVoidTy(), "wgmma.fence.sync.aligned;", "", {}); }
  void commit() { call(b_.getVoidTy(), "wgmma.commit_group.sync.aligned;", "", {}); }
  void proxyFence() { call(b_.getVoidTy(), "fence.proxy.async.shared::cta;", "", {}); }

  /// wgmma's 64-bit descriptor of `tile` at shared address `address` (i64, in the shared window).
  llvm::Value* descriptor(llvm::Value* address, const kir::WgmmaTile& tile);

  /// D = A B (+ D when `acc` holds D's values: one f32 each, else A B alone) for a 64 x 16 A from
  /// the warp's registers (`a`: four packed bf16 pairs) or a descriptor (`aTile`), and B's
  /// descriptor; `n` accumulators a thread. Returns D's values as a struct of n floats.
  llvm::Value* product(size_t n, const std::vector<llvm::Value*>& acc, const std::vector<llvm::Value*>& a, llvm::Value* aTile, llvm::Value* b,
                       bool bMnMajor);

  /// wgmma.wait_group `inFlight`, `acc` passed through it; returns their values after it.
  std::vector<llvm::Value*> wait(int64_t inFlight, const std::vector<llvm::Value*>& acc);

private:
  llvm::Value* call(llvm::Type* result, const std::string& text, const std::string& constraints, const std::vector<llvm::Value*>& args);

  llvm::IRBuilder<>& b_;
};

} // namespace sgc::codegen
