// The CUDA driver API loader and device executor (see Cuda.h).
#include "runtime/Cuda.h"

#include <dlfcn.h>

namespace sgc::rt {

namespace {
using CUresult = int;
using CUdeviceptr = unsigned long long;
constexpr int kAttrMajor = 75, kAttrMinor = 76; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
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
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);

  ~Api() {
    if (lib) dlclose(lib);
  }

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
                   {"cuMemAlloc", (void**)&cuMemAlloc}, {"cuMemFree", (void**)&cuMemFree}, {"cuMemsetD8", (void**)&cuMemsetD8},
                   {"cuMemcpyHtoD", (void**)&cuMemcpyHtoD}, {"cuMemcpyDtoH", (void**)&cuMemcpyDtoH},
                   {"cuMemcpyDtoD", (void**)&cuMemcpyDtoD}, {"cuLaunchKernel", (void**)&cuLaunchKernel},
                   {"cuGetErrorString", (void**)&cuGetErrorString}};
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
                                             uint64_t arenaBytes, std::string& error) {
  std::unique_ptr<CudaDevice> d(new CudaDevice);
  d->api_ = std::make_unique<Api>();
  if (!d->api_->load(error)) return nullptr;
  Api& a = *d->api_;
  if (!d->check(a.cuInit(0), "cuInit", error) || !d->check(a.cuDeviceGet(&d->device_, ordinal), ("device cuda:" + std::to_string(ordinal)).c_str(), error))
    return nullptr;
  int major = 0, minor = 0;
  a.cuDeviceGetAttribute(&major, kAttrMajor, d->device_);
  a.cuDeviceGetAttribute(&minor, kAttrMinor, d->device_);
  if (!d->check(a.cuDevicePrimaryCtxRetain(&d->context_, d->device_), "cuDevicePrimaryCtxRetain", error) ||
      !d->check(a.cuCtxSetCurrent(d->context_), "cuCtxSetCurrent", error))
    return nullptr;
  // The cubin built for this architecture, else PTX the driver compiles (the newest not above the device).
  std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
  const GpuBlob* chosen = nullptr;
  for (const GpuBlob& b : blobs)
    if (b.name == arch + "_cubin") chosen = &b;
  for (const GpuBlob& b : blobs) {
    if (chosen || b.name.size() < 8 || b.name.substr(b.name.size() - 4) != "_ptx") continue;
    int sm = std::atoi(b.name.c_str() + 3);
    if (sm <= major * 10 + minor) chosen = &b;
  }
  if (!chosen) {
    error = "this library carries no GPU code for " + arch + " (compile with --target " + arch + ")";
    return nullptr;
  }
  std::string image((const char*)chosen->data, chosen->size);
  if (!d->check(a.cuModuleLoadData(&d->module_, image.c_str()), ("loading the " + chosen->name).c_str(), error)) return nullptr;
  for (const std::string& k : kernels) {
    void* f = nullptr;
    if (!d->check(a.cuModuleGetFunction(&f, d->module_, k.c_str()), ("kernel " + k).c_str(), error)) return nullptr;
    d->functions_.push_back(f);
  }
  CUdeviceptr p = 0;
  if (!d->check(a.cuMemAlloc(&p, arenaBytes ? arenaBytes : 256), ("allocating the " + std::to_string(arenaBytes) + "-byte arena").c_str(), error) ||
      !d->check(a.cuMemsetD8(p, 0, arenaBytes), "clearing the arena", error))
    return nullptr;
  d->arena_ = p;
  d->description_ = "cuda:" + std::to_string(ordinal) + " (" + arch + ", " + chosen->name + ")";
  return d;
}

CudaDevice::~CudaDevice() {
  if (!api_ || !api_->lib) return;
  if (arena_) api_->cuMemFree(arena_);
  if (module_) api_->cuModuleUnload(module_);
  if (context_) api_->cuDevicePrimaryCtxRelease(device_);
}

bool CudaDevice::toDevice(uint64_t dst, const void* src, uint64_t bytes, std::string& error) {
  return !bytes || check(api_->cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD", error);
}

bool CudaDevice::toHost(void* dst, uint64_t src, uint64_t bytes, std::string& error) {
  return !bytes || check(api_->cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH", error);
}

bool CudaDevice::copy(uint64_t dst, uint64_t src, uint64_t bytes, std::string& error) {
  return !bytes || check(api_->cuMemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD", error);
}

bool CudaDevice::launch(int index, std::vector<uint64_t>& args, bool serial, int64_t extent, std::string& error) {
  std::vector<void*> params;
  for (uint64_t& a : args) params.push_back(&a);
  unsigned threads = serial ? 1 : 256;
  int64_t blocks = serial ? 1 : std::max<int64_t>(1, std::min<int64_t>((extent + 255) / 256, 65535));
  return check(api_->cuLaunchKernel(functions_[index], (unsigned)blocks, 1, 1, threads, 1, 1, 0, nullptr, params.data(), nullptr),
               "cuLaunchKernel", error);
}

bool CudaDevice::synchronize(std::string& error) { return check(api_->cuCtxSynchronize(), "the step on the GPU", error); }

} // namespace sgc::rt
