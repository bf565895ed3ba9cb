// The combine kernel: merges the key splits' unnormalized partial outputs
// with their (max, sum) pairs into out and lse, adding the sink to the
// denominator. One block per output row and part of up to 256 columns (Dv =
// 512 takes two blocks a row). A block's threads split into column groups
// (float4 where Dv and the workspace allow) times split subsets; each thread
// loads its splits' partial columns and (max, sum) pairs at once, the block
// finds the row's max (a max reduction only), and each thread weights its
// own splits; a shared-memory sum over the subsets gives the row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_launch.h"

namespace fsdpa::detail::cuda {

namespace {

// 256 threads: up to 256 columns as 64 float4 groups x 4 split subsets
// (Dv <= 128: 32 groups x 8 subsets). With 256 columns a block, MLA's
// combine (128 rows x 512 columns) is 256 blocks, one wave at two blocks a
// SM (with 128 columns: 512 blocks in two waves, 0.5 us slower a call;
// bench/NOTES.md, session 8); 64 splits take two batches of loads.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;
constexpr int kCombineColumns = 256;  // per block
// Two blocks per SM allow 128 registers: at the default target (64) the
// float4 batch below spilled 8 bytes.
constexpr int kCombineMinBlocks = 2;
// Loads a lane issues before its FMAs: one batch covers subsets x 8 splits
// (64 at Dv <= 128, 32 with 256 float4 columns).
constexpr int kCombineBatch = 8;
// Per-subset column sums: subsets x groups <= threads, Vec floats a group.
constexpr int kCombineSumFloats = kCombineThreads * 4;
static_assert(kCombineSumFloats >= kCombineColumns);

using decode_kernel::allow_next_launch;
using decode_kernel::wait_for_previous_kernel;

template <int Vec>
__device__ __forceinline__ void load_partial(const float* at, float* v) {
  if constexpr (Vec == 4) {
    const float4 x = *reinterpret_cast<const float4*>(at);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
  } else {
    v[0] = *at;
  }
}

// Vec: floats per column group (4: Dv % 4 == 0 and a 16-byte aligned workspace; else 1).
template <typename T, int Vec>
__global__ void __launch_bounds__(kCombineThreads, kCombineMinBlocks)
    decode_combine_kernel(const DecodeParams p) {
  __shared__ float warp_max_s[kCombineWarps];
  __shared__ float subset_sum_s[kCombineThreads];  // per split subset: its sum of weighted sums
  __shared__ __align__(16) float sum_s[kCombineSumFloats];
  allow_next_launch();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.x;
  const int rows_total = p.batch * p.heads_q * p.len_q;
  const int i = int(row % p.len_q);
  const int head = int((row / p.len_q) % p.heads_q);
  const int batch = int(row / (int64_t(p.len_q) * p.heads_q));
  const float2* stats = reinterpret_cast<const float2*>(p.partial_max_sum) + row;

  // This block's column groups [first_group, + groups) and this thread's
  // group and split subset: splits j, j + subsets, ...
  constexpr int kGroupsPerBlock = kCombineColumns / Vec;
  const int first_group = static_cast<int>(blockIdx.y) * kGroupsPerBlock;
  const int groups = min(kGroupsPerBlock, (p.head_dim_v + Vec - 1) / Vec - first_group);
  const int subsets = kCombineThreads / groups;
  const int g = tid % groups, j = tid / groups;
  const bool has_unit = j < subsets;
  const int64_t split_stride = int64_t(rows_total) * p.dv_ws;
  const float* partial = p.partial_out + row * p.dv_ws + (first_group + g) * Vec;
  float v[kCombineBatch][Vec];
  float2 ms[kCombineBatch];
  int splits = p.num_splits;  // of this row's sequence (sequence_splits), once it may be read
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      const int s = s0 + b * subsets;
      if (has_unit && s < splits) {
        load_partial<Vec>(partial + s * split_stride, v[b]);
        ms[b] = stats[int64_t(s) * rows_total];
      } else {
#pragma unroll
        for (int e = 0; e < Vec; ++e) v[b][e] = 0.f;
        ms[b] = make_float2(kMinusInf, 0.f);
      }
    }
  };
  wait_for_previous_kernel();  // the split kernel's partials
  splits = decode_kernel::sequence_splits(p, int(sequence_len_k(p.kv, batch)),
                                          decode_kernel::batch_split_keys(p));
  load_batch(j);  // partials and their (max, sum) in flight together

