#include "driver/StepReport.h"

#include "driver/Common.h"

#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace sgc::driver {

void BatchSize::add(const int64_t* shape, int32_t ndim, bool integer) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; ++i) n *= shape[i];
  if (samples == 0 && ndim > 0) samples = shape[0];
  if (tokens == 0 && integer && ndim >= 2) tokens = n;
}

StepReport::StepReport(std::string model, int64_t first, int64_t steps, int64_t samples, int64_t tokens, bool progressLine)
    : model_(std::move(model)), first_(first), steps_(steps), samples_(samples), tokens_(tokens), terminal_(progressLine && isatty(STDOUT_FILENO)),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

StepReport::~StepReport() {
  if (terminal_ && done_ > 0) std::fputs("\n", stdout);
  if (metrics_) std::fclose(metrics_);
}

bool StepReport::metrics(const std::string& path, std::function<int64_t()> peakBytes, std::string& error) {
  metrics_ = std::fopen(path.c_str(), "a");
  if (!metrics_) {
    error = path + ": cannot open the metrics file for appending";
    return false;
  }
  peakBytes_ = std::move(peakBytes);
  std::string model; // a label value: backslash, quote and newline escaped
  for (char c : model_) model += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
  labels_ = "model=\"" + model + "\"";
  if (std::ftell(metrics_) == 0)
    std::fputs("# HELP sgc_train_loss The loss of a training step.\n# TYPE sgc_train_loss gauge\n"
               "# HELP sgc_train_step_milliseconds The wall time of a training step.\n# TYPE sgc_train_step_milliseconds gauge\n"
               "# HELP sgc_train_samples_per_second Samples trained a second in a step.\n# TYPE sgc_train_samples_per_second gauge\n"
               "# HELP sgc_train_tokens_per_second Tokens trained a second in a step (models of token ids).\n"
               "# TYPE sgc_train_tokens_per_second gauge\n"
               "# HELP sgc_train_peak_memory_bytes The memory at its peak: a library's static memory plan, the interpreter's resident set.\n"
               "# TYPE sgc_train_peak_memory_bytes gauge\n",
               metrics_);
  return true;
}

void StepReport::writeMetrics(int64_t step, double loss, double ms) {
  std::string at = "{" + labels_ + ",step=\"" + std::to_string(step) + "\"} ";
  double perS = ms > 0 ? 1000.0 / ms : 0;
  std::fprintf(metrics_, "sgc_train_loss%s%.9g\nsgc_train_step_milliseconds%s%.6g\nsgc_train_samples_per_second%s%.6g\n", at.c_str(), loss,
               at.c_str(), ms, at.c_str(), samples_ * perS);
  if (tokens_ > 0) std::fprintf(metrics_, "sgc_train_tokens_per_second%s%.6g\n", at.c_str(), tokens_ * perS);
  std::fprintf(metrics_, "sgc_train_peak_memory_bytes%s%lld\n", at.c_str(), (long long)peakBytes_());
  std::fflush(metrics_);
}

namespace {

/// "1,234" for rates of 1,000 and up, else three significant digits.
std::string rate(double perSecond) {
  if (perSecond >= 1000) return withCommas((int64_t)std::llround(perSecond));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", perSecond);
  return buf;
}

std::string duration(double seconds) {
  char buf[32];
  int64_t s = (int64_t)std::llround(seconds);
  if (s < 60) std::snprintf(buf, sizeof buf, "%lld s", (long long)s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  return buf;
}

} // namespace

int StepReport::step(int64_t step, double loss) {
  auto now = std::chrono::steady_clock::now();
  double ms = std::chrono::duration<double, std::milli>(now - last_).count();
  last_ = now;
  ++done_;
  if (!std::isfinite(loss)) {
    if (terminal_) std::fputs("\n", stdout);
    const char* what = std::isnan(loss) ? "NaN" : "infinite";
    std::printf("{\"step\": %lld, \"loss\": null, \"error\": \"the loss is %s\"}\n", (long long)step, what);
    std::fflush(stdout);
    done_ = 0; // the line is ended
    return reportError(model_ + ": the loss became " + what + " at step " + std::to_string(step));
  }
  double perS = ms > 0 ? 1000.0 / ms : 0;
  if (metrics_) writeMetrics(step, loss, ms);
  if (!terminal_) {
    std::printf("{\"step\": %lld, \"loss\": %.9g, \"ms\": %.6g, \"samples_per_s\": %.6g", (long long)step, loss, ms, samples_ * perS);
    if (tokens_ > 0) std::printf(", \"tokens_per_s\": %.6g", tokens_ * perS);
    std::printf("}\n");
  } else {
    double mean = std::chrono::duration<double>(now - start_).count() / (double)done_;
    std::string speed = tokens_ > 0 ? rate(tokens_ * perS) + " tokens/s" : rate(samples_ * perS) + " samples/s";
    std::printf("\rsgc: step %lld/%lld  loss %.6g  %.2f ms  %s  %s left\033[K", (long long)(step - first_ + 1), (long long)steps_, loss, ms,
                speed.c_str(), duration(mean * (double)(steps_ - done_)).c_str());
  }
  std::fflush(stdout);
  return 0;
}

} // namespace sgc::driver
