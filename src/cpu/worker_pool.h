// Threads kept for the CPU backend, so a launch wakes workers instead of
// creating them (creating and joining a thread costs tens of microseconds,
// more than a small decode call's whole work). A worker that finished a job
// polls for the next one for a short while before it sleeps, since waking a
// sleeping thread costs about as much as creating one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fsdpa::detail::cpu {

// A job's body without owning it (std::function may allocate on every
// launch): a context pointer and the function that runs one slot of it.
struct SlotWork {
  const void* context;
  void (*run_slot)(const void* context, int slot);
  void operator()(int slot) const { run_slot(context, slot); }
};

class WorkerPool {
 public:
  WorkerPool() = default;
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs work(slot) once for each slot in [0, threads), slot 0 on the calling
  // thread, and returns when all have returned. One job runs at a time: a
  // caller that finds the pool busy (another thread's launch) gets false and
  // nothing is run. Workers are started on first need; when the system
  // refuses one, the slots it would have run are run by the caller.
  bool try_run(int threads, const SlotWork& work);

 private:
  // Runs the slot in every job published after generation `seen`.
  void worker(int slot, uint64_t seen);

  std::mutex job_;    // held by the one caller whose job runs
  std::mutex mutex_;  // guards the sleep of idle workers
  std::condition_variable wake_;
  std::vector<std::thread> workers_;  // workers_[i] runs slot i + 1
  // The current job, published by the release store of generation_.
  const SlotWork* work_ = nullptr;
  int slots_ = 0;
  std::atomic<uint64_t> generation_{0};  // bumped per job
  std::atomic<int> running_{0};          // workers still in the current job
  std::atomic<bool> stop_{false};
};

// The process's pool.
WorkerPool& worker_pool();

}  // namespace fsdpa::detail::cpu
