// The state of a session (the C ABI's sgc_session), shared by the files that
// implement the ABI: Session.cpp (sessions, training steps, tensors,
// checkpoints) and Decode.cpp (decoding over the paged key/value cache).
#pragma once
#include "sgc/sgc.h"

#include "runtime/Comm.h"
#include "runtime/Cuda.h"
#include "runtime/GpuStep.h"
#include "runtime/KvPages.h"
#include "runtime/Program.h"
#include "runtime/ThreadPool.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

// Provided by the compiled model's object (hidden: not exported from train.so).
extern "C" {
typedef void (*sgcrt_kernel)(void**, int64_t, int64_t);
__attribute__((visibility("hidden"))) extern const char sgcrt_program[];
__attribute__((visibility("hidden"))) extern const uint64_t sgcrt_program_size;
__attribute__((visibility("hidden"))) extern const uint8_t sgcrt_weights[];
__attribute__((visibility("hidden"))) extern const uint64_t sgcrt_weights_size;
__attribute__((visibility("hidden"))) extern const sgcrt_kernel sgcrt_kernels[];
struct sgcrt_gpu_blob {
  const char* name;
  const void* data;
  uint64_t size;
};
__attribute__((visibility("hidden"))) extern const sgcrt_gpu_blob sgcrt_gpu_blobs[];
__attribute__((visibility("hidden"))) extern const uint64_t sgcrt_gpu_blob_count;
}

namespace sgc::rt {

/// Where a step program's tensors lie in a session: the library's step, or a token bucket's
/// (its own inputs and constants; the rest the step's), and what runs it on a GPU.
struct StepArena {
  const Program* prog = nullptr;
  uint8_t* base[kNumRegions] = {};    ///< CPU: region starts in host memory
  uint64_t devBase[kNumRegions] = {}; ///< GPU: region starts in device memory
  GpuStep* gpuStep = nullptr;         ///< GPU
  uint8_t* data(int id) const { return base[prog->tensors[id].region] + prog->tensors[id].offset; }
  uint64_t devData(int id) const { return devBase[prog->tensors[id].region] + prog->tensors[id].offset; }
};

/// A decode library's session state (see Decode.cpp): the cache's pages and the host's staging
/// of one step's inputs and logits, all sized when the session is made.
struct DecodeState {
  std::vector<StepArena> steps; ///< the library's step, then its token buckets by ascending tokens
  std::vector<std::vector<uint8_t>> mirror; ///< GPU: per step, its inputs region as staged (sent in one copy)
  KvPages pages;
  std::vector<int64_t> ids, positions; ///< [tokens]
  std::vector<int32_t> seq, pos;       ///< [tokens]
  std::vector<int32_t> narrow;         ///< [tokens]: ids or positions of an I32 input
  std::vector<uint8_t> logits;         ///< the logits tensor's bytes
  std::vector<int64_t> next;           ///< [tokens]: each row's next token
  std::vector<float> temperature, topP; ///< [tokens]: each row's sampling (temperature 0: greedy)
  std::vector<int32_t> topK;           ///< [tokens]
  std::vector<uint64_t> seed;          ///< [tokens]
  std::vector<std::pair<int32_t, int32_t>> copies; ///< pages to copy on write before a step
  std::vector<int32_t> shared;         ///< a step's shared last pages (see pagesForStep)
  DecodeState(const Decode& d, uint64_t logitsBytes);
};

} // namespace sgc::rt

