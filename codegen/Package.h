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

namespace sgc::codegen {

struct PackageOptions {
  std::string runtimeLib;    ///< path of libsgcrt.a
  std::string versionScript; ///< path of runtime/sgc.map
  std::string linker = "c++";
  std::string ptxas;         ///< path of ptxas (for GPU targets)
  TargetSpec cpu = TargetSpec::x86();
  std::vector<std::string> gpus; ///< sm_90, sm_80: PTX and cubin carried for each
  class Progress* progress = nullptr; ///< where the stages are reported (none: silent)
};

/// The ELF section of a library that holds its program's JSON (sgc inspect reads it from the file).
constexpr const char* kProgramSection = ".sgc_program";

/// The kernels a GPU launches as PTX for one GPU architecture (--emit=ptx), in one module.
Expected<std::string> kernelsPtx(const CompiledProgram& p, const std::string& sm);

/// PTX assembled by ptxas into a cubin for `sm`.
Expected<std::string> assemblePtx(const std::string& ptx, const std::string& sm, const std::string& ptxas);

/// The LLVM module of the host object (the CPU's kernels, the program, the weights and the kernel
/// table), for --emit=llvm. The GPU code is in an object of its own.
Expected<std::unique_ptr<llvm::Module>> hostModule(llvm::LLVMContext& ctx, const CompiledProgram& p, const TargetSpec& cpu);

/// The host object's bytes (ELF), for --emit=obj.
Expected<std::string> hostObject(const CompiledProgram& p, const TargetSpec& cpu);

/// Writes the shared object to `out` (through a temporary file renamed into place).
Error writeSharedObject(const CompiledProgram& p, const std::string& out, const PackageOptions& opts);

} // namespace sgc::codegen
