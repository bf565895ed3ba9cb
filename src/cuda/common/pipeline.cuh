// The pieces of a warp-specialized kernel (sm_90): rings of mbarriers and
// their use numbering (StageBarriers: one barrier a stage, for copies a
// block barrier frees or a hand-off between warpgroups; PipelineRing: the
// full and empty rings of stages between one producer and the consumer
// threads); named barriers for warpgroups that take turns; and the register
// reallocation between producer and consumer warpgroups.
#pragma once

#include <cstdint>

#include "cuda/common/tma.cuh"

namespace fsdpa::detail::cuda {

// One barrier per stage of a ring of kStages stages. Uses are numbered
// 0, 1, 2, ... in the order every side takes them: use u lives in stage
// u % kStages and is that stage's (u / kStages)-th phase, so no side keeps
// a phase bit of its own.
template <int kStages>
class StageBarriers {
 public:
  static constexpr int kBytes = kStages * 8;

  // `barriers`: kBytes of 8-byte-aligned shared memory.
  __device__ explicit StageBarriers(uint32_t barriers) : barriers_(barriers) {}

  // By one thread, followed by barrier_init_fence and a barrier of the
  // threads that use them. A phase completes after `arrivals` arrivals
  // (and the bytes announced by barrier_expect_bytes).
  __device__ void init(uint32_t arrivals) const {
    for (int s = 0; s < kStages; ++s) barrier_init(at_stage(s), arrivals);
  }
  // By one thread once every thread's last wait returned (a block barrier
  // after them), so that the memory may hold other data.
  __device__ void invalidate() const {
    for (int s = 0; s < kStages; ++s) barrier_invalidate(at_stage(s));
  }

  __device__ uint32_t at(int use) const { return at_stage(stage(use)); }
  // Waits until use u's phase completed.
  __device__ void wait(int use) const { barrier_wait(at(use), phase(use)); }
  // Waits until the stage's previous use (u - kStages) completed; the first
  // kStages uses pass at once (a fresh barrier's phase before 0 counts as
  // complete).
  __device__ void wait_previous(int use) const { barrier_wait(at(use), phase(use) ^ 1u); }
  __device__ void arrive(int use) const { barrier_arrive(at(use)); }

  static __device__ int stage(int use) { return use % kStages; }

 private:
  static __device__ uint32_t phase(int use) { return static_cast<uint32_t>(use / kStages) & 1u; }
  __device__ uint32_t at_stage(int s) const { return barriers_ + 8 * s; }

  uint32_t barriers_;
};

// kStages stages of one operand between one producer and the consumer
// threads. Stage s has a "full" barrier (one arrival: the producer's,
// announcing the bytes its copies complete) and an "empty" barrier (one
// arrival per consumer thread once it no longer reads the stage).
template <int kStages>
class PipelineRing {
 public:
  static constexpr int kBarrierBytes = 2 * StageBarriers<kStages>::kBytes;

  // `barriers`: kBarrierBytes of 8-byte-aligned shared memory.
  __device__ explicit PipelineRing(uint32_t barriers)
      : full_(barriers), empty_(barriers + StageBarriers<kStages>::kBytes) {}

  // By one thread, followed by barrier_init_fence and a block barrier.
  // `producer_arrivals`: 1 for a TMA producer (its expect-bytes arrival),
  // else the producer threads (one arrival each per use).
  __device__ void init(uint32_t producer_arrivals, uint32_t consumer_threads) const {
    full_.init(producer_arrivals);
    empty_.init(consumer_threads);
  }

  // Producer: waits until use u's stage is free and returns the barrier its
  // copies complete on (a TMA producer announces their bytes there first).
  __device__ uint32_t producer_acquire(int use) const {
    empty_.wait_previous(use);
    return full_.at(use);
  }

  // Consumers: wait until use u's copies landed; release the stage once this
  // thread's reads of it (its warpgroup's MMAs included) are complete.
  __device__ void consumer_wait(int use) const { full_.wait(use); }
  __device__ void consumer_release(int use) const { empty_.arrive(use); }

  static __device__ int stage(int use) { return StageBarriers<kStages>::stage(use); }

 private:
  StageBarriers<kStages> full_, empty_;
};

// Orders this thread's shared-memory accesses across the generic and the
// async proxies: its later async-proxy reads (wgmma operands) after the
// generic-proxy writes it has synchronized with (cp.async copies that a
// barrier reported complete), and its later async-proxy writes (a bulk copy
// into staging memory) after its own generic accesses.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, a
// multiple of 32: sync waits until that many arrived (its own warp's count
// among them); arrive only counts this warp in.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads));
}

// Register reallocation (sm_90a, every warp of a warpgroup together): a
// producer warpgroup gives registers back, consumer warpgroups take them.
// The block launches with its __launch_bounds__ share per thread; the
// consumers' increase waits until the producers' decrease freed enough.
template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace fsdpa::detail::cuda
