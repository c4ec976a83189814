// A small pool of worker threads for the CPU executor: parallelFor splits
// [0, n) into contiguous chunks, one per thread, and returns when all are done.
// A step launches hundreds of small kernels, so both sides spin a little
// (about 50 us) before they sleep: waking a sleeping thread for every kernel
// costs more than most kernels (14x a step's time when the scheduler places
// the woken thread badly, as it does in a session of its own).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sgc::rt {

class ThreadPool {
public:
  /// The most threads a pool takes: four per core (and at least 64), so that a mistyped count
  /// cannot exhaust the machine's processes.
  static int maxThreads();
  /// Starts threads - 1 workers; throws std::system_error, having stopped those it started,
  /// when the system cannot create one.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return (int)workers_.size() + 1; }
  /// Calls fn(begin, end) on chunks covering [0, n); the caller's thread takes one.
  void parallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

private:
  void work(int index);
  void stopAll();
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_{0}; ///< bumped (under mu_) when a task is published
  std::atomic<int> pending_{0};         ///< workers still running the current task
  std::atomic<bool> stop_{false};
};

} // namespace sgc::rt
