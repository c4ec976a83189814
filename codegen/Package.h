// Packaging: one host object holding the CPU kernels, the program
// description, the initial weights and the kernel table, linked with the
// runtime library (sgcrt) by the system linker into a shared object that
// exports only sgc_*. libstdc++ and libgcc are linked statically, so the
// .so needs only the C library, libm and pthreads at load time.
#pragma once
#include "codegen/Program.h"
#include "codegen/llvm/Emitter.h"

#include <string>

namespace sgc::codegen {

struct PackageOptions {
  std::string runtimeLib;    ///< path of libsgcrt.a
  std::string versionScript; ///< path of runtime/sgc.map
  std::string linker = "c++";
  TargetSpec cpu = TargetSpec::x86();
};

/// The LLVM module of the host object (kernels and data), for --emit=llvm.
Expected<std::unique_ptr<llvm::Module>> hostModule(llvm::LLVMContext& ctx, const CompiledProgram& p, const TargetSpec& cpu);

/// The host object's bytes (ELF), for --emit=obj.
Expected<std::string> hostObject(const CompiledProgram& p, const TargetSpec& cpu);

/// Writes the shared object to `out` (through a temporary file renamed into place).
Error writeSharedObject(const CompiledProgram& p, const std::string& out, const PackageOptions& opts);

} // namespace sgc::codegen
