// The LLVM emitter (see Emitter.h).
#include "codegen/llvm/Emitter.h"

#include "codegen/kir/LaneStep.h"
#include "codegen/llvm/EmitHopper.h"
#include "codegen/llvm/EmitMath.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <mutex>
#include <optional>

namespace sgc::codegen {
namespace {

using kir::Expr;
using kir::ExprKind;
using kir::Scalar;
using kir::Stmt;
using kir::StmtKind;

const char* tripleOf(Target t) { return t == Target::X86 ? "x86_64-unknown-linux-gnu" : "nvptx64-nvidia-cuda"; }

Expected<std::unique_ptr<llvm::TargetMachine>> targetMachine(const TargetSpec& spec) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(tripleOf(spec.kind), err);
  if (!t) return makeError("LLVM has no target " + std::string(tripleOf(spec.kind)) + ": " + err);
  llvm::TargetOptions opts;
  auto* tm = t->createTargetMachine(tripleOf(spec.kind), spec.cpu, spec.features, opts, llvm::Reloc::PIC_, std::nullopt,
                                    llvm::CodeGenOptLevel::Aggressive);
  if (!tm) return makeError("cannot create a target machine for " + spec.cpu);
  return std::unique_ptr<llvm::TargetMachine>(tm);
}

class KernelEmitter {
public:
  KernelEmitter(llvm::Module& m, const kir::Kernel& k, const TargetSpec& t) : m_(m), ctx_(m.getContext()), k_(k), t_(t), b_(ctx_) {}

  Error emit() {
    llvm::Type* ptr = llvm::PointerType::getUnqual(ctx_);
    llvm::Type* i64 = b_.getInt64Ty();
    std::vector<llvm::Type*> params;
    if (t_.kind == Target::X86) params = {ptr, i64, i64};
    else params.assign(k_.buffers.size(), ptr);
    auto* fnTy = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fnTy, llvm::Function::ExternalLinkage, k_.name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    if (t_.kind == Target::NVPTX) fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    // Sums may be reassociated (so reductions vectorize) and multiply-adds fused; no
    // assumption about NaN or infinity is made, so they still propagate.
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc();
    fmf.setAllowContract();
    b_.setFastMathFlags(fmf);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      if (t_.kind == Target::NVPTX) {
        // Tensors start 16-byte aligned (the runtime checks it): LLVM may merge neighbouring
        // accesses into 16-byte vector loads and stores.
        fn_->addParamAttr((unsigned)i, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(16)));
        buffers_.push_back(fn_->getArg((unsigned)i));
        continue;
      }
      llvm::Value* slot = b_.CreateConstGEP1_64(ptr, fn_->getArg(0), i);
      buffers_.push_back(b_.CreateLoad(ptr, slot, "b" + std::to_string(i)));
    }
    if (Error e = declareShared()) return e;
    loopVars_.assign(k_.numLoopVars, nullptr);
    locals_.assign(k_.numLocals, nullptr);
    bf16Locals_.assign(k_.numLocals, false);
    declareLocals(*k_.body); // allocas first, in the entry block
    const Stmt& top = *k_.body;
    if (top.kind == StmtKind::Loop && top.parallel) {
      if (Error e = parallelLoop(top, kir::vectorWidthFor(k_))) return e;
    } else if (kir::isHorizontal(k_) && t_.kind == Target::NVPTX) {
      if (Error e = horizontalParts(top)) return e;
    } else if (Error e = serialBody(top)) {
      return e;
    }
    b_.CreateRetVoid();
    if (t_.kind == Target::NVPTX) markKernel();
    std::string msg;
    llvm::raw_string_ostream os(msg);
    if (llvm::verifyFunction(*fn_, &os)) return fail("LLVM rejected the function: " + os.str());
    return Error::success();
  }

