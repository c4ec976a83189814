// Packaging (see Package.h).
#include "codegen/Package.h"
#include "codegen/Progress.h"

#include "runtime/OutputFile.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace sgc::codegen {
namespace {

void addConstant(llvm::Module& m, const std::string& name, llvm::Constant* init, unsigned align) {
  auto* gv = new llvm::GlobalVariable(m, init->getType(), true, llvm::GlobalValue::ExternalLinkage, init, name);
  gv->setVisibility(llvm::GlobalValue::HiddenVisibility);
  gv->setAlignment(llvm::Align(align));
}

void addBytes(llvm::Module& m, const std::string& name, const void* data, size_t size, unsigned align) {
  auto& ctx = m.getContext();
  llvm::StringRef bytes((const char*)data, size);
  addConstant(m, name, llvm::ConstantDataArray::getRaw(bytes, size, llvm::Type::getInt8Ty(ctx)), align);
  addConstant(m, name + "_size", llvm::ConstantInt::get(llvm::Type::getInt64Ty(ctx), size), 8);
}

} // namespace

/// Runs argv[0] with the arguments (no shell: paths are passed as they are). With `log`, its
/// standard output and error go to that file, and the error on failure carries the file's end
/// (ptxas prints notes on success too, which a compile keeps off the user's terminal).
static Error run(const std::vector<std::string>& args, const std::string& log = "") {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid;
  int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return makeError("cannot run " + args[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return Error::success();
  std::string said;
  if (!log.empty()) {
    std::ifstream f(log);
    said.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (said.size() > 2000) said = "..." + said.substr(said.size() - 2000);
  }
  return makeError(args[0] + " failed (status " + std::to_string(WEXITSTATUS(status)) + ")" + (said.empty() ? "" : ":\n" + said));
}

static Expected<std::string> ptxOf(const std::vector<kir::Kernel>& kernels, const std::string& sm) {
  llvm::LLVMContext ctx;
  TargetSpec spec = TargetSpec::nvptx(sm);
  auto m = emitKernels(ctx, kernels, spec);
  if (!m) return m.takeError();
  return compileModule(**m, spec);
}

Expected<std::string> kernelsPtx(const CompiledProgram& p, const std::string& sm) { return ptxOf(p.kernels, sm); }

Expected<std::string> assemblePtx(const std::string& ptx, const std::string& sm, const std::string& ptxas, std::string* log) {
  namespace fs = std::filesystem;
  std::string dirTemplate = (fs::temp_directory_path() / "sgc-ptx-XXXXXX").string();
  if (!mkdtemp(dirTemplate.data())) return makeError("cannot create a temporary folder");
  fs::path dir = dirTemplate;
  std::ofstream(dir / "kernels.ptx") << ptx;
  std::string arch = TargetSpec::nvptx(sm).cpu;
  Error e = run({ptxas, "-arch=" + arch, (dir / "kernels.ptx").string(), "-o", (dir / "kernels.cubin").string()}, (dir / "ptxas.log").string());
  std::string cubin;
  if (!e) {
    std::ifstream f(dir / "kernels.cubin", std::ios::binary);
    cubin.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  // The report from a second run: -v changes a few bytes of the cubin, and the library must not
  // depend on whether --stats was asked for.
  if (!e && log) e = run({ptxas, "-arch=" + arch, "-v", (dir / "kernels.ptx").string(), "-o", (dir / "report.cubin").string()}, (dir / "report.log").string());
  if (!e && log) {
    std::ifstream l(dir / "report.log");
    log->assign(std::istreambuf_iterator<char>(l), std::istreambuf_iterator<char>());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (e) return makeError("ptxas -arch=" + arch + ": " + errorText(std::move(e)));
  return cubin;
}

int GpuKernelResources::blocksBySm() const {
  constexpr int kRegistersPerSm = 65536, kThreadsPerSm = 2048, kBlocksPerSm = 32, kWarpAllocation = 256;
  if (threads <= 0) return 0;
  int perWarp = (registers * 32 + kWarpAllocation - 1) / kWarpAllocation * kWarpAllocation;
  int perBlock = std::max(1, perWarp * warpsPerBlock());
  return std::min({kRegistersPerSm / perBlock, kThreadsPerSm / threads, kBlocksPerSm});
}

/// A ptxas note that a function's warpgroup products are serialized, as (function, reason): "...
/// wgmma.mma_async instructions are serialized due to REASON in (or for) the function 'NAME'".
static std::optional<std::pair<std::string, std::string>> serializedNote(const std::string& line) {
  static const std::string due = "instructions are serialized due to ", fn = " the function '";
  size_t at = line.find(due), name = line.rfind(fn);
  if (at == std::string::npos || name == std::string::npos || name < at + due.size()) return std::nullopt;
  size_t from = name + fn.size(), to = line.find('\'', from), reasonEnd = line.rfind(' ', name - 1); // before "in" or "for"
  if (to == std::string::npos || reasonEnd == std::string::npos || reasonEnd < at + due.size()) return std::nullopt;
  return std::make_pair(line.substr(from, to - from), line.substr(at + due.size(), reasonEnd - at - due.size()));
}

std::vector<GpuKernelResources> parsePtxasResources(const std::string& log) {
  std::vector<GpuKernelResources> out;
  std::vector<std::pair<std::string, std::string>> serialized; // a note may come before its function's entry
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (auto note = serializedNote(line)) {
      serialized.push_back(std::move(*note));
      continue;
    }
    static const std::string entry = "Compiling entry function '";
    if (size_t at = line.find(entry); at != std::string::npos) {
      size_t from = at + entry.size(), to = line.find('\'', from);
      if (to != std::string::npos) out.push_back({line.substr(from, to - from)});
      continue;
    }
    if (out.empty()) continue;
    int a = 0, b = 0;
    if (size_t at = line.find("Used "); at != std::string::npos && std::sscanf(line.c_str() + at, "Used %d registers", &a) == 1)
      out.back().registers = a;
    if (size_t at = line.find("bytes spill stores"); at != std::string::npos) {
      size_t start = line.rfind(',', at);
      start = start == std::string::npos ? 0 : start + 1;
      if (std::sscanf(line.c_str() + start, "%d bytes spill stores, %d bytes spill loads", &a, &b) == 2) out.back().spillBytes = a + b;
    }
  }
  for (auto& [name, reason] : serialized)
    for (GpuKernelResources& k : out)
      if (k.name == name) k.serialized = reason;
  return out;
}

Expected<std::unique_ptr<llvm::Module>> hostModule(llvm::LLVMContext& ctx, const CompiledProgram& p, const TargetSpec& cpu) {
  auto m = emitKernels(ctx, p.kernels, cpu);
  if (!m) return m.takeError();
  addBytes(**m, "sgcrt_program", p.programJson.data(), p.programJson.size(), 8);
  (*m)->getNamedGlobal("sgcrt_program")->setSection(kProgramSection); // where sgc inspect reads it, without loading the library
  static const uint8_t none = 0;
  addBytes(**m, "sgcrt_weights", p.weights.empty() ? &none : p.weights.data(), p.weights.size(), 64);
  // The CPU's kernels by index; GPU-only kernels have none (a CPU session never launches them).
  std::vector<llvm::Constant*> fns;
  auto* ptr = llvm::PointerType::getUnqual(ctx);
  for (const kir::Kernel& k : p.kernels) {
    llvm::Function* f = (*m)->getFunction(k.name);
    if (f) f->setVisibility(llvm::GlobalValue::HiddenVisibility);
    fns.push_back(f ? (llvm::Constant*)f : llvm::ConstantPointerNull::get(ptr));
  }
  addConstant(**m, "sgcrt_kernels", llvm::ConstantArray::get(llvm::ArrayType::get(ptr, fns.size()), fns), 8);
  return m;
}

Expected<std::string> hostObject(const CompiledProgram& p, const TargetSpec& cpu) {
  llvm::LLVMContext ctx;
  auto m = hostModule(ctx, p, cpu);
  if (!m) return m.takeError();
  return compileModule(**m, cpu);
}

std::string resourcesReport(const std::vector<GpuKernelResources>& kernels, const std::string& sm) {
  constexpr size_t kShown = 6;
  int spilling = 0;
  for (const GpuKernelResources& k : kernels) spilling += k.spillBytes > 0;
  std::vector<const GpuKernelResources*> fewest;
  for (const GpuKernelResources& k : kernels) fewest.push_back(&k);
  auto warps = [](const GpuKernelResources* k) { return k->blocksBySm() * k->warpsPerBlock(); };
  std::stable_sort(fewest.begin(), fewest.end(), [&](auto* a, auto* b) { return warps(a) < warps(b); });
  std::string out = "GPU " + sm + ", ptxas: " + std::to_string(kernels.size()) + " kernels, " + std::to_string(spilling) + " spilling registers";
  if (!fewest.empty()) out += "; fewest warps an SM by registers (of 64):";
  for (size_t i = 0; i < std::min(kShown, fewest.size()); ++i) {
    const GpuKernelResources& k = *fewest[i];
    out += (i ? ", " : " ") + k.name + " " + std::to_string(warps(&k)) + " (" + std::to_string(k.registers) + " registers x " +
           std::to_string(k.threads) + " threads" + (k.spillBytes ? ", " + std::to_string(k.spillBytes) + " bytes spilled" : "") + ")";
  }
  std::string serialized;
  for (const GpuKernelResources& k : kernels)
    if (!k.serialized.empty()) serialized += (serialized.empty() ? "" : ", ") + k.name + " (" + k.serialized + ")";
  if (!serialized.empty()) out += "; warpgroup products serialized by ptxas: " + serialized;
  return out + "\n";
}

namespace {

/// GPU code carried by the .so: (name suffix, bytes), e.g. ("sm_90_ptx", ...).
using GpuBlobs = std::vector<std::pair<std::string, std::string>>;

/// The object holding the GPU code: each blob, and the table the runtime searches by name:
/// {name, data, size} per blob.
Expected<std::string> gpuObject(const GpuBlobs& gpu, const TargetSpec& cpu) {
  llvm::LLVMContext ctx;
  auto m = emitKernels(ctx, {}, cpu);
  if (!m) return m.takeError();
  auto* ptrTy = llvm::PointerType::getUnqual(ctx);
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  auto* entryTy = llvm::StructType::get(ctx, {ptrTy, ptrTy, i64});
  std::vector<llvm::Constant*> entries;
  for (auto& [suffix, bytes] : gpu) {
    addBytes(**m, "sgcrt_gpu_" + suffix, bytes.data(), bytes.size(), 64);
    auto* nameInit = llvm::ConstantDataArray::getString(ctx, suffix);
    auto* name = new llvm::GlobalVariable(**m, nameInit->getType(), true, llvm::GlobalValue::PrivateLinkage, nameInit, "sgcrt_gpu_name_" + suffix);
    entries.push_back(llvm::ConstantStruct::get(entryTy, {name, (*m)->getNamedGlobal("sgcrt_gpu_" + suffix), llvm::ConstantInt::get(i64, bytes.size())}));
  }
  addConstant(**m, "sgcrt_gpu_blobs", llvm::ConstantArray::get(llvm::ArrayType::get(entryTy, entries.size()), entries), 8);
  addConstant(**m, "sgcrt_gpu_blob_count", llvm::ConstantInt::get(i64, entries.size()), 8);
  return compileModule(**m, cpu);
}

/// Kernels per GPU module. The kernels a GPU launches are dealt round-robin into modules of about
/// this many, each generated by LLVM (its own context) and assembled by ptxas (a child process) as
/// a job of its own, so that the cores share them; ptxas's time and memory also grow faster than
/// its input (a 6.8 MB module of 2,000 kernels: 29 s and 0.9 GB). The count depends on the
/// program alone, never on the machine: the same inputs give the same library.
constexpr size_t kKernelsPerModule = 16;

/// One GPU module's work: its kernels, and where its PTX, cubin and error go.
struct GpuModuleJob {
  std::string sm, suffix;
  std::vector<kir::Kernel> kernels;
  std::string ptx, cubin, error;
  bool report = false; ///< run ptxas with -v, its report into `log`
  std::string log;
};

std::vector<GpuModuleJob> gpuModuleJobs(const CompiledProgram& p, const PackageOptions& o) {
  std::vector<const kir::Kernel*> launched;
  for (const kir::Kernel& k : p.kernels)
    if (!k.cpuOnly) launched.push_back(&k);
  size_t parts = std::max<size_t>(1, (launched.size() + kKernelsPerModule - 1) / kKernelsPerModule);
  std::vector<GpuModuleJob> jobs;
  for (const std::string& sm : o.gpus)
    for (size_t i = 0; i < parts; ++i) {
      GpuModuleJob job{sm, parts == 1 ? "" : "." + std::to_string(i), {}, {}, {}, {}, o.resources && sm == o.gpus.front(), {}};
      for (size_t k = i; k < launched.size(); k += parts) job.kernels.push_back(*launched[k]); // neighbours (a kernel's pieces) apart
      jobs.push_back(std::move(job));
    }
  return jobs;
}

void runGpuModuleJob(GpuModuleJob& job, const std::string& ptxas) {
  auto text = ptxOf(job.kernels, job.sm);
  if (!text) {
    job.error = errorText(text.takeError());
    return;
  }
  job.ptx = std::move(*text);
  auto c = assemblePtx(job.ptx, job.sm, ptxas, job.report ? &job.log : nullptr);
  if (c) job.cubin = std::move(*c);
  else job.error = errorText(c.takeError());
}

/// The reported modules' kernels (ptxas -v), in the program's order, each with its block's threads.
std::vector<GpuKernelResources> resourcesOf(const CompiledProgram& p, const std::vector<GpuModuleJob>& modules) {
  std::map<std::string, GpuKernelResources> byName;
  for (const GpuModuleJob& m : modules)
    if (m.report)
      for (GpuKernelResources& r : parsePtxasResources(m.log)) byName[r.name] = r;
  std::vector<GpuKernelResources> out;
  for (const kir::Kernel& k : p.kernels)
    if (auto it = byName.find(k.name); it != byName.end()) {
      out.push_back(it->second);
      out.back().threads = kir::isSerial(k) ? 1 : k.threads;
    }
  return out;
}

/// Runs the jobs on as many threads as there are cores (and jobs), the first job first.
void runJobs(const std::vector<std::function<void()>>& jobs) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) jobs[i]();
  };
  std::vector<std::thread> workers;
  size_t threads = std::min<size_t>(jobs.size(), std::max(1u, std::thread::hardware_concurrency()));
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
}

} // namespace

