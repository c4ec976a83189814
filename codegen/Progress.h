// The progress of a long compile on stderr: the stage that runs, and its time
// when it ends, one line per stage:
//   sgc: import model.onnx  0.41 s
//   sgc: LLVM for x86-64 and sm_90 (ptxas): 63 GPU kernels in 4 modules ...
// Reported only where asked (sgc compile: stderr is a terminal, no --quiet).
#pragma once
#include <chrono>
#include <string>

namespace sgc::codegen {

class Progress {
public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress(); ///< a stage still running (the compile failed in it) keeps its line, without a time

  /// Ends the running stage, if any, and starts `name`.
  void stage(const std::string& name);
  /// Ends the running stage, if any, with its time.
  void done();

private:
  bool enabled_;
  std::string running_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace sgc::codegen
