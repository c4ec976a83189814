#include "codegen/Progress.h"

#include <cstdio>

namespace sgc::codegen {

Progress::~Progress() {
  if (enabled_ && !running_.empty()) std::fputs("\n", stderr);
}

void Progress::stage(const std::string& name) {
  done();
  if (!enabled_) return;
  running_ = name;
  start_ = std::chrono::steady_clock::now();
  std::fprintf(stderr, "sgc: %s ...", name.c_str());
  std::fflush(stderr);
}

void Progress::done() {
  if (!enabled_ || running_.empty()) return;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r\033[Ksgc: %s  %.2f s\n", running_.c_str(), s); // the line of the stage, now with its time
  std::fflush(stderr);
  running_.clear();
}

} // namespace sgc::codegen
