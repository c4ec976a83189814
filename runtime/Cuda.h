// The GPU side of the runtime: the CUDA driver API, opened lazily with
// dlopen("libcuda.so.1") when a session asks for cuda:N (a train.so needs no
// CUDA library to load), every function resolved through cuGetProcAddress.
// A CudaDevice holds one context, the model's module (its cubin for the
// device's architecture, else its PTX, JIT-compiled by the driver) and the
// arena's single device allocation.
#pragma once
#include <cstdint>
#include <functional>
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

class CublasLt;
struct Gemm;

class CudaDevice {
public:
  ~CudaDevice();
  /// Opens device `ordinal`, loads the best blob, resolves `kernels` (those the blob does not
  /// carry, a CPU's alone, are absent: hasKernel), creates the stream (or runs
  /// on `hostStream`, the caller's, when not null) and allocates `arenaBytes` (and, with `gemms`,
  /// cuBLASLt's workspace after it, in the same allocation).
  static std::unique_ptr<CudaDevice> open(int ordinal, const std::vector<GpuBlob>& blobs, const std::vector<std::string>& kernels,
                                          uint64_t arenaBytes, bool gemms, void* hostStream, std::string& error);

  uint64_t arena() const { return arena_; }
  /// Copies, ordered on the device's stream; toHost waits for them.
  bool toDevice(uint64_t dst, const void* src, uint64_t bytes, std::string& error);
  bool toHost(void* dst, uint64_t src, uint64_t bytes, std::string& error);
  bool copy(uint64_t dst, uint64_t src, uint64_t bytes, std::string& error);
  /// Kernel `index` over `extent` threads, in blocks of `threads` (a grid-stride loop covers the
  /// rest when the grid's limit is reached), each with `shared` bytes of dynamic shared memory;
  /// one thread when serial.
  bool launch(int index, std::vector<uint64_t>& args, bool serial, int64_t extent, int threads, int64_t shared, std::string& error);
  /// Whether the GPU code carries kernel `index` (a kernel only a CPU runs is left out).
  bool hasKernel(int index) const { return index >= 0 && index < (int)functions_.size() && functions_[index]; }
  /// Whether cuBLASLt is loaded; when not, `gemmNote` says why.
  bool hasGemms() const { return lt_ != nullptr; }
  const std::string& gemmNote() const { return gemmNote_; }
  /// "GEMM algorithms timed: N distinct products, M faster than cuBLASLt's first", or "" untimed.
  std::string tuningNote() const;
  /// Prepares a GEMM over operands at these addresses; the plan's index.
  /// `bias`: the device address of a bias cuBLASLt adds to each row of y (0: none); with `gelu`,
  /// y gets g.gelu's result and `aux` the product (see CublasLt::prepare). With `tune`, the
  /// fastest of cuBLASLt's candidates on this device (timed here, on the stream; y is written).
  int prepareGemm(const Gemm& g, uint64_t a, uint64_t b, uint64_t y, uint64_t bias, bool gelu, uint64_t aux, bool tune, std::string& error);
  bool gemm(int plan, uint64_t a, uint64_t b, uint64_t y, std::string& error);
  /// Records what is enqueued between the two calls as CUDA graph `slot` (one per step program: a
  /// decode library's token buckets have their own); replay(slot) launches it.
  bool beginCapture(std::string& error);
  bool endCapture(size_t slot, std::string& error);
  /// Ends a capture that failed part way and keeps none of it (instantiated, the part captured
  /// would be replayed as if it were the whole step).
  void abandonCapture(size_t slot);
  bool captured(size_t slot) const { return slot < graphs_.size() && graphs_[slot].exec; }
  bool replay(size_t slot, std::string& error);
  /// Waits for the device and destroys the captured graphs (before what they reference goes: NCCL
  /// keeps a communicator whose work a graph holds until that graph is destroyed).
  void dropGraph();
  bool synchronize(std::string& error);
  /// Data parallelism: a second stream, of higher priority, for the collectives. commFork makes it
  /// wait for what the compute stream has enqueued; commDone(slot) marks what it has enqueued so far
  /// (event `slot`, one per collective), and waitComm(slot) makes the compute stream wait for that.
  bool openCommStream(std::string& error);
  void* commStream() const { return commStream_; }
  bool commFork(std::string& error);
  bool commDone(size_t slot, std::string& error);
  bool waitComm(size_t slot, std::string& error);
  /// Waits until both streams are idle, calling `healthy` as it polls; fails after `timeoutMs`.
  bool waitIdle(int timeoutMs, const std::function<bool(std::string&)>& healthy, std::string& error);
  /// A device buffer of at least `bytes` beside the arena (kept for later calls; never during a step), 0 on error.
  uint64_t scratch(uint64_t bytes, std::string& error);
  /// Profiling: records event `slot` on the stream; after a synchronize, the milliseconds between two.
  bool recordEvent(size_t slot, std::string& error, bool onCommStream = false);
  float elapsedMs(size_t from, size_t to);
  const std::string& description() const { return description_; }

private:
  struct Api;
  bool check(int result, const char* what, std::string& error);
  const Api* api_ = nullptr;
  std::unique_ptr<CublasLt> lt_;
  std::string gemmNote_;
  void* context_ = nullptr;
  std::vector<void*> modules_; ///< the kernels' modules (one, or the parts of a large program)
  void* stream_ = nullptr;
  bool ownStream_ = true; ///< false: the caller's stream, which stays theirs
  void* commStream_ = nullptr;
  void* forkEvent_ = nullptr;
  std::vector<void*> joinEvents_;
  uint64_t scratch_ = 0, scratchBytes_ = 0;
  struct Graph {
    void *graph = nullptr, *exec = nullptr;
  };
  void release(Graph& g); ///< destroys its graph and executable
  std::vector<Graph> graphs_; ///< by slot
  int device_ = 0;
  uint64_t arena_ = 0, workspace_ = 0, workspaceBytes_ = 0;
  std::vector<void*> functions_, events_;
  std::vector<int64_t> sharedAllowed_; ///< per kernel: the dynamic shared memory its launches may ask for (raised past 48 KiB once)
  std::string description_;
};

} // namespace sgc::rt
