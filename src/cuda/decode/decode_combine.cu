// The combine kernel: merges the key splits' unnormalized partial outputs
// with their (max, sum) pairs into out and lse, adding the sink to the
// denominator. One block per output row; the per-split weights are computed
// once into shared memory, then the threads sweep the row's columns.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/check.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_launch.h"

namespace fsdpa::detail::cuda {

namespace {

constexpr int kCombineThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
__device__ __forceinline__ float minus_inf() { return __int_as_float(0xff800000u); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) {
  return __float2bfloat16_rn(x);
}

template <bool IsMax>
__device__ float block_reduce(float x, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = IsMax ? fmaxf(x, other) : x + other;
  }
  __syncthreads();  // scratch may still be read from the previous reduction
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < kCombineThreads / 32; ++w) x = IsMax ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const DecodeParams p) {
  extern __shared__ float weight_s[];  // [num_splits]
  __shared__ float scratch[kCombineThreads / 32];
  const int64_t row = blockIdx.x;
  const int rows_total = p.batch * p.heads_q * p.len_q;
  const int i = int(row % p.len_q);
  const int head = int((row / p.len_q) % p.heads_q);
  const int batch = int(row / (int64_t(p.len_q) * p.heads_q));
  const float2* stats = reinterpret_cast<const float2*>(p.partial_max_sum);

  float top = minus_inf();
  for (int s = threadIdx.x; s < p.num_splits; s += kCombineThreads)
    top = fmaxf(top, stats[int64_t(s) * rows_total + row].x);
  top = block_reduce<true>(top, scratch);
  const float sink = p.sinks != nullptr ? p.sinks[head * p.sinks_stride] * kLog2e : minus_inf();
  top = fmaxf(top, sink);
  const float base = top == minus_inf() ? 0.f : top;

  float sum = 0.f;
  for (int s = threadIdx.x; s < p.num_splits; s += kCombineThreads) {
    const float2 ms = stats[int64_t(s) * rows_total + row];
    const float weight = exp2f(ms.x - base);
    weight_s[s] = weight;
    sum += ms.y * weight;
  }
  sum = block_reduce<false>(sum, scratch) + exp2f(sink - base);  // also orders weight_s
  const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;

  T* out = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
           i * p.out_strides.row;
  for (int d = threadIdx.x; d < p.head_dim_v; d += kCombineThreads) {
    float value = 0.f;
    for (int s = 0; s < p.num_splits; ++s)
      value += weight_s[s] * p.partial_out[(int64_t(s) * rows_total + row) * p.dv_ws + d];
    out[d] = from_float<T>(value * inv_sum);
  }
  if (threadIdx.x == 0 && p.lse != nullptr)
    p.lse[batch * p.lse_strides.batch + head * p.lse_strides.head + i * p.lse_strides.row] =
        top == minus_inf() ? minus_inf() : (base + log2f(sum)) * kLn2;
}

}  // namespace

template <typename T>
void launch_decode_combine(const DecodeParams& p, cudaStream_t stream) {
  const auto kernel = decode_combine_kernel<T>;
  // + 4 floats: the weight loop may be vectorized past the last split.
  const size_t smem = (size_t(p.num_splits) + 4) * sizeof(float);
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.len_q;
  prepare_launch(reinterpret_cast<const void*>(kernel), kCombineThreads, smem,
                 "decode_combine_kernel");
  kernel<<<static_cast<unsigned>(rows), kCombineThreads, smem, stream>>>(p);
  check(cudaGetLastError(), "decode_combine_kernel<<<>>>");
}

template void launch_decode_combine<float>(const DecodeParams&, cudaStream_t);
template void launch_decode_combine<__half>(const DecodeParams&, cudaStream_t);
template void launch_decode_combine<__nv_bfloat16>(const DecodeParams&, cudaStream_t);

}  // namespace fsdpa::detail::cuda