  // ---- the row's max: this thread's splits, then the block (max only: the
  // sums are weighted once, below, instead of merged pairwise on the way)
  float top = kMinusInf;
#pragma unroll
  for (int b = 0; b < kCombineBatch; ++b) top = fmaxf(top, ms[b].x);
  if (has_unit)
    for (int s = j + subsets * kCombineBatch; s < splits; s += subsets)
      top = fmaxf(top, stats[int64_t(s) * rows_total].x);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
  if (lane == 0) warp_max_s[warp] = top;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) top = fmaxf(top, warp_max_s[w]);
  const float sink = sink_log2(p.semantics.sinks, p.semantics.sink_stride, head);
  top = fmaxf(top, sink);
  const float base = top == kMinusInf ? 0.f : top;

  // ---- weighted sums of this thread's splits: columns and the denominator
  float acc[Vec], weight_sum = 0.f;
#pragma unroll
  for (int e = 0; e < Vec; ++e) acc[e] = 0.f;
  if (has_unit) {
    for (int s0 = j; s0 < splits; s0 += subsets * kCombineBatch) {
      if (s0 != j) load_batch(s0);
#pragma unroll
      for (int b = 0; b < kCombineBatch; ++b) {
        const float w = exp2f(ms[b].x - base);  // 0 past the last split (max -inf)
        weight_sum += w * ms[b].y;
#pragma unroll
        for (int e = 0; e < Vec; ++e) acc[e] += w * v[b][e];
      }
    }
#pragma unroll
    for (int e = 0; e < Vec; ++e) sum_s[(j * groups + g) * Vec + e] = acc[e];
    if (g == 0) subset_sum_s[j] = weight_sum;
  }
  __syncthreads();

  float sum = exp2f(sink - base);
  for (int k = 0; k < subsets; ++k) sum += subset_sum_s[k];
  const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
  T* out = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
           i * p.out_strides.row + first_group * Vec;
  const int columns = min(groups * Vec, p.head_dim_v - first_group * Vec);
  bool bad = false;
  for (int d = tid; d < columns; d += kCombineThreads) {
    float value = 0.f;
    for (int k = 0; k < subsets; ++k) value += sum_s[k * groups * Vec + d];
    value *= inv_sum;
    out[d] = from_float<T>(value);
    bad |= non_finite(value);
  }
  if (tid == 0 && blockIdx.y == 0 && p.lse != nullptr)
    p.lse[batch * p.lse_strides.batch + head * p.lse_strides.head + i * p.lse_strides.row] =
        decode_kernel::row_lse({top, base, sum});
  // The NaN/Inf policy: a row with a non-finite value is recomputed
  // (cuda/common/exact_row.cuh). Thread t stored column t alone, so each
  // warp recomputes its own 32 columns, with no block barrier. A non-finite
  // lse comes with non-finite values in every column (the max or the sum
  // is not finite), so warp 0 of the first block, which holds column 0,
  // rewrites it.
  static_assert(kCombineColumns <= kCombineThreads, "one column a thread");
  if (__any_sync(0xffffffffu, bad))
    decode_kernel::decode_exact_row<T>(p, batch, int(sequence_len_k(p.kv, batch)), head, i,
                                       first_group * Vec + 32 * warp, min(32, columns - 32 * warp),
                                       blockIdx.y == 0 && warp == 0);
}

template <typename T, int Vec>
void launch_combine_vec(const DecodeParams& p, cudaStream_t stream) {
  const auto kernel = decode_combine_kernel<T, Vec>;
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.len_q;
  const int parts = (p.head_dim_v + kCombineColumns - 1) / kCombineColumns;
  // Scheduled while the split kernel finishes (it allows the launch at its
  // start); waits in griddepcontrol.wait for the partials.
  launch_programmatic(kernel, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(parts)),
                      kCombineThreads, 0, stream, "decode_combine_kernel", p);
}

}  // namespace

template <typename T>
void launch_decode_combine(const DecodeParams& p, cudaStream_t stream) {
  if (decode_kernel::partial_float4(p))
    launch_combine_vec<T, 4>(p, stream);
  else
    launch_combine_vec<T, 1>(p, stream);
}

template void launch_decode_combine<float>(const DecodeParams&, cudaStream_t);
template void launch_decode_combine<__half>(const DecodeParams&, cudaStream_t);
template void launch_decode_combine<__nv_bfloat16>(const DecodeParams&, cudaStream_t);

}  // namespace fsdpa::detail::cuda
