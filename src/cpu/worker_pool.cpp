#include "cpu/worker_pool.h"

#include <chrono>
#include <system_error>

namespace fsdpa::detail::cpu {

namespace {

// How long an idle worker polls before it sleeps.
constexpr auto kPollTime = std::chrono::microseconds(200);

}  // namespace

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& thread : workers_) thread.join();
}

void WorkerPool::worker(int slot, uint64_t seen) {
  for (;;) {
    const auto polling_until = std::chrono::steady_clock::now() + kPollTime;
    uint64_t now = generation_.load(std::memory_order_acquire);
    while (now == seen && !stop_.load(std::memory_order_relaxed) &&
           std::chrono::steady_clock::now() < polling_until) {
      std::this_thread::yield();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_.load() || generation_.load(std::memory_order_acquire) != seen;
      });
      now = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = now;
    if (slot < slots_) {
      (*work_)(slot);
      running_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

bool WorkerPool::try_run(int threads, const SlotWork& work) {
  std::unique_lock<std::mutex> job(job_, std::try_to_lock);
  if (!job.owns_lock()) return false;
  int started = static_cast<int>(workers_.size()) + 1;
  while (started < threads) {
    try {
      // The generation before this job's: the worker may start after the bump.
      workers_.emplace_back(&WorkerPool::worker, this, started, generation_.load());
    } catch (const std::system_error&) {
      break;
    }
    ++started;
  }
  const int pooled = std::min(threads, started);
  work_ = &work;
  slots_ = pooled;
  running_.store(pooled - 1, std::memory_order_relaxed);
  {
    // Under the mutex, so that a worker about to sleep sees the new
    // generation or is woken by the notify.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work(0);
  for (int slot = pooled; slot < threads; ++slot) work(slot);  // workers the system refused
  while (running_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  return true;
}

WorkerPool& worker_pool() {
  static WorkerPool pool;
  return pool;
}

}  // namespace fsdpa::detail::cpu
