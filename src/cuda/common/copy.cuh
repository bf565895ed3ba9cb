// Asynchronous global -> shared copies (cp.async, sm_80+).
#pragma once

#include <cstdint>

namespace fsdpa::detail::cuda {

// Copies `valid_bytes` (0..16) from global `source` to 16 bytes of shared
// memory at `shared_destination` and zero-fills the rest: the predicated
// load that lets a head-dim bucket or a tile run past the tensor's end
// without reading it. With valid_bytes == 0 nothing is read.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t shared_destination, const void* source,
                                                  int valid_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_destination),
               "l"(source), "r"(valid_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace fsdpa::detail::cuda
