// The GPU side of the runtime: the CUDA driver API, opened lazily with
// dlopen("libcuda.so.1") when a session asks for cuda:N (a train.so needs no
// CUDA library to load), every function resolved through cuGetProcAddress.
// A CudaDevice holds one context, the model's module (its cubin for the
// device's architecture, else its PTX, JIT-compiled by the driver) and the
// arena's single device allocation.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sgc::rt {

/// A GPU blob carried by the library: "sm_90_cubin", "sm_90_ptx", ...
struct GpuBlob {
  std::string name;
  const void* data;
  uint64_t size;
};

class CudaDevice {
public:
  ~CudaDevice();
  /// Opens device `ordinal`, loads the best blob, resolves `kernels` and allocates `arenaBytes`.
  static std::unique_ptr<CudaDevice> open(int ordinal, const std::vector<GpuBlob>& blobs, const std::vector<std::string>& kernels,
                                          uint64_t arenaBytes, std::string& error);

  uint64_t arena() const { return arena_; }
  bool toDevice(uint64_t dst, const void* src, uint64_t bytes, std::string& error);
  bool toHost(void* dst, uint64_t src, uint64_t bytes, std::string& error);
  bool copy(uint64_t dst, uint64_t src, uint64_t bytes, std::string& error);
  /// Launches kernel `index` over `extent` parallel iterations (one thread when serial).
  bool launch(int index, std::vector<uint64_t>& args, bool serial, int64_t extent, std::string& error);
  bool synchronize(std::string& error);
  const std::string& description() const { return description_; }

private:
  struct Api;
  bool check(int result, const char* what, std::string& error);
  std::unique_ptr<Api> api_;
  void* context_ = nullptr;
  void* module_ = nullptr;
  int device_ = 0;
  uint64_t arena_ = 0;
  std::vector<void*> functions_;
  std::string description_;
};

} // namespace sgc::rt
