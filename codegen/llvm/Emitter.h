// Kernel IR to LLVM IR, and LLVM IR to machine code, for two targets:
//   x86-64: `void name(ptr args, i64 begin, i64 end)`, args an array of
//           buffer pointers; the kernel's outer parallel loop runs over
//           [begin, end) so a thread pool can split it. Object code out.
//   NVPTX:  `void name(ptr b0, ..., ptr bn)` kernels; the outer parallel
//           loop is a grid-stride loop over blocks and threads. PTX out.
// Module names and contents depend only on the kernels and the target, so
// compiling twice gives the same bytes.
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>
#include <vector>

namespace sgc::codegen {

enum class Target { X86, NVPTX };

struct TargetSpec {
  Target kind = Target::X86;
  std::string cpu = "x86-64-v3"; ///< x86: a -march level; NVPTX: sm_90a, sm_80 (also ptxas's -arch)
  std::string features;          ///< NVPTX: +ptx85

  static TargetSpec x86() { return {Target::X86, "x86-64-v3", ""}; }
  /// A GPU architecture as `--target` names it: sm_90 is generated as sm_90a, Hopper's own
  /// instructions (wgmma) included; such code runs on compute capability 9.0 only.
  static TargetSpec nvptx(const std::string& sm) { return {Target::NVPTX, sm == "sm_90" ? "sm_90a" : sm, "+ptx85"}; }
};

/// Builds a module holding one function per kernel, with the target's
/// triple and data layout. Errors name the kernel and what is unsupported.
Expected<std::unique_ptr<llvm::Module>> emitKernels(llvm::LLVMContext& ctx, const std::vector<kir::Kernel>& kernels,
                                                    const TargetSpec& target);

/// Optimizes the module at O3 and emits an ELF object (x86) or PTX text.
Expected<std::string> compileModule(llvm::Module& m, const TargetSpec& target);

/// The module as LLVM assembly (--emit=llvm).
std::string moduleText(const llvm::Module& m);

} // namespace sgc::codegen