struct sgc_session {
  sgc::rt::Program prog;
  void* arena = nullptr;
  uint8_t* base[sgc::rt::kNumRegions] = {};      ///< CPU: region starts in host memory
  std::unique_ptr<sgc::rt::CudaDevice> gpu;      ///< GPU: the device and its arena
  uint64_t devBase[sgc::rt::kNumRegions] = {};   ///< GPU: region starts in device memory
  std::unique_ptr<sgc::rt::ThreadPool> pool;
  std::map<std::string, int> byName;
  std::vector<int> lists[4]; ///< tensor ids per sgc_tensor_kind
  std::vector<bool> inputSet;
  std::unique_ptr<sgc::rt::GpuStep> gpuStep;   ///< GPU: runs the steps (destroyed before the device)
  std::vector<std::unique_ptr<sgc::rt::GpuStep>> bucketSteps; ///< GPU: runs a decode library's token buckets
  mutable std::string describedAs;
  std::unique_ptr<sgc::rt::Communicator> comm; ///< data parallelism: the gradients' collectives (MPI, or NCCL on a GPU)
  std::unique_ptr<sgc::rt::Communicator> mpi;  ///< on a GPU launched by mpirun: what sent the NCCL id
  std::vector<uint64_t> address;         ///< CPU: each tensor's address, by id
  std::vector<std::vector<sgc::rt::Span>> spans;  ///< per launch: what its all-reduce reduces (CPU)
  std::vector<std::vector<int>> waits;   ///< per launch: the collectives that must finish before it
  std::string broken;                    ///< why the communicator failed: every later step fails too
  double lr = 1e-3;
  std::unique_ptr<sgc::rt::DecodeState> decode; ///< a decode library's pages and staging
  bool paramsLoaded = true; ///< false until sgc_load for --weights none
  /// Whether the parameters' bf16 copies (TensorDesc::shadowOf) may differ from the parameters
  /// (they start so, and sgc_set_tensor and sgc_load make them so): the next step casts them first.
  bool copiesStale = true;
  mutable bool viewed = false; ///< a parameter's view was handed out: every step casts the copies first
  std::string tracePath;    ///< sgc_trace_next_step: where the next step's trace goes (empty: none)
  int ordinal = -1;         ///< the GPU's ordinal (cuda:N), -1 on the CPU

  ~sgc_session() {
    if (gpu) gpu->dropGraph(); // the graph goes before the communicator whose work it holds
    comm.reset();
    mpi.reset();
    std::free(arena);
  }
  uint8_t* data(int id) { return base[prog.tensors[id].region] + prog.tensors[id].offset; }
  const uint8_t* data(int id) const { return base[prog.tensors[id].region] + prog.tensors[id].offset; }
  uint64_t devData(int id) const { return devBase[prog.tensors[id].region] + prog.tensors[id].offset; }
  /// The same, of a step program (the library's or a token bucket's) in the arena.
  bool read(const sgc::rt::StepArena& at, int id, void* dst, std::string& error) const {
    uint64_t bytes = at.prog->tensors[id].bytes;
    if (gpu) return gpu->toHost(dst, at.devData(id), bytes, error);
    std::memcpy(dst, at.data(id), bytes);
    return true;
  }
  bool write(const sgc::rt::StepArena& at, int id, const void* src, std::string& error) {
    uint64_t bytes = at.prog->tensors[id].bytes;
    if (gpu) return gpu->toDevice(at.devData(id), src, bytes, error);
    std::memcpy(at.data(id), src, bytes);
    return true;
  }

  /// Copies a tensor's bytes out of / into the arena, wherever it lives.
  bool read(int id, void* dst, std::string& error) const {
    if (gpu) return gpu->toHost(dst, devData(id), prog.tensors[id].bytes, error);
    std::memcpy(dst, data(id), prog.tensors[id].bytes);
    return true;
  }
  bool write(int id, const void* src, std::string& error) {
    if (gpu) return gpu->toDevice(devData(id), src, prog.tensors[id].bytes, error);
    std::memcpy(data(id), src, prog.tensors[id].bytes);
    return true;
  }
  /// The same, from or to where `t` lies: host memory, or the session's GPU (copied on the
  /// session's stream; a read waits for its copy, a write is ordered before the next step).
  bool write(int id, const DLTensor& t, std::string& error) {
    const uint8_t* src = (const uint8_t*)t.data + t.byte_offset;
    if (t.device.device_type == kDLCUDA) return gpu->copy(devData(id), (uint64_t)(uintptr_t)src, prog.tensors[id].bytes, error);
    return write(id, src, error);
  }
  bool read(int id, const DLTensor& t, std::string& error) const {
    uint8_t* dst = (uint8_t*)t.data + t.byte_offset;
    if (t.device.device_type == kDLCUDA)
      return gpu->copy((uint64_t)(uintptr_t)dst, devData(id), prog.tensors[id].bytes, error) && gpu->synchronize(error);
    return read(id, dst, error);
  }
};

namespace sgc::rt {

/// Sets the thread's last error to `msg`; returns `s`.
sgc_status fail(sgc_status s, const std::string& msg);
/// Runs one step's launches (train: also the updates) on the session's device.
bool runStep(sgc_session* s, bool train, std::string& error);
/// Runs a decode step program's launches and updates: the library's step (as runStep) or a token bucket's.
bool runStepOf(sgc_session* s, const StepArena& at, std::string& error);

} // namespace sgc::rt
