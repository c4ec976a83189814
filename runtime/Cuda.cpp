// The CUDA driver API loader and device executor (see Cuda.h).
#include "runtime/Cuda.h"
#include "runtime/LoadOnce.h"

#include "runtime/CublasLt.h"

#include <algorithm>
#include <chrono>
#include <dlfcn.h>
#include <thread>

namespace sgc::rt {

namespace {
using CUresult = int;
using CUdeviceptr = unsigned long long;
constexpr int kAttrMajor = 75, kAttrMinor = 76; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
constexpr unsigned kStreamNonBlocking = 1;        // CU_STREAM_NON_BLOCKING
constexpr int kCaptureThreadLocal = 1;            // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
constexpr uint64_t kWorkspaceBytes = 32 << 20;    // cuBLASLt's workspace
constexpr unsigned kEventDisableTiming = 2;       // CU_EVENT_DISABLE_TIMING
constexpr CUresult kNotReady = 600;               // CUDA_ERROR_NOT_READY
} // namespace

struct CudaDevice::Api {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void**, int);
  CUresult (*cuDevicePrimaryCtxRelease)(int);
  CUresult (*cuCtxSetCurrent)(void*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(void**, const void*);
  CUresult (*cuModuleUnload)(void*);
  CUresult (*cuModuleGetFunction)(void**, void*, const char*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, void*);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  CUresult (*cuFuncSetAttribute)(void*, int, int);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuStreamCreate)(void**, unsigned);
  CUresult (*cuStreamDestroy)(void*);
  CUresult (*cuStreamSynchronize)(void*);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, void*);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, void*);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, void*);
  CUresult (*cuStreamBeginCapture)(void*, int);
  CUresult (*cuStreamEndCapture)(void*, void**);
  CUresult (*cuGraphInstantiate)(void**, void*, unsigned long long);
  CUresult (*cuGraphLaunch)(void*, void*);
  CUresult (*cuGraphExecDestroy)(void*);
  CUresult (*cuGraphDestroy)(void*);
  CUresult (*cuEventCreate)(void**, unsigned);
  CUresult (*cuEventDestroy)(void*);
  CUresult (*cuEventRecord)(void*, void*);
  CUresult (*cuEventElapsedTime)(float*, void*, void*);
  CUresult (*cuStreamCreateWithPriority)(void**, unsigned, int);
  CUresult (*cuCtxGetStreamPriorityRange)(int*, int*);
  CUresult (*cuStreamWaitEvent)(void*, void*, unsigned);
  CUresult (*cuStreamQuery)(void*);

  bool load(std::string& error) {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = "no CUDA driver (libcuda.so.1 cannot be loaded): is there a GPU on this machine?";
      return false;
    }
    using GetProc = CUresult (*)(const char*, void**, int, unsigned long long, int*);
    auto getProc = (GetProc)dlsym(lib, "cuGetProcAddress_v2");
    if (!getProc) {
      error = "the CUDA driver is too old (no cuGetProcAddress_v2; CUDA 12 or newer is needed)";
      return false;
    }
    struct Entry {
      const char* name;
      void** slot;
    } entries[] = {{"cuInit", (void**)&cuInit}, {"cuDeviceGet", (void**)&cuDeviceGet},
                   {"cuDeviceGetAttribute", (void**)&cuDeviceGetAttribute}, {"cuDevicePrimaryCtxRetain", (void**)&cuDevicePrimaryCtxRetain},
                   {"cuDevicePrimaryCtxRelease", (void**)&cuDevicePrimaryCtxRelease}, {"cuCtxSetCurrent", (void**)&cuCtxSetCurrent},
                   {"cuCtxSynchronize", (void**)&cuCtxSynchronize}, {"cuModuleLoadData", (void**)&cuModuleLoadData},
                   {"cuModuleUnload", (void**)&cuModuleUnload}, {"cuModuleGetFunction", (void**)&cuModuleGetFunction},
                   {"cuMemAlloc", (void**)&cuMemAlloc}, {"cuMemFree", (void**)&cuMemFree}, {"cuMemsetD8Async", (void**)&cuMemsetD8Async},
                   {"cuMemcpyHtoD", (void**)&cuMemcpyHtoD}, {"cuMemcpyDtoH", (void**)&cuMemcpyDtoH},
                   {"cuMemcpyDtoD", (void**)&cuMemcpyDtoD}, {"cuLaunchKernel", (void**)&cuLaunchKernel},
                   {"cuFuncSetAttribute", (void**)&cuFuncSetAttribute},
                   {"cuGetErrorString", (void**)&cuGetErrorString}, {"cuStreamCreate", (void**)&cuStreamCreate},
                   {"cuStreamDestroy", (void**)&cuStreamDestroy}, {"cuStreamSynchronize", (void**)&cuStreamSynchronize},
                   {"cuMemcpyHtoDAsync", (void**)&cuMemcpyHtoDAsync}, {"cuMemcpyDtoHAsync", (void**)&cuMemcpyDtoHAsync},
                   {"cuMemcpyDtoDAsync", (void**)&cuMemcpyDtoDAsync}, {"cuStreamBeginCapture", (void**)&cuStreamBeginCapture},
                   {"cuStreamEndCapture", (void**)&cuStreamEndCapture}, {"cuGraphInstantiateWithFlags", (void**)&cuGraphInstantiate},
                   {"cuGraphLaunch", (void**)&cuGraphLaunch}, {"cuGraphExecDestroy", (void**)&cuGraphExecDestroy},
                   {"cuGraphDestroy", (void**)&cuGraphDestroy}, {"cuEventCreate", (void**)&cuEventCreate},
                   {"cuEventDestroy", (void**)&cuEventDestroy}, {"cuEventRecord", (void**)&cuEventRecord},
                   {"cuEventElapsedTime", (void**)&cuEventElapsedTime},
                   {"cuStreamCreateWithPriority", (void**)&cuStreamCreateWithPriority},
                   {"cuCtxGetStreamPriorityRange", (void**)&cuCtxGetStreamPriorityRange},
                   {"cuStreamWaitEvent", (void**)&cuStreamWaitEvent}, {"cuStreamQuery", (void**)&cuStreamQuery}};
    for (const Entry& e : entries) {
      int status = 0;
      if (getProc(e.name, e.slot, 12000, 0, &status) != 0 || !*e.slot) {
        error = std::string("the CUDA driver lacks ") + e.name;
        return false;
      }
    }
    return true;
  }
};

