// Tensor-core building blocks for sm_80+: mma.sync m16n8k16 with f32
// accumulation, ldmatrix, and packing f32 pairs into 16-bit operands.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// group = lane / 4 and quad = lane % 4:
//   A 16x16 (4 regs): a0 (group, 2quad..+1), a1 (group+8, ..), a2 (group, 8+2quad..),
//                     a3 (group+8, 8+2quad..)
//   B 16x8  (2 regs): b0 (k 2quad..+1, n group), b1 (k 8+2quad..+1, n group)
//   C 16x8  (4 f32):  c0,c1 (group, 2quad..+1), c2,c3 (group+8, 2quad..+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/common/copy.cuh"

namespace fsdpa::detail::cuda {

template <typename T>
struct MmaType;
template <>
struct MmaType<__nv_bfloat16> {
  static constexpr bool kBf16 = true;
};
template <>
struct MmaType<__half> {
  static constexpr bool kBf16 = false;
};

// d += a * b for one m16n8k16 tile.
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  if constexpr (MmaType<T>::kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 16-bit matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The same, each matrix transposed on the way (B operands stored k-major).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Two floats as one 32-bit register of 16-bit values; `low` is the lower
// column index, as the fragment layouts expect.
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float low, float high) {
  if constexpr (MmaType<T>::kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(low, high);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

}  // namespace fsdpa::detail::cuda
