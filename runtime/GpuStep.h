// The training and evaluation steps on a GPU: each launch of the program (a
// GEMM through cuBLASLt and its epilogue, a GPU form, or the kernel itself),
// then the updates, on the device's stream; a collective (with a
// communicator) runs on the communication stream, from the point the compute
// stream reaches it to the first launch that touches its tensors. The first training step runs as
// it is enqueued (it warms up the kernels and cuBLASLt); the second is
// captured as a CUDA graph, which every later one replays.
// Environment: SGC_CUDA_GRAPHS=0 (never capture), SGC_GEMM_TUNING=0 (each GEMM takes cuBLASLt's
// first candidate instead of the fastest of its first eight, timed here), SGC_PROFILE=FILE (no graph;
// each launch's GPU time, and where in the last step it started and on which
// stream, its tensors' bytes and a product's or fused attention's flops, tab-separated, written
// when the stepper is destroyed; a launch whose work runs in an earlier one has no row).
#pragma once
#include "runtime/Comm.h"
#include "runtime/Cuda.h"
#include "runtime/Program.h"

#include <string>
#include <vector>

namespace sgc::rt {

class GpuStep {
public:
  /// `address`: each tensor's device address, by tensor id; `slot`: its CUDA graph's (0 for the
  /// library's step, 1 + i for a decode library's token bucket i).
  GpuStep(const Program& prog, CudaDevice& gpu, std::vector<uint64_t> address, size_t slot = 0);
  ~GpuStep();
  /// Reads the environment, prepares a cuBLASLt plan for each GEMM (when the library is loaded)
  /// and checks that the GPU code carries every kernel a step launches.
  bool prepare(std::string& error);
  /// Data parallelism: the collectives run through `comm` (NCCL), on the communication stream.
  void setCommunicator(Communicator* comm);
  /// Enqueues one step (forward only unless `train`); the caller reads the loss, which waits for it.
  /// A step leaves out the refresh launches (Launch::refresh).
  bool run(bool train, std::string& error);
  /// Enqueues the refresh launches alone (outside any graph): the parameters' bf16 copies.
  bool refresh(std::string& error);
  /// The device, its GEMM library, and whether the step is replayed as a graph.
  std::string description() const;

  /// One launch of a traced step: when it ran on its stream, in microseconds from the step's start.
  struct Timed {
    size_t launch;
    bool commStream;
    double start, end;
    std::string kernel; ///< the (first) kernel it ran: ours, "cublasLt" or the collective's op
  };
  /// Times the launches of the next step (run launch by launch, not as a graph) for traceOfLast.
  void traceNextStep() { traceNext_ = true; }
  /// The launches of the last traced step, in launch order.
  const std::vector<Timed>& traceOfLast() const { return trace_; }

private:
  bool prepareGemms(std::string& error);
  /// Whether the GPU code carries each kernel enqueue launches (the compiler leaves out those only
  /// a CPU runs); if not, `error` names the first missing.
  bool kernelsCarried(std::string& error) const;
  bool enqueue(bool train, std::string& error);
  /// Launch i's collective: on the communication stream through the communicator, else (one rank,
  /// or a shard) a copy on the compute stream.
  bool collective(size_t i, const Collective& c, std::string& error);
  bool onCommStream(const Collective& c) const;
  bool launch(int kernel, const std::vector<int>& ids, bool serial, int64_t extent, std::string& error, int threads = 256, int64_t shared = 0);
  void writeProfile() const;

  const Program& prog_;
  CudaDevice& gpu_;
  std::vector<uint64_t> address_;
  size_t slot_;
  std::vector<int> gemmPlans_; ///< per launch, its cuBLASLt plan (-1: our kernel)
  std::vector<bool> epilogueInGemm_; ///< per launch, whether its plan computes what its epilogue kernel does (a bias, a GELU)
  std::vector<bool> geluInGemm_; ///< per launch, whether its plan computes its GELU (into Gemm::Gelu::result)
  std::vector<bool> skipped_;    ///< per launch, whether an earlier GEMM's epilogue computes what it does
  bool useGraphs_ = true;
  bool tuneGemms_ = true; ///< time cuBLASLt's candidates for each distinct GEMM (SGC_GEMM_TUNING=0: its first)
  int trainSteps_ = 0;         ///< training steps run before the capture
  std::string profile_;        ///< SGC_PROFILE
  std::vector<double> profileMs_; ///< per launch, then the whole step
  std::vector<double> profileStartMs_; ///< per launch: its start in the last profiled step
  int profileSteps_ = 0;
  int profileFrom_ = 0;  ///< SGC_PROFILE_FROM: the steps before this one are not profiled
  int stepsSeen_ = 0;
  bool traceNext_ = false;     ///< the next step is traced (sgc_trace_next_step)
  std::vector<bool> timed_;    ///< per launch: events were recorded around it in this step
  std::vector<Timed> trace_;
  std::vector<uint64_t> args_;
  Communicator* comm_ = nullptr;
  std::vector<std::vector<Span>> spans_; ///< per launch: what its collective reduces
  std::vector<std::vector<int>> waits_;  ///< per launch: the collectives it waits for
};

} // namespace sgc::rt