bool CudaDevice::check(int result, const char* what, std::string& error) {
  if (result == 0) return true;
  const char* msg = nullptr;
  if (api_ && api_->cuGetErrorString) api_->cuGetErrorString(result, &msg);
  error = std::string(what) + " failed: " + (msg ? msg : "CUDA error " + std::to_string(result));
  return false;
}

std::unique_ptr<CudaDevice> CudaDevice::open(int ordinal, const std::vector<GpuBlob>& blobs, const std::vector<std::string>& kernels,
                                             uint64_t arenaBytes, bool gemms, void* hostStream, std::string& error) {
  std::unique_ptr<CudaDevice> d(new CudaDevice);
  if (!(d->api_ = loadOnce<Api>(error))) return nullptr;
  const Api& a = *d->api_;
  if (!d->check(a.cuInit(0), "cuInit", error) || !d->check(a.cuDeviceGet(&d->device_, ordinal), ("device cuda:" + std::to_string(ordinal)).c_str(), error))
    return nullptr;
  int major = 0, minor = 0;
  a.cuDeviceGetAttribute(&major, kAttrMajor, d->device_);
  a.cuDeviceGetAttribute(&minor, kAttrMinor, d->device_);
  if (!d->check(a.cuDevicePrimaryCtxRetain(&d->context_, d->device_), "cuDevicePrimaryCtxRetain", error) ||
      !d->check(a.cuCtxSetCurrent(d->context_), "cuCtxSetCurrent", error))
    return nullptr;
  // The cubin built for this architecture, else PTX the driver compiles (the newest not above the
  // device); either in one module (SM_cubin) or in parts (SM_cubin.0, SM_cubin.1, ...).
  std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
  auto partsOf = [&](const std::string& kind) {
    std::vector<const GpuBlob*> parts;
    for (const GpuBlob& b : blobs)
      if (b.name == kind || b.name.rfind(kind + ".", 0) == 0) parts.push_back(&b);
    return parts;
  };
  std::vector<const GpuBlob*> chosen = partsOf(arch + "_cubin");
  for (int sm = major * 10 + minor; chosen.empty() && sm >= 10; --sm)
    chosen = partsOf("sm_" + std::to_string(sm) + "_ptx");
  if (chosen.empty()) {
    error = "this library carries no GPU code for " + arch + " (compile with --target " + arch + ")";
    return nullptr;
  }
  for (const GpuBlob* b : chosen) {
    std::string image((const char*)b->data, b->size);
    void* module = nullptr;
    if (!d->check(a.cuModuleLoadData(&module, image.c_str()), ("loading the " + b->name).c_str(), error)) return nullptr;
    d->modules_.push_back(module);
  }
  for (const std::string& k : kernels) { // each kernel is in one of the parts, or (a CPU's alone) in none
    void* f = nullptr;
    for (void* m : d->modules_)
      if (!f && a.cuModuleGetFunction(&f, m, k.c_str()) != 0) f = nullptr;
    d->functions_.push_back(f);
  }
  if (hostStream) {
    d->stream_ = hostStream, d->ownStream_ = false;
  } else if (!d->check(a.cuStreamCreate(&d->stream_, kStreamNonBlocking), "cuStreamCreate", error)) {
    return nullptr;
  }
  if (gemms) {
    d->lt_ = CublasLt::open(d->gemmNote_);
    if (d->lt_) d->gemmNote_ = d->lt_->version();
    else d->gemmNote_ = "GEMMs on sgc kernels: " + d->gemmNote_;
  }
  // One allocation: the arena, then (with cuBLASLt) its workspace, 256-byte aligned. It is
  // cleared on the step's stream: a memset on the legacy stream would not be ordered before the
  // uploads that follow on a non-blocking one, and could zero them (parameters, the learning rate).
  uint64_t arenaRounded = (arenaBytes + 255) / 256 * 256;
  d->workspaceBytes_ = d->lt_ ? kWorkspaceBytes : 0;
  CUdeviceptr p = 0;
  uint64_t total = std::max<uint64_t>(256, arenaRounded + d->workspaceBytes_);
  if (!d->check(a.cuMemAlloc(&p, total), ("allocating the " + std::to_string(total) + "-byte arena").c_str(), error)) return nullptr;
  d->arena_ = p;
  if (!d->check(a.cuMemsetD8Async(p, 0, arenaBytes, d->stream_), "clearing the arena", error)) return nullptr;
  d->workspace_ = p + arenaRounded;
  std::string code = chosen.size() == 1 ? chosen[0]->name
                                         : chosen[0]->name.substr(0, chosen[0]->name.find('.')) + " in " + std::to_string(chosen.size()) + " modules";
  d->description_ = "cuda:" + std::to_string(ordinal) + " (" + arch + ", " + code + (d->gemmNote_.empty() ? "" : ", " + d->gemmNote_) + ")";
  return d;
}

