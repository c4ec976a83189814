// Packaging: a host object holding the CPU kernels, the program
// description, the initial weights and the kernel table, and an object
// holding the GPU code (PTX and cubins), linked with the runtime library
// (sgcrt) by the system linker into a shared object that exports only
// sgc_*. libstdc++ and libgcc are linked statically, so the .so needs only
// the C library, libm and pthreads at load time.
#pragma once
#include "codegen/Program.h"
#include "codegen/llvm/Emitter.h"

#include <string>
#include <vector>

namespace sgc::codegen {

/// What ptxas reports of one GPU kernel (`ptxas -v`), for --stats: a memory-bound kernel with few
/// warps an SM waits on memory latency, so its registers bound its speed.
struct GpuKernelResources {
  std::string name;
  int threads = 0;    ///< a block's
  int registers = 0;  ///< a thread's
  int spillBytes = 0; ///< stored and loaded again through local memory
  std::string serialized = {}; ///< why ptxas serialized its warpgroup products (wgmma), if it did
  /// The blocks an SM holds by registers (65,536 an SM on sm_80 and sm_90, given to a warp 256 at
  /// a time), within its limits of 2,048 threads and 32 blocks (shared memory not counted).
  int blocksBySm() const;
  int warpsPerBlock() const { return (threads + 31) / 32; }
};

/// The kernels' resources in a ptxas -v log (each "Compiling entry function" and the counts after
/// it, and the notes that name a kernel whose warpgroup products ptxas serialized; threads left 0).
std::vector<GpuKernelResources> parsePtxasResources(const std::string& log);

/// --stats' lines on them: how many, how many spill, the few with the fewest warps an SM, and
/// those whose warpgroup products run one after another (ptxas's reason with each).
std::string resourcesReport(const std::vector<GpuKernelResources>& kernels, const std::string& sm);

struct PackageOptions {
  std::string runtimeLib;    ///< path of libsgcrt.a
  std::string versionScript; ///< path of runtime/sgc.map
  std::string linker = "c++";
  std::string ptxas;         ///< path of ptxas (for GPU targets)
  TargetSpec cpu = TargetSpec::x86();
  std::vector<std::string> gpus; ///< sm_90, sm_80: PTX and cubin carried for each
  class Progress* progress = nullptr; ///< where the stages are reported (none: silent)
  /// If set, filled with the first GPU target's kernels as ptxas reports them, in program order.
  std::vector<GpuKernelResources>* resources = nullptr;
};

/// The ELF section of a library that holds its program's JSON (sgc inspect reads it from the file).
constexpr const char* kProgramSection = ".sgc_program";

/// The kernels a GPU launches as PTX for one GPU architecture (--emit=ptx), in one module.
Expected<std::string> kernelsPtx(const CompiledProgram& p, const std::string& sm);

/// PTX assembled by ptxas into a cubin for `sm`; with `log`, ptxas's -v report goes there (from a
/// second run: the cubin is the same either way).
Expected<std::string> assemblePtx(const std::string& ptx, const std::string& sm, const std::string& ptxas, std::string* log = nullptr);

/// The LLVM module of the host object (the CPU's kernels, the program, the weights and the kernel
/// table), for --emit=llvm. The GPU code is in an object of its own.
Expected<std::unique_ptr<llvm::Module>> hostModule(llvm::LLVMContext& ctx, const CompiledProgram& p, const TargetSpec& cpu);

/// The host object's bytes (ELF), for --emit=obj.
Expected<std::string> hostObject(const CompiledProgram& p, const TargetSpec& cpu);

/// Writes the shared object to `out` (through a temporary file renamed into place).
Error writeSharedObject(const CompiledProgram& p, const std::string& out, const PackageOptions& opts);

} // namespace sgc::codegen
