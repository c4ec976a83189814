// The thread pool (see ThreadPool.h).
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>

namespace sgc::rt {
namespace {

/// Spins until `done()` or about 50 us have passed; returns whether it is done.
template <typename F>
bool spinUntil(F done) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void chunk(int64_t n, int parts, int index, int64_t& begin, int64_t& end) {
  begin = n * index / parts;
  end = n * (index + 1) / parts;
}

} // namespace

int ThreadPool::maxThreads() { return (int)std::max(64u, 4 * std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int threads) {
  try {
    workers_.reserve(threads > 1 ? threads - 1 : 0);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  } catch (...) { // a thread the system would not create: the ones started stop before the error leaves
    stopAll();
    throw;
  }
}

ThreadPool::~ThreadPool() { stopAll(); }

void ThreadPool::stopAll() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  while (true) {
    auto published = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    if (!spinUntil(published)) {
      std::unique_lock<std::mutex> l(mu_);
      start_.wait(l, published);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    const std::function<void(int64_t, int64_t)>* task;
    int64_t n;
    {
      std::lock_guard<std::mutex> l(mu_); // task_ and n_ were written under it, before the generation moved
      seen = generation_.load(std::memory_order_relaxed);
      task = task_;
      n = n_;
    }
    int64_t b, e;
    chunk(n, size(), index, b, e);
    if (b < e) (*task)(b, e);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> l(mu_); // the caller may be about to sleep on done_
      done_.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (workers_.empty() || n < 2) {
    if (n > 0) fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    task_ = &fn;
    n_ = n;
    pending_.store((int)workers_.size(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  int64_t b, e;
  chunk(n, size(), 0, b, e);
  if (b < e) fn(b, e);
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (spinUntil(finished)) return;
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, finished);
}

} // namespace sgc::rt