CudaDevice::~CudaDevice() {
  if (!api_) return;
  dropGraph();
  for (void* e : events_)
    if (e) api_->cuEventDestroy(e);
  for (void* e : joinEvents_)
    if (e) api_->cuEventDestroy(e);
  if (forkEvent_) api_->cuEventDestroy(forkEvent_);
  if (commStream_) api_->cuStreamDestroy(commStream_);
  if (scratch_) api_->cuMemFree(scratch_);
  lt_.reset();
  if (arena_) api_->cuMemFree(arena_);
  if (stream_ && ownStream_) api_->cuStreamDestroy(stream_);
  for (void* m : modules_) api_->cuModuleUnload(m);
  if (context_) api_->cuDevicePrimaryCtxRelease(device_);
}

bool CudaDevice::toDevice(uint64_t dst, const void* src, uint64_t bytes, std::string& error) {
  return !bytes || check(api_->cuMemcpyHtoDAsync(dst, src, bytes, stream_), "cuMemcpyHtoDAsync", error);
}

bool CudaDevice::toHost(void* dst, uint64_t src, uint64_t bytes, std::string& error) {
  return !bytes || (check(api_->cuMemcpyDtoHAsync(dst, src, bytes, stream_), "cuMemcpyDtoHAsync", error) && synchronize(error));
}

