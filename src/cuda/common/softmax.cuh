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

// Reductions over the 4 lanes of a quad (lanes 4g..4g+3 hold one
// accumulator row of an mma tile).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

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