private:
  Error fail(const std::string& msg) { return makeError("kernel " + k_.name + ": " + msg); }

  void markKernel() {
    llvm::NamedMDNode* md = m_.getOrInsertNamedMetadata("nvvm.annotations");
    llvm::Metadata* ops[] = {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "kernel"),
                             llvm::ValueAsMetadata::get(b_.getInt32(1))};
    md->addOperand(llvm::MDNode::get(ctx_, ops));
    auto annotate = [&](const char* key, int value) {
      llvm::Metadata* kv[] = {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, key), llvm::ValueAsMetadata::get(b_.getInt32(value))};
      md->addOperand(llvm::MDNode::get(ctx_, kv));
    };
    if (k_.minBlocks > 0) { // ptxas keeps the registers to what minBlocks blocks of `threads` leave
      annotate("maxntidx", k_.threads);
      annotate("minctasm", k_.minBlocks);
    }
  }

  /// The kernel's shared arrays: one global of the shared address space each (PTX .shared); past
  /// kir::kMostStaticShared, places in the block's dynamic shared memory (one extern array, its
  /// start aligned here to the arrays' largest alignment), which the launch asks for.
  Error declareShared() {
    if (k_.shared.empty()) return Error::success();
    if (t_.kind != Target::NVPTX || !k_.gpuOnly) return fail("shared memory is for GPU-only kernels");
    int64_t align = 16;
    for (const kir::SharedArray& a : k_.shared) {
      if (!elementType(a.dtype)) return fail("a shared array of an element type not generated");
      if (a.align < 16 || (a.align & (a.align - 1))) return fail("a shared array aligned to " + std::to_string(a.align) + " bytes");
      align = std::max(align, a.align);
    }
    int64_t bytes = kir::sharedBytes(k_);
    if (bytes > kir::kMostShared)
      return fail("its shared arrays take " + std::to_string(bytes) + " bytes, more than a block's " + std::to_string(kir::kMostShared));
    if (bytes > kir::kMostStaticShared) return declareDynamicShared(align);
    for (size_t i = 0; i < k_.shared.size(); ++i) {
      const kir::SharedArray& a = k_.shared[i];
      auto* ty = llvm::ArrayType::get(elementType(a.dtype), (uint64_t)a.count);
      auto* g = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(ty),
                                         k_.name + "_s" + std::to_string(i), nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      g->setAlignment(llvm::Align((uint64_t)a.align));
      shared_.push_back(g);
    }
    return Error::success();
  }

  Error declareDynamicShared(int64_t align) {
    auto* ty = llvm::ArrayType::get(b_.getInt8Ty(), 0);
    auto* g = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr, k_.name + "_dynamic", nullptr,
                                       llvm::GlobalValue::NotThreadLocal, 3);
    g->setAlignment(llvm::Align(16));
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Value* start = b_.CreatePtrToInt(g, i32); // shared addresses are 32 bits
    start = b_.CreateAnd(b_.CreateAdd(start, b_.getInt32((uint32_t)align - 1)), b_.getInt32(~(uint32_t)(align - 1)));
    llvm::Value* base = b_.CreateIntToPtr(start, llvm::PointerType::get(ctx_, 3));
    std::vector<int64_t> at = kir::sharedOffsets(k_);
    for (size_t i = 0; i < k_.shared.size(); ++i) shared_.push_back(b_.CreateConstGEP1_64(b_.getInt8Ty(), base, (uint64_t)at[i]));
    return Error::success();
  }

  /// The address of element `index` of shared array `array`.
  llvm::Value* sharedAt(int array, llvm::Value* index) {
    return b_.CreateGEP(elementType(k_.shared[array].dtype), shared_.at(array), index);
  }

  llvm::Value* sreg(llvm::Intrinsic::ID id) { return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty()); }

  /// The outer loop: [begin, end) on x86; a grid-stride loop on NVPTX, each thread `width`
  /// consecutive iterations a step.
  Error parallelLoop(const Stmt& s, int width) {
    llvm::Value *begin, *end, *step;
    if (t_.kind == Target::X86) {
      begin = fn_->getArg(1);
      end = b_.CreateIntrinsic(llvm::Intrinsic::smin, {b_.getInt64Ty()}, {fn_->getArg(2), b_.getInt64(s.extent)});
      step = b_.getInt64(1);
    } else if (kir::hasWgmma(k_)) {
      return exactGrid(s);
    } else {
      llvm::Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
      begin = b_.CreateAdd(b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), ntid), sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x));
      step = b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), ntid);
      end = b_.getInt64(s.extent / width);
      return loop(s, begin, end, step, width);
    }
    return loop(s, begin, end, step);
  }

  /// One iteration a thread, iteration blockIdx * threads + threadIdx, on a grid of exactly
  /// extent / threads blocks (kir::hasWgmma): no loop and no bound, and the thread index known
  /// to be below `threads`, so that values computed from the iteration / threads are seen to be
  /// the same across a block (the warpgroup products' walks are not divergent to ptxas).
  Error exactGrid(const Stmt& s) {
    if (s.extent % k_.threads || s.extent / k_.threads > kir::kMostGridBlocks)
      return fail("a kernel with warpgroup products runs one iteration a thread: " + std::to_string(s.extent) + " iterations in blocks of " +
                  std::to_string(k_.threads));
    auto* tid = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {});
    llvm::Metadata* range[] = {llvm::ConstantAsMetadata::get(b_.getInt32(0)), llvm::ConstantAsMetadata::get(b_.getInt32(k_.threads))};
    tid->setMetadata(llvm::LLVMContext::MD_range, llvm::MDNode::get(ctx_, range));
    llvm::Value* block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    loopVars_[s.id] = b_.CreateAdd(b_.CreateMul(block, b_.getInt64(k_.threads)), b_.CreateZExt(tid, b_.getInt64Ty()));
    return stmts(s.body);
  }

  /// A horizontal kernel (kir::horizontal): part p on its own blocks [first, first + n) of the
  /// grid (kir::partBlocks), a grid-stride loop over them.
  Error horizontalParts(const Stmt& top) {
    std::vector<int64_t> blocks = kir::partBlocks(k_);
    llvm::Value* block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    llvm::Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    int64_t first = 0;
    for (size_t p = 0; p < top.body.size(); ++p) {
      const Stmt& part = *top.body[p];
      llvm::Value* mine = b_.CreateAnd(b_.CreateICmpUGE(block, b_.getInt64(first)), b_.CreateICmpULT(block, b_.getInt64(first + blocks[p])));
      auto* work = llvm::BasicBlock::Create(ctx_, "part" + std::to_string(p), fn_);
      auto* next = llvm::BasicBlock::Create(ctx_, "after" + std::to_string(p), fn_);
      b_.CreateCondBr(mine, work, next);
      b_.SetInsertPoint(work);
      int width = kir::loopVectorWidth(k_, part);
      llvm::Value* begin = b_.CreateAdd(b_.CreateMul(b_.CreateSub(block, b_.getInt64(first)), ntid), tid);
      if (Error e = loop(part, begin, b_.getInt64(part.extent / width), b_.CreateMul(b_.getInt64(blocks[p]), ntid), width)) return e;
      b_.CreateBr(next);
      b_.SetInsertPoint(next);
      first += blocks[p];
    }
    return Error::success();
  }

  /// A serial kernel: one call on the CPU; on the GPU only thread 0 of block 0 works.
  Error serialBody(const Stmt& s) {
    if (t_.kind == Target::X86) return stmt(s);
    llvm::Value* first = b_.CreateICmpEQ(b_.CreateOr(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x), sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x)), b_.getInt64(0));
    auto* work = llvm::BasicBlock::Create(ctx_, "serial", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    b_.CreateCondBr(first, work, done);
    b_.SetInsertPoint(work);
    if (Error e = stmt(s)) return e;
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    return Error::success();
  }

  /// A loop over [begin, end) by step; with width > 1 each step runs iterations iv * width + u
  /// for u < width (the extent is a multiple of width; see unrolledStores).
  Error loop(const Stmt& s, llvm::Value* begin, llvm::Value* end, llvm::Value* step, int width = 1) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop" + std::to_string(s.id), fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "body" + std::to_string(s.id), fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit" + std::to_string(s.id), fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(s.id));
    iv->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, end), body, exit);
    b_.SetInsertPoint(body);
    if (s.parallel && kir::storesOnly(s)) {
      if (Error e = unrolledStores(s, iv, width)) return e;
    } else {
      loopVars_[s.id] = iv;
      if (Error e = stmts(s.body)) return e;
    }
    llvm::Value* next = b_.CreateAdd(iv, step);
    iv->addIncoming(next, b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
    return Error::success();
  }

  /// The stores of parallel loop `s` (its body holds only stores) for iterations iv * width + u,
  /// u < width: every index and value of every u first, the stores' values sharing what they
  /// compute in common, then the stores. So an element's values are all read before any is
  /// written (Kernel.h), and no store separates neighbouring loads (which LLVM then merges into
  /// vector loads, as the stores).
  Error unrolledStores(const Stmt& s, llvm::Value* iv, int width) {
    std::vector<std::tuple<int, llvm::Value*, llvm::Value*>> at;
    if (width > 1) steps_.emplace(s.id, width); // (one lane: nothing to merge)
    laneZero_.clear();
    for (int u = 0; u < width; ++u) {
      loopVars_[s.id] = width == 1 ? iv : b_.CreateAdd(b_.CreateMul(iv, b_.getInt64(width)), b_.getInt64(u));
      lane_ = u;
      cache_.clear();
      for (const auto& st : s.body) {
        auto idx = index(*st->index);
        auto v = idx ? expr(*st->value) : Expected<llvm::Value*>(idx.takeError());
        if (!v) return v.takeError();
        at.emplace_back(st->id, *idx, *v);
      }
    }
    steps_.reset();
    for (size_t k = 0; k < s.body.size(); ++k) // store by store, each over u
      for (int u = 0; u < width; ++u) {
        auto [id, idx, v] = at[u * s.body.size() + k];
        if (Error e = storeElement(id, idx, v)) return e;
      }
    return Error::success();
  }

  Error stmt(const Stmt& s) {
    cache_.clear();
    switch (s.kind) {
    case StmtKind::Loop: {
      llvm::Value* end = b_.getInt64(s.extent);
      if (s.value) {
        auto bound = expr(*s.value);
        if (!bound) return bound.takeError();
        end = b_.CreateIntrinsic(llvm::Intrinsic::smin, {b_.getInt64Ty()}, {end, *bound});
      }
      return loop(s, b_.getInt64(0), end, b_.getInt64(1));
    }
    case StmtKind::Block: return stmts(s.body);
    case StmtKind::Let:
    case StmtKind::Set: {
      auto v = bf16Locals_[s.id] ? bf16Bits(*s.value) : expr(*s.value);
      if (!v) return v.takeError();
      b_.CreateStore(*v, locals_[s.id]);
      return Error::success();
    }
    case StmtKind::Store: {
      auto idx = expr(*s.index);
      auto v = idx ? expr(*s.value) : Expected<llvm::Value*>(idx.takeError());
      if (!v) return v.takeError();
      return storeElement(s.id, *idx, *v);
    }
    case StmtKind::AtomicAdd: {
      auto idx = expr(*s.index);
      auto v = idx ? expr(*s.value) : Expected<llvm::Value*>(idx.takeError());
      if (!v) return v.takeError();
      llvm::Type* et = elementType(k_.buffers[s.id].dtype);
      if (!et || !et->isFloatingPointTy() || et->isHalfTy() || et != (*v)->getType()) return fail("atomic adds need f32 or f64 buffers");
      b_.CreateAtomicRMW(llvm::AtomicRMWInst::FAdd, b_.CreateGEP(et, buffers_[s.id], *idx), *v, llvm::MaybeAlign(et->getPrimitiveSizeInBits() / 8),
                         llvm::AtomicOrdering::Monotonic);
      return Error::success();
    }
    case StmtKind::Mma: return stmts({std::make_shared<Stmt>(s)});
    case StmtKind::CopyAsync: {
      if (t_.kind != Target::NVPTX || (size_t)s.id >= shared_.size()) return fail("an asynchronous copy outside a GPU kernel's shared arrays");
      auto to = expr(*s.index);
      auto from = to ? expr(*s.value) : Expected<llvm::Value*>(to.takeError());
      if (!from) return from.takeError();
      llvm::Type* et = elementType(k_.buffers[s.buffer].dtype);
      if (!et) return fail("an asynchronous copy from a buffer of an element type not generated");
      // 16 bytes: cg, through L2 only (the tile is in shared memory now, L1 would hold it twice);
      // 4 and 8 bytes exist as ca only.
      llvm::Intrinsic::ID copy = s.extent == 16 ? llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16
                                 : s.extent == 8 ? llvm::Intrinsic::nvvm_cp_async_ca_shared_global_8
                                                 : llvm::Intrinsic::nvvm_cp_async_ca_shared_global_4;
      llvm::Value* src = b_.CreateAddrSpaceCast(b_.CreateGEP(et, buffers_[s.buffer], *from), llvm::PointerType::get(ctx_, 1));
      b_.CreateIntrinsic(copy, {}, {sharedAt(s.id, *to), src});
      return Error::success();
    }
    case StmtKind::AsyncCommit:
    case StmtKind::AsyncWait:
      if (t_.kind != Target::NVPTX) return fail("asynchronous copies are generated for GPUs only");
      if (s.kind == StmtKind::AsyncCommit) b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, {}, {});
      else b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32((uint32_t)s.extent)});
      return Error::success();
    case StmtKind::Barrier:
      if (t_.kind != Target::NVPTX) return fail("barriers are generated for GPUs only");
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
      return Error::success();
    case StmtKind::Wgmma: case StmtKind::WgmmaFence: case StmtKind::WgmmaCommit: case StmtKind::WgmmaWait: case StmtKind::FenceProxyAsync:
    case StmtKind::BulkStore: case StmtKind::BulkCommit: case StmtKind::BulkWait: case StmtKind::BulkReadWait:
      return hopperStmt(s);
    case StmtKind::SharedStore: return sharedStore(s);
    }
    return fail("unknown statement");
  }

  /// Hopper's warpgroup statements (kir::wgmmaBf16), for sm_90a only (EmitHopper.h).
  bool hopper() const { return t_.kind == Target::NVPTX && t_.cpu == "sm_90a"; }

  static bool isBulk(StmtKind k) { return k == StmtKind::BulkStore || k == StmtKind::BulkCommit || k == StmtKind::BulkWait || k == StmtKind::BulkReadWait; }

  Error needsHopper(const Stmt& s) {
    if (hopper()) return Error::success();
    const char* what = s.kind == StmtKind::Wgmma             ? "a warpgroup product (wgmma)"
                       : s.kind == StmtKind::FenceProxyAsync ? "fence.proxy.async"
                       : isBulk(s.kind)                      ? "a bulk copy (cp.async.bulk)"
                                                             : "a wgmma fence or wait";
    return fail(std::string(what) + " needs sm_90 (Hopper)");
  }

  Error hopperStmt(const Stmt& s) {
    if (Error e = needsHopper(s)) return e;
    HopperEmitter h(b_);
    switch (s.kind) {
    case StmtKind::Wgmma: return wgmma(s);
    case StmtKind::WgmmaFence: return h.fence(), Error::success();
    case StmtKind::WgmmaCommit: return h.commit(), Error::success();
    case StmtKind::FenceProxyAsync: return h.proxyFence(), Error::success();
    case StmtKind::BulkStore: return bulkStore(s);
    case StmtKind::BulkCommit: return h.bulkCommit(), Error::success();
    case StmtKind::BulkWait: return h.bulkWait(s.extent, false), Error::success();
    case StmtKind::BulkReadWait: return h.bulkWait(s.extent, true), Error::success();
    default: break;
    }
    std::vector<llvm::Value*> acc;
    for (int id : s.acc) acc.push_back(b_.CreateLoad(b_.getFloatTy(), locals_.at(id)));
    std::vector<llvm::Value*> after = h.wait(s.extent, acc);
    for (size_t i = 0; i < after.size(); ++i) b_.CreateStore(after[i], locals_.at(s.acc[i]));
    return Error::success();
  }

  /// A shared store: of an f32 into an f32 array, or of one f32 or a pair (sharedStorePair) into a
  /// bf16 array, rounded.
  Error sharedStore(const Stmt& s) {
    if (t_.kind != Target::NVPTX || (size_t)s.id >= shared_.size()) return fail("a shared store outside a GPU kernel's shared arrays");
    ir::DType dt = k_.shared[s.id].dtype;
    bool pair = !s.operands.empty();
    if (s.value->type != Scalar::F32 || (dt != ir::DType::F32 && dt != ir::DType::BF16) || (pair && dt != ir::DType::BF16))
      return fail("shared stores are of f32 values into f32 or bf16 arrays (pairs into bf16 ones)");
    auto idx = expr(*s.index);
    if (!idx) return idx.takeError();
    if (pair) {
      auto v = packedPair(*s.value, *s.operands[0]);
      if (!v) return v.takeError();
      b_.CreateAlignedStore(*v, sharedAt(s.id, *idx), llvm::Align(4));
      return Error::success();
    }
    auto v = expr(*s.value);
    if (!v) return v.takeError();
    b_.CreateStore(dt == ir::DType::BF16 ? floatToBf16(*v) : *v, sharedAt(s.id, *idx));
    return Error::success();
  }

  /// cp.async.bulk of a shared array's bytes into a buffer (kir::bulkStore).
  Error bulkStore(const Stmt& s) {
    if ((size_t)s.id >= shared_.size() || (size_t)s.buffer >= k_.buffers.size()) return fail("a bulk copy between arrays that do not exist");
    llvm::Type* et = elementType(k_.buffers[s.buffer].dtype);
    if (!et) return fail("a bulk copy into a buffer of an element type not generated");
    auto from = expr(*s.index);
    auto to = from ? expr(*s.value) : Expected<llvm::Value*>(from.takeError());
    if (!to) return to.takeError();
    llvm::Value* global = b_.CreatePtrToInt(b_.CreateAddrSpaceCast(b_.CreateGEP(et, buffers_[s.buffer], *to), llvm::PointerType::get(ctx_, 1)), b_.getInt64Ty());
    llvm::Value* shared = b_.CreateTrunc(b_.CreatePtrToInt(sharedAt(s.id, *from), b_.getInt64Ty()), b_.getInt32Ty());
    HopperEmitter(b_).bulkStore(global, shared, s.extent);
    return Error::success();
  }

  /// The shared address of a wgmma tile (kir::WgmmaTile) as its descriptor: the offset's constant
  /// term (a product's place in its stage) apart, added by the product's assembly.
  Expected<HopperEmitter::Descriptor> descriptor(const kir::WgmmaTile& t) {
    if ((size_t)t.array >= shared_.size() || k_.shared[t.array].dtype != ir::DType::BF16 || k_.shared[t.array].align < 1024)
      return fail("a wgmma tile outside the kernel's 1024-byte aligned bf16 shared arrays");
    auto isConst = [](const kir::ExprRef& e) { return e->kind == ExprKind::Const && e->type == kir::Scalar::I64; };
    kir::ExprRef rest = t.offset;
    int64_t bytes = 0;
    if (isConst(rest)) {
      bytes = rest->bits, rest = nullptr;
    } else if (rest->kind == ExprKind::Binary && rest->op == kir::KOp::Add && (isConst(rest->args[0]) || isConst(rest->args[1]))) {
      bool first = isConst(rest->args[0]);
      bytes = rest->args[first ? 0 : 1]->bits, rest = rest->args[first ? 1 : 0];
    }
    if (bytes % 16) bytes = 0, rest = t.offset; // not a whole field step: the address whole
    llvm::Value* address = b_.CreatePtrToInt(shared_[t.array], b_.getInt64Ty());
    if (rest) {
      auto offset = expr(*rest);
      if (!offset) return offset.takeError();
      address = b_.CreateAdd(address, *offset);
    }
    return HopperEmitter(b_).descriptor(address, bytes, t);
  }

  /// A product's register A operand as four packed pairs of bf16.
  Expected<std::vector<llvm::Value*>> wgmmaA(const Stmt& s) {
    std::vector<llvm::Value*> a;
    for (size_t i = 0; i < s.operands.size(); i += 2) {
      auto pair = packedPair(*s.operands[i], *s.operands[i + 1]);
      if (!pair) return pair.takeError();
      a.push_back(*pair);
    }
    return a;
  }

  /// A fence and the products right after it, their register operands packed before the fence:
  /// a register written between the fence and a product that reads it would need another fence
  /// (which ptxas inserts, serializing the products).
  Expected<size_t> fencedProducts(const std::vector<kir::StmtRef>& list, size_t i) {
    std::vector<std::vector<llvm::Value*>> packed;
    size_t j = i + 1;
    for (; j < list.size() && list[j]->kind == StmtKind::Wgmma; ++j) {
      cache_.clear();
      auto a = wgmmaA(*list[j]);
      if (!a) return a.takeError();
      packed.push_back(std::move(*a));
    }
    if (Error e = stmt(*list[i])) return e;
    for (size_t r = 0; r < packed.size(); ++r)
      if (Error e = wgmma(*list[i + 1 + r], &packed[r])) return e;
    return j;
  }

  /// A warpgroup product; its accumulators' old values are read only when it adds to them.
  Error wgmma(const Stmt& s, const std::vector<llvm::Value*>* packedA = nullptr) {
    if (Error e = needsHopper(s)) return e;
    cache_.clear();
    HopperEmitter::Descriptor aTile;
    std::vector<llvm::Value*> a, acc;
    if (s.tiles.size() > 1) {
      auto d = descriptor(s.tiles[1]);
      if (!d) return d.takeError();
      aTile = *d;
    } else {
      auto regs = packedA ? Expected<std::vector<llvm::Value*>>(*packedA) : wgmmaA(s);
      if (!regs) return regs.takeError();
      a = std::move(*regs);
    }
    auto b = descriptor(s.tiles[0]);
    if (!b) return b.takeError();
    for (size_t i = 0; s.extent && i < s.acc.size(); ++i) acc.push_back(b_.CreateLoad(b_.getFloatTy(), locals_.at(s.acc[i])));
    llvm::Value* d = HopperEmitter(b_).product(s.acc.size(), acc, a, aTile, *b, s.tiles[0].mnMajor, aTile.base && s.tiles[1].mnMajor);
    for (size_t i = 0; i < s.acc.size(); ++i) b_.CreateStore(b_.CreateExtractValue(d, (unsigned)i), locals_.at(s.acc[i]));
    return Error::success();
  }

  /// A bf16 operand's 16 bits: a bf16 load (or local) as it is, else the f32 value rounded.
  Expected<llvm::Value*> bf16Bits(const Expr& e) {
    if (e.kind == ExprKind::Local && bf16Locals_[e.id]) return (llvm::Value*)b_.CreateLoad(b_.getInt16Ty(), locals_.at(e.id));
    if (isBf16Load(e)) {
      auto idx = expr(*e.args[0]);
      if (!idx) return idx.takeError();
      llvm::Value* at = e.kind == ExprKind::Load ? b_.CreateGEP(b_.getInt16Ty(), buffers_[e.id], *idx) : sharedAt(e.id, *idx);
      return (llvm::Value*)b_.CreateLoad(b_.getInt16Ty(), at);
    }
    auto v = expr(e);
    if (!v) return v.takeError();
    if (!(*v)->getType()->isFloatTy()) return fail("mma operands are f32 values or bf16 loads");
    return floatToBf16(*v);
  }

  /// A load of a bf16 element (of a buffer or a shared array), or a bf16 local: an mma operand
  /// as it is.
  bool isBf16Load(const Expr& e) const {
    return (e.kind == ExprKind::Local && bf16Locals_[e.id]) || (e.kind == ExprKind::Load && k_.buffers[e.id].dtype == ir::DType::BF16) ||
           (e.kind == ExprKind::SharedLoad && k_.shared[e.id].dtype == ir::DType::BF16);
  }

  /// A pair of bf16 operands as one 32-bit register (the lower-numbered element in the low half).
  Expected<llvm::Value*> packedPair(const Expr& lo, const Expr& hi) {
    if (!isBf16Load(lo) && !isBf16Load(hi) && lo.type == Scalar::F32 && hi.type == Scalar::F32) {
      auto l = expr(lo);
      auto h = l ? expr(hi) : Expected<llvm::Value*>(l.takeError());
      if (!h) return h.takeError();
      // cvt.rn.bf16x2.f32 puts its first operand in the high half.
      return b_.CreateBitCast(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ff2bf16x2_rn, {}, {*h, *l}), b_.getInt32Ty());
    }
    auto l = bf16Bits(lo);
    auto h = l ? bf16Bits(hi) : Expected<llvm::Value*>(l.takeError());
    if (!h) return h.takeError();
    // As a vector, not shifts and ors: neighbouring loads then merge into wider ones.
    llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(b_.getInt16Ty(), 2));
    v = b_.CreateInsertElement(b_.CreateInsertElement(v, *l, (uint64_t)0), *h, (uint64_t)1);
    return b_.CreateBitCast(v, b_.getInt32Ty());
  }

  static constexpr size_t kMmaRun = 16;

  static bool readsLocal(const Expr& e, const std::set<int>& ids) {
    if (e.kind == ExprKind::Local && ids.count(e.id)) return true;
    for (const auto& a : e.args)
      if (readsLocal(*a, ids)) return true;
    return false;
  }

  /// Statements in order; a run of tensor-core products (mma.sync.m16n8k16.row.col.f32.bf16.
  /// bf16.f32) first loads and packs the operands of all of them (the B operands of the whole
  /// run, then the A operands), then issues them: an mma is a call LLVM does not move loads
  /// across, and loads side by side merge into 16-byte ones; an operand two products share is
  /// loaded once. A run ends before a product whose operands read an earlier one's result, and
  /// after kMmaRun products (enough for a lane's 16-byte loads of two tiles' products; longer
  /// runs hold more registers).
  Error stmts(const std::vector<kir::StmtRef>& list) {
    for (size_t i = 0; i < list.size();) {
      if (list[i]->kind == StmtKind::WgmmaFence) {
        auto next = fencedProducts(list, i);
        if (!next) return next.takeError();
        i = *next;
        continue;
      }
      if (list[i]->kind != StmtKind::Mma) {
        if (Error e = stmt(*list[i++])) return e;
        continue;
      }
      if (t_.kind != Target::NVPTX) return fail("tensor-core products are generated for GPUs only");
      std::set<int> written;
      std::vector<std::vector<llvm::Value*>> args;
      cache_.clear();
      size_t j = i;
      for (; j < list.size() && j < i + kMmaRun && list[j]->kind == StmtKind::Mma; ++j) {
        const Stmt& s = *list[j];
        bool dependent = false;
        for (const auto& o : s.operands) dependent = dependent || readsLocal(*o, written);
        if (dependent) break;
        written.insert(s.acc.begin(), s.acc.end());
      }
      // The B operands (loads, mostly) of the whole run first, side by side, then the A operands.
      args.assign(j - i, std::vector<llvm::Value*>(6, nullptr));
      for (size_t from : {size_t(8), size_t(0)})
        for (size_t r = 0; r < j - i; ++r) {
          const Stmt& s = *list[i + r];
          for (size_t o = from; o < (from ? s.operands.size() : 8); o += 2) {
            auto pair = packedPair(*s.operands[o], *s.operands[o + 1]);
            if (!pair) return pair.takeError();
            args[r][o / 2] = *pair;
          }
        }
      for (size_t r = 0; r < args.size(); ++r) {
        const Stmt& s = *list[i + r];
        for (int id : s.acc) args[r].push_back(b_.CreateLoad(b_.getFloatTy(), locals_.at(id)));
        llvm::Value* d = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16, {}, args[r]);
        for (unsigned c = 0; c < 4; ++c) b_.CreateStore(b_.CreateExtractValue(d, c), locals_.at(s.acc[c]));
      }
      i = j;
    }
    return Error::success();
  }

  void declareLocals(const Stmt& s) {
    if (s.kind == StmtKind::Let && !locals_[s.id]) {
      bf16Locals_[s.id] = s.bf16;
      locals_[s.id] = b_.CreateAlloca(s.bf16 ? b_.getInt16Ty() : scalarType(s.value->type), nullptr, "t" + std::to_string(s.id));
    }
    for (const auto& b : s.body) declareLocals(*b);
  }

  llvm::Type* scalarType(Scalar s) {
    switch (s) {
    case Scalar::F32: return b_.getFloatTy();
    case Scalar::F64: return b_.getDoubleTy();
    case Scalar::I64: return b_.getInt64Ty();
    case Scalar::I1: return b_.getInt1Ty();
    }
    return nullptr;
  }

  /// The LLVM type of a buffer's elements, or null for dtypes not generated yet.
  llvm::Type* elementType(ir::DType t) {
    switch (t) {
    case ir::DType::F32: return b_.getFloatTy();
    case ir::DType::F64: return b_.getDoubleTy();
    case ir::DType::I64: case ir::DType::U64: return b_.getInt64Ty();
    case ir::DType::I32: case ir::DType::U32: return b_.getInt32Ty();
    case ir::DType::I16: case ir::DType::U16: return b_.getInt16Ty();
    case ir::DType::I8: case ir::DType::U8: case ir::DType::Bool: return b_.getInt8Ty();
    case ir::DType::F16: return b_.getHalfTy();
    case ir::DType::BF16: return b_.getInt16Ty(); // converted by hand: see bf16ToFloat
    default: return nullptr;
    }
  }

  /// bf16 <-> f32 with integer operations (round to nearest even, NaN kept quiet), so no
  /// target needs a library routine for it.
  llvm::Value* floatToBf16(llvm::Value* f) { return math_.floatToBf16(f); }
  llvm::Value* bf16ToFloat(llvm::Value* bits) { return math_.bf16ToFloat(bits); }

  Expected<llvm::Value*> loadElement(int buffer, llvm::Value* index, Scalar want) {
    ir::DType dt = k_.buffers[buffer].dtype;
    llvm::Type* et = elementType(dt);
    if (!et) return fail(std::string(ir::dtypeName(dt)) + " buffers are not generated yet");
    return convertLoaded(b_.CreateLoad(et, b_.CreateGEP(et, buffers_[buffer], index)), dt, want);
  }

  /// A loaded element of dtype `dt` as the scalar type `want` computes on.
  llvm::Value* convertLoaded(llvm::Value* v, ir::DType dt, Scalar want) {
    llvm::Type* et = v->getType();
    if (dt == ir::DType::BF16) return bf16ToFloat(v);
    if (dt == ir::DType::F16) return b_.CreateFPExt(v, b_.getFloatTy());
    if (dt == ir::DType::Bool) return b_.CreateICmpNE(v, b_.getInt8(0));
    if (et->isIntegerTy() && want == Scalar::I64)
      return ir::isUnsignedInt(dt) ? b_.CreateZExt(v, b_.getInt64Ty()) : b_.CreateSExt(v, b_.getInt64Ty());
    return v;
  }

  Error storeElement(int buffer, llvm::Value* index, llvm::Value* v) {
    ir::DType dt = k_.buffers[buffer].dtype;
    llvm::Type* et = elementType(dt);
    if (!et) return fail(std::string(ir::dtypeName(dt)) + " buffers are not generated yet");
    if (dt == ir::DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
    else if (dt == ir::DType::BF16) v = floatToBf16(v);
    else if (dt == ir::DType::F16) v = b_.CreateFPTrunc(v, b_.getHalfTy());
    else if (et->isIntegerTy() && v->getType() != et) v = b_.CreateTrunc(v, et);
    b_.CreateStore(v, b_.CreateGEP(et, buffers_[buffer], index));
    return Error::success();
  }

  llvm::Value* convert(llvm::Value* v, Scalar from, Scalar to) {
    llvm::Type* t = scalarType(to);
    bool fFrom = from == Scalar::F32 || from == Scalar::F64, fTo = to == Scalar::F32 || to == Scalar::F64;
    if (fFrom && fTo) return b_.CreateFPCast(v, t);
    if (fFrom && to == Scalar::I1) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0));
    if (fFrom) return b_.CreateFPToSI(v, t);
    if (from == Scalar::I1) return fTo ? b_.CreateUIToFP(v, t) : b_.CreateZExt(v, t);
    if (to == Scalar::I1) return b_.CreateICmpNE(v, b_.getInt64(0));
    return b_.CreateSIToFP(v, t);
  }

  /// A butterfly over aligned groups of `lanes` lanes with shfl.sync: every lane ends with its
  /// group's result.
  Expected<llvm::Value*> warpReduce(kir::KOp op, llvm::Value* v, int lanes, int stride) {
    if (t_.kind != Target::NVPTX || !v->getType()->isFloatTy()) return fail("warp reductions are generated for GPUs, on f32, only");
    for (int offset = lanes / 2 * stride; offset >= stride; offset /= 2) {
      llvm::Value* other = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
                                              {b_.getInt32(-1), v, b_.getInt32(offset), b_.getInt32(31)});
      auto combined = math_.binary(op, v, other);
      if (!combined) return combined.takeError();
      v = *combined;
    }
    return v;
  }

  /// An element index. Lane u > 0 of unrolledStores computes an index that moves by a constant
  /// across the lanes (kir::laneStep) as lane 0's index plus that constant, so that LLVM sees the
  /// lanes' accesses are neighbours and merges them (through a transpose, a reshape or a slice,
  /// the divisions and remainders of the iteration hide it). Lane 0's index is masked to the
  /// power of two that laneStep finds divides it (the value unchanged), so that LLVM also sees
  /// the merged access aligned.
  Expected<llvm::Value*> index(const Expr& e) {
    if (!steps_) return expr(e);
    kir::LaneStep step = steps_->of(e);
    if (lane_ > 0)
      if (auto zero = laneZero_.find(&e); zero != laneZero_.end() && step.affine)
        return step.step == 0 ? zero->second : b_.CreateAdd(zero->second, b_.getInt64(step.step * lane_), "", step.step > 0, true);
    auto v = expr(e);
    if (!v || lane_ != 0) return v;
    if (step.affine && step.step != 0) {
      int64_t aligned = step.divisor & -step.divisor; // 0 when index(base) is 0
      if (aligned != 1) *v = b_.CreateAnd(*v, b_.getInt64(-aligned));
    }
    return laneZero_[&e] = *v;
  }

  /// Within(x, n) in lane u of unrolledStores: clamp(x - s u, 0, n - s width) + s u when x steps
  /// by s from a multiple of s width (kir::stepsWithin), so that the lanes' speculative loads
  /// stay neighbours; else as anywhere.
  Expected<llvm::Value*> laneWithin(const Expr& e, llvm::Value* x, llvm::Value* n) {
    kir::LaneStep step = steps_->of(*e.args[0]);
    const Expr& bound = *e.args[1];
    if (bound.kind != ExprKind::Const || !kir::stepsWithin(step, bound.bits, steps_->width())) return math_.binary(e.op, x, n);
    llvm::Value* shift = b_.getInt64(step.step * lane_);
    llvm::Value* base = b_.CreateSub(x, shift);
    llvm::Value* low = b_.CreateIntrinsic(llvm::Intrinsic::smax, {b_.getInt64Ty()}, {base, b_.getInt64(0)});
    llvm::Value* in = b_.CreateIntrinsic(llvm::Intrinsic::smin, {b_.getInt64Ty()}, {low, b_.getInt64(bound.bits - step.step * steps_->width())});
    return b_.CreateAdd(in, shift);
  }

  Expected<llvm::Value*> expr(const Expr& e) {
    auto hit = cache_.find(&e);
    if (hit != cache_.end()) return hit->second;
    std::vector<llvm::Value*> a;
    for (const auto& x : e.args) {
      auto v = e.kind == ExprKind::Load ? index(*x) : expr(*x);
      if (!v) return v.takeError();
      a.push_back(*v);
    }
    Expected<llvm::Value*> r = nullptr;
    switch (e.kind) {
    case ExprKind::Const:
      r = e.type == Scalar::I64 ? (llvm::Value*)b_.getInt64(e.bits)
          : e.type == Scalar::I1 ? (llvm::Value*)b_.getInt1(e.value != 0)
                                 : (llvm::Value*)llvm::ConstantFP::get(scalarType(e.type), e.value);
      break;
    case ExprKind::LoopVar: r = loopVars_.at(e.id); break;
    case ExprKind::Local:
      r = bf16Locals_[e.id] ? bf16ToFloat(b_.CreateLoad(b_.getInt16Ty(), locals_.at(e.id))) : b_.CreateLoad(scalarType(e.type), locals_.at(e.id));
      break;
    case ExprKind::Load: r = loadElement(e.id, a[0], e.type); break;
    case ExprKind::SharedLoad:
      if ((size_t)e.id >= shared_.size()) return fail("a load from a shared array the kernel does not have");
      r = convertLoaded(b_.CreateLoad(elementType(k_.shared[e.id].dtype), sharedAt(e.id, a[0])), k_.shared[e.id].dtype, e.type);
      break;
    case ExprKind::Unary: r = math_.unary(e.op, a[0]); break;
    case ExprKind::Binary: r = e.op == kir::KOp::Within && steps_ ? laneWithin(e, a[0], a[1]) : math_.binary(e.op, a[0], a[1]); break;
    case ExprKind::Select: r = b_.CreateSelect(a[0], a[1], a[2]); break;
    case ExprKind::Cast: r = convert(a[0], e.args[0]->type, e.type); break;
    case ExprKind::WarpReduce: r = warpReduce(e.op, a[0], (int)e.bits, std::max(1, e.id)); break;
    }
    if (r) cache_[&e] = *r;
    return r;
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  const kir::Kernel& k_;
  const TargetSpec& t_;
  llvm::IRBuilder<> b_;
  MathEmitter math_{m_, b_, t_.kind};
  llvm::Function* fn_ = nullptr;
  std::vector<llvm::Value*> buffers_, loopVars_, locals_;
  std::vector<bool> bf16Locals_; ///< locals held as bf16 bits (kir::letBf16)
  std::vector<llvm::Value*> shared_; ///< each shared array's start (addrspace 3)
  std::map<const Expr*, llvm::Value*> cache_;
  std::optional<kir::LaneSteps> steps_;          ///< in unrolledStores over more than one lane: its indices' steps
  int lane_ = 0;                                 ///< and the lane being computed
  std::map<const Expr*, llvm::Value*> laneZero_; ///< and lane 0's indices
};

} // namespace