bool CudaDevice::copy(uint64_t dst, uint64_t src, uint64_t bytes, std::string& error) {
  return !bytes || check(api_->cuMemcpyDtoDAsync(dst, src, bytes, stream_), "cuMemcpyDtoDAsync", error);
}

bool CudaDevice::launch(int index, std::vector<uint64_t>& args, bool serial, int64_t extent, int perBlock, int64_t shared, std::string& error) {
  if (!hasKernel(index)) {
    error = "kernel " + std::to_string(index) + " has no GPU code in this library";
    return false;
  }
  if (sharedAllowed_.size() < functions_.size()) sharedAllowed_.resize(functions_.size(), 48 << 10);
  if (shared > sharedAllowed_[index]) { // past the 48 KiB every kernel may have, once per kernel
    constexpr int kMaxDynamicShared = 8; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if (!check(api_->cuFuncSetAttribute(functions_[index], kMaxDynamicShared, (int)shared),
               ("giving a kernel " + std::to_string(shared) + " bytes of shared memory a block").c_str(), error))
      return false;
    sharedAllowed_[index] = shared;
  }
  std::vector<void*> params;
  for (uint64_t& a : args) params.push_back(&a);
  unsigned threads = serial ? 1 : (unsigned)perBlock;
  // At most 65535 blocks (kir::kMostGridBlocks): kernels grid-stride over the rest, and a
  // horizontal kernel's parts fit within them.
  int64_t blocks = serial ? 1 : std::max<int64_t>(1, std::min<int64_t>((extent + threads - 1) / threads, 65535));
  return check(api_->cuLaunchKernel(functions_[index], (unsigned)blocks, 1, 1, threads, 1, 1, (unsigned)shared, stream_, params.data(), nullptr),
               "cuLaunchKernel", error);
}

int CudaDevice::prepareGemm(const Gemm& g, uint64_t a, uint64_t b, uint64_t y, uint64_t bias, bool gelu, uint64_t aux, bool tune, std::string& error) {
  if (!lt_) return -1;
  // A candidate's time: one run to warm it up, then the mean of five between two events.
  CublasLt::Tuner tuner{stream_, workspace_, [this](const std::function<bool()>& enqueue) -> float {
                          constexpr int kRuns = 5;
                          std::string ignored;
                          if (!enqueue() || !synchronize(ignored) || !recordEvent(0, ignored)) return -1;
                          for (int r = 0; r < kRuns; ++r)
                            if (!enqueue()) return -1;
                          if (!recordEvent(1, ignored) || !synchronize(ignored)) return -1;
                          return elapsedMs(0, 1) / kRuns;
                        }};
  return lt_->prepare(g, a, b, y, bias, gelu, aux, workspaceBytes_, tune ? &tuner : nullptr, error);
}

std::string CudaDevice::tuningNote() const {
  if (!lt_ || !lt_->tunedProducts()) return "";
  return "GEMM algorithms timed: " + std::to_string(lt_->tunedProducts()) + " distinct products, " + std::to_string(lt_->fasterThanFirst()) +
         " faster than cuBLASLt's first";
}

bool CudaDevice::gemm(int plan, uint64_t a, uint64_t b, uint64_t y, std::string& error) {
  return lt_->run(plan, a, b, y, workspace_, workspaceBytes_, stream_, error);
}

bool CudaDevice::beginCapture(std::string& error) {
  return check(api_->cuStreamBeginCapture(stream_, kCaptureThreadLocal), "cuStreamBeginCapture", error);
}

bool CudaDevice::endCapture(size_t slot, std::string& error) {
  if (graphs_.size() <= slot) graphs_.resize(slot + 1);
  Graph& g = graphs_[slot];
  if (!check(api_->cuStreamEndCapture(stream_, &g.graph), "capturing the step as a CUDA graph", error)) return false;
  return check(api_->cuGraphInstantiate(&g.exec, g.graph, 0), "cuGraphInstantiate", error);
}

void CudaDevice::abandonCapture(size_t slot) {
  void* graph = nullptr;
  if (api_->cuStreamEndCapture(stream_, &graph) == 0 && graph) api_->cuGraphDestroy(graph);
  if (slot < graphs_.size()) release(graphs_[slot]);
}

