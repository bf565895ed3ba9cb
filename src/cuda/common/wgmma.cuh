// Hopper (sm_90a) warpgroup MMA: shared-memory matrix descriptors, the
// fences that order wgmma against ordinary code, and the generated
// m64nNk16 wrappers (wgmma_ops.cuh). Only code compiled for sm_90a may
// call these (guard with FSDPA_WGMMA_ARCH).
//
// A warpgroup is 4 consecutive warps starting at a multiple of 4; warp w of
// it owns accumulator rows 16w..16w+15, laid out per 8 columns as the
// mma.sync m16n8 C fragment (cuda/common/mma.cuh).
#pragma once

#include <cstdint>

#include "cuda/common/wgmma_ops.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FSDPA_WGMMA_ARCH 1
#else
#define FSDPA_WGMMA_ARCH 0
#endif

namespace fsdpa::detail::cuda {

// The descriptor of a 128-byte-swizzled operand at shared byte address
// `address` (PTX ISA, "Matrix Descriptor Format"): bits 0-13 address / 16,
// 16-29 leading byte offset / 16, 32-45 stride byte offset / 16, 62-63
// swizzle mode (1 = 128 bytes). K-major: the leading offset is unused, the
// stride offset is the distance between 8-row groups. MN-major: the leading
// offset is the distance between 64-element panels along M or N, the stride
// offset between 8-row groups along K.
__device__ __forceinline__ uint64_t swizzle128_descriptor(uint32_t address, uint32_t leading_bytes,
                                                          uint32_t stride_bytes) {
  return static_cast<uint64_t>((address & 0x3FFFFu) >> 4) |
         static_cast<uint64_t>((leading_bytes & 0x3FFFFu) >> 4) << 16 |
         static_cast<uint64_t>((stride_bytes & 0x3FFFFu) >> 4) << 32 | uint64_t{1} << 62;
}

// The value as one the compiler cannot see through: descriptors derived from
// it are computed where they are used, every tile, instead of all of them
// being kept live across the key loop (two registers each, which cost the
// consumers of the warp-specialized kernels their registers).
__device__ __forceinline__ uint64_t opaque(uint64_t x) {
  asm volatile("" : "+l"(x));
  return x;
}
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// Before the first wgmma that reads registers ordinary code wrote.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Ties registers to this point of the program: the compiler may not move
// their reads or writes across it. After wgmma_wait, the accumulators are
// read only after the wait; before wgmma_fence, ordinary writes land first.
template <int kTiles>
__device__ __forceinline__ void pin_registers(float (&d)[kTiles][4]) {
#pragma unroll
  for (int n = 0; n < kTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}
template <int kTiles>
__device__ __forceinline__ void pin_registers(uint32_t (&a)[kTiles][4]) {
#pragma unroll
  for (int n = 0; n < kTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[n][e])::"memory");
}

}  // namespace fsdpa::detail::cuda
