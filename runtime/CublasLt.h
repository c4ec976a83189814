// cuBLASLt for the GPU executor's matrix products, opened with dlopen when a
// session on a GPU has GEMMs (a train.so links no CUDA library). Each GEMM of
// the program is prepared once (descriptors, layouts and the heuristic's
// algorithm for its shapes and alignments) and run on the caller's stream. With a tuner the
// heuristic's first candidates are timed on the device, on the GEMM's own operands, and the
// fastest is kept (once per distinct product: equal descriptors reuse it).
//
// Row-major products are run as their column-major transposes:
//   y = op(a) op(b)  <=>  y^T = op(b)^T op(a)^T,
// so cuBLASLt's "A" is our b and its "B" is our a, and nothing is copied.
#pragma once
#include "runtime/Program.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sgc::rt {

class CublasLt {
public:
  ~CublasLt();
  /// Loads the library: $SGC_CUBLASLT when set ("none": no library, GEMMs run on sgc's kernels),
  /// else libcublasLt.so.13 or .12 from the loader's path or CUDA's lib64.
  static std::unique_ptr<CublasLt> open(std::string& error);
  /// Times a candidate: the milliseconds `enqueue` (one product on `stream`, with `workspace`)
  /// takes on the device, negative when it failed.
  struct Tuner {
    void* stream;
    uint64_t workspace;
    std::function<float(const std::function<bool()>& enqueue)> time;
  };
  /// Prepares `g` with its operands at the given device addresses' alignments, with `bias` (a
  /// device address; 0: none) added to every row by cuBLASLt's BIAS epilogue; with `gelu`, y's
  /// address gets the GELU of that and `aux` (0: none) the product (GELU, GELU_AUX, with BIAS).
  /// With `tuner`, the algorithm is the fastest of the heuristic's candidates (y is written).
  /// The plan's index.
  int prepare(const Gemm& g, uint64_t a, uint64_t b, uint64_t y, uint64_t bias, bool gelu, uint64_t aux, uint64_t workspaceBytes,
              const Tuner* tuner, std::string& error);
  /// Runs plan `plan` on `stream`.
  bool run(int plan, uint64_t a, uint64_t b, uint64_t y, uint64_t workspace, uint64_t workspaceBytes, void* stream, std::string& error);
  const std::string& version() const { return version_; }
  /// Tuning so far: the distinct products timed, and those that took another than the heuristic's first.
  size_t tunedProducts() const { return tuned_.size(); }
  int fasterThanFirst() const { return faster_; }

private:
  struct Api;
  struct Plan;
  const Api* api_ = nullptr;
  void* handle_ = nullptr;
  std::vector<std::unique_ptr<Plan>> plans_;
  std::map<std::string, size_t> tuned_; ///< a tuned product's descriptor -> the plan whose algorithm it took
  int faster_ = 0;
  std::string version_;
};

} // namespace sgc::rt
