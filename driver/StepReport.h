// What sgc train says of each step. When stdout is not a terminal, one JSON
// line a step:
//   {"step": 3, "loss": 0.824902952, "ms": 1.92312, "samples_per_s": 16639.6}
// (and "tokens_per_s" for a model of token sequences); on a terminal one
// progress line instead, rewritten each step: step / total, loss, ms a step,
// samples/s (tokens/s) and the time left. With a metrics file (--metrics) each
// step's figures are also appended to it in Prometheus's text format.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace sgc::driver {

class StepReport {
public:
  /// Steps [first, first + steps) of `model`; a step trains on `samples` samples (a batch's
  /// leading dim) and, for a model of token sequences, `tokens` tokens (else 0). JSON lines
  /// always without `progressLine` (a rank of an MPI job: mpirun gives ranks a terminal).
  StepReport(std::string model, int64_t first, int64_t steps, int64_t samples, int64_t tokens, bool progressLine = true);
  StepReport(const StepReport&) = delete;
  StepReport& operator=(const StepReport&) = delete;
  ~StepReport(); ///< ends the progress line

  /// Appends each step's figures to `path` (its HELP and TYPE lines first when it is new), the
  /// peak memory as peakBytes() says it; false (and `error`) when the file cannot be opened.
  bool metrics(const std::string& path, std::function<int64_t()> peakBytes, std::string& error);

  /// Reports step `step` and its loss, timed from the report before (or the reporter's making).
  /// A loss that is not finite is reported as an error: returns 1, else 0.
  int step(int64_t step, double loss);

private:
  std::string model_;
  int64_t first_, steps_, samples_, tokens_, done_ = 0;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_;
  FILE* metrics_ = nullptr;
  std::string labels_; ///< {model="..."} without the step, escaped
  std::function<int64_t()> peakBytes_;
  void writeMetrics(int64_t step, double loss, double ms);
};

/// The samples and tokens of one batch of a model whose inputs have these shapes and whether
/// each holds integers: samples the first input's leading dim; tokens the element count of the
/// first integer input of rank 2 or more (token ids [batch, sequence]), else 0.
struct BatchSize {
  int64_t samples = 0, tokens = 0;
  void add(const int64_t* shape, int32_t ndim, bool integer);
};

} // namespace sgc::driver