Error writeSharedObject(const CompiledProgram& p, const std::string& out, const PackageOptions& o) {
  namespace fs = std::filesystem;
  // The GPU modules and the host object (the CPU's kernels, the program, the weights) at once.
  std::vector<GpuModuleJob> modules = gpuModuleJobs(p, o);
  if (o.progress) {
    size_t kernels = 0;
    for (const GpuModuleJob& m : modules) kernels += m.kernels.size();
    std::string gpus;
    for (const std::string& sm : o.gpus) gpus += (gpus.empty() ? "" : ", ") + sm;
    o.progress->stage(gpus.empty() ? "LLVM for x86-64: the CPU's kernels and the library"
                                   : "LLVM for x86-64 and " + gpus + " (ptxas): " + std::to_string(kernels) + " GPU kernels in " +
                                         std::to_string(modules.size()) + (modules.size() == 1 ? " module" : " modules"));
  }
  Expected<std::string> host = std::string();
  std::vector<std::function<void()>> jobs{[&] { host = hostObject(p, o.cpu); }};
  for (GpuModuleJob& m : modules) jobs.push_back([&m, &o] { runGpuModuleJob(m, o.ptxas); });
  runJobs(jobs);
  if (!host) return host.takeError();
  if (o.resources) *o.resources = resourcesOf(p, modules);
  GpuBlobs blobs;
  for (GpuModuleJob& m : modules) {
    if (!m.error.empty()) return makeError(m.error);
    blobs.push_back({m.sm + "_ptx" + m.suffix, std::move(m.ptx)});
    blobs.push_back({m.sm + "_cubin" + m.suffix, std::move(m.cubin)});
  }
  auto gpu = gpuObject(blobs, o.cpu);
  if (!gpu) return gpu.takeError();
  std::string dirTemplate = (fs::temp_directory_path() / "sgc-XXXXXX").string();
  if (!mkdtemp(dirTemplate.data())) return makeError("cannot create a temporary folder");
  fs::path dir = dirTemplate;
  // The objects' names never reach the .so (no debug information), so the folder does not matter.
  fs::path objPath = dir / "model.o", gpuPath = dir / "gpu.o";
  std::ofstream(objPath, std::ios::binary) << *host;
  std::ofstream(gpuPath, std::ios::binary) << *gpu;
  std::string tmpOut = rt::temporaryFor(out);
  if (o.progress) o.progress->stage("link " + out);
  Error e = run({o.linker, "-shared", "-o", tmpOut, objPath.string(), gpuPath.string(), "-Wl,--whole-archive", o.runtimeLib, "-Wl,--no-whole-archive",
                 "-static-libstdc++", "-static-libgcc",
                 "-Wl,--version-script=" + o.versionScript, "-Wl,-z,defs", "-Wl,--build-id=sha1", "-s", "-pthread", "-lm"});
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (e) {
    fs::remove(tmpOut, ec);
    return makeError("linking " + out + ": " + errorText(std::move(e)));
  }
  std::string error;
  if (!rt::commitOutput(tmpOut, out, error)) return makeError(error);
  if (o.progress) o.progress->done();
  return Error::success();
}

} // namespace sgc::codegen
