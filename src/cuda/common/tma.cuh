// Device side of the tensor memory accelerator (sm_90) and the shared-memory
// barriers its copies complete on: one thread arms a barrier with the bytes
// to expect and issues the copies; every consumer waits on the barrier's
// phase. Host side: cuda/common/tma.h.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fsdpa::detail::cuda {

// A barrier whose phase completes after `arrivals` arrivals (and, for a
// copy barrier, the bytes announced by barrier_expect_bytes).
__device__ __forceinline__ void barrier_init(uint32_t barrier, uint32_t arrivals = 1) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals)
               : "memory");
}

// This thread's arrival, releasing its earlier memory accesses to the
// threads that wait for the phase (barrier_wait acquires).
__device__ __forceinline__ void barrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// Makes initialized barriers visible to the copy engine; then a block barrier.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The one arrival of this phase, announcing `bytes` of copies to come.
__device__ __forceinline__ void barrier_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}

// Waits until the barrier's phase `parity` (0, 1, 0, ... per use) completed.
__device__ __forceinline__ void barrier_wait(uint32_t barrier, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

// Retires a barrier whose phases are all complete, so that its 8 bytes may
// hold other data.
__device__ __forceinline__ void barrier_invalidate(uint32_t barrier) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

// Copies `bytes` (a multiple of 16) from global `source` to shared
// `destination` (both 16-byte aligned) in one bulk copy, completing the
// bytes on `barrier`.
__device__ __forceinline__ void bulk_copy_global_to_shared(uint32_t destination, const void* source,
                                                           uint32_t bytes, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(destination),
      "l"(source), "r"(bytes), "r"(barrier)
      : "memory");
}

// Copies the box at (column, row, head, batch) of a 4-d tensor map into
// shared memory at `destination`, completing `bytes` on `barrier`.
__device__ __forceinline__ void tma_load_4d(uint32_t destination, const CUtensorMap* map,
                                            uint32_t barrier, int column, int row, int head,
                                            int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row), "r"(head), "r"(batch),
      "r"(barrier)
      : "memory");
}

// The same for a 5-d map (make_swizzle128_panel_map: column, row, panel,
// head, batch).
__device__ __forceinline__ void tma_load_5d(uint32_t destination, const CUtensorMap* map,
                                            uint32_t barrier, int column, int row, int panel,
                                            int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row), "r"(panel), "r"(head),
      "r"(batch), "r"(barrier)
      : "memory");
}

// ---- clusters (sm_90): blocks that read each other's shared memory.

// This block's rank in its cluster, and the cluster's blocks (0 and 1
// in a launch without clusters).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ uint32_t cluster_blocks() {
  uint32_t blocks;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(blocks));
  return blocks;
}

// The cluster barrier in two halves, every thread of every block of the
// cluster: arrive releases this thread's earlier accesses, wait returns once
// all arrived and acquires theirs.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The shared address `local` of this block as seen in cluster block `rank`,
// and 16- and 8-byte loads from such an address.
__device__ __forceinline__ uint32_t cluster_address(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ float4 load_cluster_float4(uint32_t address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}
__device__ __forceinline__ float2 load_cluster_float2(uint32_t address) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(address)
               : "memory");
  return v;
}

}  // namespace fsdpa::detail::cuda
