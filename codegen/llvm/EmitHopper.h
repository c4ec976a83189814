// Hopper's warpgroup instructions (PTX of sm_90a: wgmma and the fences around it, and the bulk
// copies out of shared memory) as LLVM IR.
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

  /// cp.async.bulk.global.shared::cta.bulk_group of `bytes` bytes from shared address `shared`
  /// (i32) to global address `global` (i64); its commit_group, and wait_group `inFlight` (with
  /// `read`, wait_group.read: until their shared bytes are read).
  void bulkStore(llvm::Value* global, llvm::Value* shared, int64_t bytes) {
    call(b_.getVoidTy(), "cp.async.bulk.global.shared::cta.bulk_group [$0], [$1], " + std::to_string(bytes) + ";", "l,r", {global, shared});
  }
  void bulkCommit() { call(b_.getVoidTy(), "cp.async.bulk.commit_group;", "", {}); }
  void bulkWait(int64_t inFlight, bool read) {
    call(b_.getVoidTy(), std::string("cp.async.bulk.wait_group") + (read ? ".read " : " ") + std::to_string(inFlight) + ";", "", {});
  }

  /// A tile's wgmma descriptor as `base` (i64) plus `bytes` (a constant, a multiple of 16, that
  /// the product's own assembly adds): a product's tile at a constant distance from its stage's
  /// start leaves one value live a stage, not one a product (which LLVM would hoist out of a walk
  /// where the stage does not change: a register pair each).
  struct Descriptor {
    llvm::Value* base = nullptr;
    int64_t bytes = 0;
  };

  /// wgmma's descriptor of `tile` at shared address `address` (i64, in the shared window) plus
  /// `bytes` (the tile then lies in the same 256 KiB window).
  Descriptor descriptor(llvm::Value* address, int64_t bytes, const kir::WgmmaTile& tile);

  /// D = A B (+ D when `acc` holds D's values: one f32 each, else A B alone) for a 64 x 16 A from
  /// the warp's registers (`a`: four packed bf16 pairs) or a descriptor (`aTile`, when its base is
  /// set), and B's descriptor; `n` accumulators a thread; an MN-major tile is passed transposed.
  /// Returns D's values as a struct of n floats.
  llvm::Value* product(size_t n, const std::vector<llvm::Value*>& acc, const std::vector<llvm::Value*>& a, const Descriptor& aTile,
                       const Descriptor& b, bool bMnMajor, bool aMnMajor = false);

  /// wgmma.wait_group `inFlight`, `acc` passed through it; returns their values after it.
  std::vector<llvm::Value*> wait(int64_t inFlight, const std::vector<llvm::Value*>& acc);

private:
  llvm::Value* call(llvm::Type* result, const std::string& text, const std::string& constraints, const std::vector<llvm::Value*>& args);

  llvm::IRBuilder<>& b_;
};

} // namespace sgc::codegen