Expected<std::unique_ptr<llvm::Module>> emitKernels(llvm::LLVMContext& ctx, const std::vector<kir::Kernel>& kernels,
                                                    const TargetSpec& target) {
  auto tm = targetMachine(target);
  if (!tm) return tm.takeError();
  auto m = std::make_unique<llvm::Module>("sgc", ctx);
  m->setSourceFileName("sgc");
  m->setTargetTriple(tripleOf(target.kind));
  m->setDataLayout((*tm)->createDataLayout());
  for (const kir::Kernel& k : kernels)
    if (target.kind == Target::X86 ? !k.gpuOnly : !k.cpuOnly)
      if (Error e = KernelEmitter(*m, k, target).emit()) return e;
  return m;
}

Expected<std::string> compileModule(llvm::Module& m, const TargetSpec& target) {
  auto tm = targetMachine(target);
  if (!tm) return tm.takeError();
  llvm::PassBuilder pb(tm->get());
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
  llvm::SmallString<0> out;
  llvm::raw_svector_ostream os(out);
  llvm::legacy::PassManager pm;
  auto kind = target.kind == Target::X86 ? llvm::CodeGenFileType::ObjectFile : llvm::CodeGenFileType::AssemblyFile;
  if ((*tm)->addPassesToEmitFile(pm, os, nullptr, kind)) return makeError("LLVM cannot emit code for " + target.cpu);
  pm.run(m);
  return std::string(out.begin(), out.end());
}

std::string moduleText(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

} // namespace sgc::codegen
