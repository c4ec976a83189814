// What the kernel tests share (KernelTest.cpp, SampleKernelTest.cpp): kernels compiled for this
// CPU by LLVM's JIT and run over named buffers, and PTX assembled by ptxas.
#pragma once
#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"
#include "codegen/llvm/Emitter.h"
#include "ir/Text.h"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <unistd.h>

namespace sgc::test {

using namespace sgc;

using KernelFn = void (*)(void**, int64_t, int64_t);

/// The kernels compiled for this CPU by LLVM's JIT; fn(name) finds one (null, with a test failure, if it cannot).
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  explicit Jit(const std::vector<kir::Kernel>& ks) {
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto mod = codegen::emitKernels(*ctx, ks, codegen::TargetSpec::x86());
    auto created = llvm::orc::LLJITBuilder().create();
    if (!mod || !created) {
      ADD_FAILURE() << (mod ? llvm::toString(created.takeError()) : errorText(mod.takeError()));
      return;
    }
    jit = std::move(*created);
    if (auto e = jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(*mod), std::move(ctx)))) ADD_FAILURE() << llvm::toString(std::move(e));
  }
  KernelFn fn(const std::string& name) {
    if (!jit) return nullptr;
    auto sym = jit->lookup(name);
    if (!sym) {
      ADD_FAILURE() << llvm::toString(sym.takeError());
      return nullptr;
    }
    return sym->toPtr<KernelFn>();
  }
};

/// Lowers node `n` and runs its kernels in order on this CPU (each parallel one in two thread-pool
/// halves) over `buffers`, by value name.
inline void runKernels(const ir::Node& n, const std::string& name, std::map<std::string, ir::Tensor>& buffers) {
  auto ks = kir::lowerNode(name, n);
  ASSERT_TRUE(!!ks) << errorText(ks.takeError());
  Jit jit(*ks);
  for (const kir::Kernel& k : *ks) {
    std::vector<void*> args;
    for (const kir::BufferArg& b : k.buffers) args.push_back(buffers.at(b.name).bytes.data());
    auto fn = jit.fn(k.name);
    ASSERT_TRUE(fn);
    ASSERT_FALSE(kir::isSerial(k)) << k.name;
    fn(args.data(), 0, k.body->extent / 2);
    fn(args.data(), k.body->extent / 2, k.body->extent);
  }
}

/// The PTX of `ks` for sm_90 (as sgc generates it: sm_90a).
inline Expected<std::string> sm90Ptx(const std::vector<kir::Kernel>& ks) {
  llvm::LLVMContext ctx;
  auto spec = codegen::TargetSpec::nvptx("sm_90");
  auto mod = codegen::emitKernels(ctx, ks, spec);
  if (!mod) return mod.takeError();
  return codegen::compileModule(**mod, spec);
}

/// ptxas -v run on `ptx` for sm_90 (as sgc generates it: sm_90a): its exit status and what it printed.
inline std::pair<int, std::string> assembled(const std::string& ptx, const char* ptxas) {
  auto dir = std::filesystem::temp_directory_path() / ("sgc-ptx-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "k.ptx") << ptx;
  std::string cmd = std::string(ptxas) + " -v -arch=" + codegen::TargetSpec::nvptx("sm_90").cpu + " " + (dir / "k.ptx").string() + " -o " + (dir / "k.cubin").string() + " > " +
                    (dir / "log").string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(dir / "log");
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  return {rc, log};
}


/// Uniform random values in [lo, hi) for each input of `g`.
inline std::map<std::string, ir::Tensor> randomInputs(const ir::Graph& g, unsigned seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::map<std::string, ir::Tensor> in;
  for (ir::Value* v : g.inputs) {
    ir::Tensor t(v->type.dtype, v->type.shape());
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, u(rng));
    in[v->name] = t;
  }
  return in;
}

} // namespace sgc::test
