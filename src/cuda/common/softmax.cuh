// Small pieces of the softmax shared by the CUDA kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/semantics.h"

namespace fsdpa::detail::cuda {

constexpr float kLn2 = 0.6931471805599453f;
constexpr float kMinusInf = -__builtin_huge_valf();

// 2^x with the special-function unit; ex2(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1/x with the special-function unit; rcp(+-inf) = +-0.
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Reductions over groups of kLanes consecutive lanes (lanes kLanes g ..
// kLanes g + kLanes - 1 hold one row), every lane of a group getting the
// result.
template <int kLanes>
__device__ __forceinline__ float lane_group_max(float x) {
  static_assert(kLanes >= 2 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two");
#pragma unroll
  for (int step = 1; step < kLanes; step *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, step));
  return x;
}
template <int kLanes>
__device__ __forceinline__ float lane_group_sum(float x) {
  static_assert(kLanes >= 2 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two");
#pragma unroll
  for (int step = 1; step < kLanes; step *= 2) x += __shfl_xor_sync(0xffffffffu, x, step);
  return x;
}
// The 4 lanes of a quad (lanes 4g..4g+3 hold one accumulator row of an mma
// tile).
__device__ __forceinline__ float quad_max(float x) { return lane_group_max<4>(x); }
__device__ __forceinline__ float quad_sum(float x) { return lane_group_sum<4>(x); }

// Reads one element of an additive (f32/f16/bf16) or boolean mask as float;
// a boolean `false` reads as -inf. dtype codes follow fsdpa::DType.
__device__ __forceinline__ float load_mask_value(const void* mask, int dtype, int64_t offset) {
  switch (dtype) {
    case 0:
      return __half2float(static_cast<const __half*>(mask)[offset]);
    case 1:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(mask)[offset]);
    case 2:
      return static_cast<const float*>(mask)[offset];
    default:
      return static_cast<const uint8_t*>(mask)[offset] ? 0.0f : -__int_as_float(0x7f800000);
  }
}

}  // namespace fsdpa::detail::cuda