bool CudaDevice::recordEvent(size_t slot, std::string& error, bool onCommStream) {
  if (slot >= events_.size()) events_.resize(slot + 1, nullptr);
  if (!events_[slot] && !check(api_->cuEventCreate(&events_[slot], 0), "cuEventCreate", error)) return false;
  return check(api_->cuEventRecord(events_[slot], onCommStream ? commStream_ : stream_), "cuEventRecord", error);
}

float CudaDevice::elapsedMs(size_t from, size_t to) {
  float ms = 0;
  if (from < events_.size() && to < events_.size() && events_[from] && events_[to]) api_->cuEventElapsedTime(&ms, events_[from], events_[to]);
  return ms;
}

bool CudaDevice::openCommStream(std::string& error) {
  int least = 0, greatest = 0; // numerically lower is higher priority
  if (commStream_) return true;
  return check(api_->cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange", error) &&
         check(api_->cuStreamCreateWithPriority(&commStream_, kStreamNonBlocking, greatest), "cuStreamCreateWithPriority", error) &&
         check(api_->cuEventCreate(&forkEvent_, kEventDisableTiming), "cuEventCreate", error);
}

bool CudaDevice::commFork(std::string& error) {
  return check(api_->cuEventRecord(forkEvent_, stream_), "cuEventRecord", error) &&
         check(api_->cuStreamWaitEvent(commStream_, forkEvent_, 0), "cuStreamWaitEvent", error);
}

bool CudaDevice::commDone(size_t slot, std::string& error) {
  if (slot >= joinEvents_.size()) joinEvents_.resize(slot + 1, nullptr);
  if (!joinEvents_[slot] && !check(api_->cuEventCreate(&joinEvents_[slot], kEventDisableTiming), "cuEventCreate", error)) return false;
  return check(api_->cuEventRecord(joinEvents_[slot], commStream_), "cuEventRecord", error);
}

bool CudaDevice::waitComm(size_t slot, std::string& error) {
  return check(api_->cuStreamWaitEvent(stream_, joinEvents_.at(slot), 0), "cuStreamWaitEvent", error);
}

bool CudaDevice::waitIdle(int timeoutMs, const std::function<bool(std::string&)>& healthy, std::string& error) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (void* s : {stream_, commStream_}) {
    while (s) {
      CUresult r = api_->cuStreamQuery(s);
      if (r == 0) break;
      if (r != kNotReady) return check(r, "the step on the GPU", error);
      if (!healthy(error)) return false;
      if (std::chrono::steady_clock::now() > deadline) {
        error = "the step did not finish on the GPU within " + std::to_string(timeoutMs) + " ms";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

uint64_t CudaDevice::scratch(uint64_t bytes, std::string& error) {
  if (scratch_ && scratchBytes_ >= bytes) return scratch_;
  if (scratch_ && !synchronize(error)) return 0;
  if (scratch_) api_->cuMemFree(scratch_);
  scratch_ = scratchBytes_ = 0;
  CUdeviceptr p = 0;
  if (!check(api_->cuMemAlloc(&p, std::max<uint64_t>(bytes, 256)), "cuMemAlloc", error)) return 0;
  scratchBytes_ = std::max<uint64_t>(bytes, 256);
  return scratch_ = p;
}

void CudaDevice::release(Graph& g) {
  if (g.exec) api_->cuGraphExecDestroy(g.exec);
  if (g.graph) api_->cuGraphDestroy(g.graph);
  g = Graph{};
}

void CudaDevice::dropGraph() {
  if (stream_) api_->cuStreamSynchronize(stream_);
  if (commStream_) api_->cuStreamSynchronize(commStream_);
  for (Graph& g : graphs_) release(g);
  graphs_.clear();
}

bool CudaDevice::replay(size_t slot, std::string& error) { return check(api_->cuGraphLaunch(graphs_[slot].exec, stream_), "cuGraphLaunch", error); }

bool CudaDevice::synchronize(std::string& error) { return check(api_->cuStreamSynchronize(stream_), "the step on the GPU", error); }

} // namespace sgc::rt
