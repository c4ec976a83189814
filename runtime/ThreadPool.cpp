// The thread pool (see ThreadPool.h).
#include "runtime/ThreadPool.h"

#include <algorithm>

namespace sgc::rt {

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

static void chunk(int64_t n, int parts, int index, int64_t& begin, int64_t& end) {
  begin = n * index / parts;
  end = n * (index + 1) / parts;
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t)>* task;
    int64_t n;
    {
      std::unique_lock<std::mutex> l(mu_);
      start_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
      n = n_;
    }
    int64_t b, e;
    chunk(n, size(), index, b, e);
    if (b < e) (*task)(b, e);
    std::lock_guard<std::mutex> l(mu_);
    if (--pending_ == 0) done_.notify_one();
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
    pending_ = (int)workers_.size();
    ++generation_;
  }
  start_.notify_all();
  int64_t b, e;
  chunk(n, size(), 0, b, e);
  if (b < e) fn(b, e);
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return pending_ == 0; });
}

} // namespace sgc::rt
