// The combine kernel: merges the key splits' unnormalized partial outputs
// with their (max, sum) pairs into out and lse, adding the sink to the
// denominator. A row's columns split into parts of up to 256 (Dv = 512 takes
// two parts a row, blockIdx.y). A block of 256 threads takes one row part,
// or where the row parts outnumber a wave of blocks, 2, 4 or 8 consecutive
// rows' parts (combine_rows_log2). A row part's threads split into column
// groups (float4 where Dv and the workspace allow) times split subsets; each
// thread loads its splits' partial columns and (max, sum) pairs at once, the
// row's threads find its max (a max reduction only), and each thread weights
// its own splits; a shared-memory sum over the subsets gives the row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/device.h"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_launch.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cuda {

namespace {

// 256 threads: a row part of up to 256 columns as 64 float4 groups x 4
// split subsets (Dv <= 128: 32 groups x 8 subsets). With 256 columns a
// part, MLA's combine at one sequence (128 rows x 512 columns) is 256
// blocks, one wave (with 128 columns: 512 blocks in two waves, 0.5 us
// slower a call; bench/NOTES.md, session 8); 64 splits take two batches of
// loads.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;
constexpr int kCombineColumns = 256;  // per row part
// Three blocks per SM allow 80 registers, which the float4 batch below
// takes without a spill (at the default target, 64, it spilled 8 bytes;
// at two blocks the kernels that hold several rows took 84-90, and so
// two blocks a SM).
constexpr int kCombineMinBlocks = 3;
// Loads a lane issues before its FMAs: one batch covers subsets x 8 splits
// (64 at Dv <= 128, 32 with 256 float4 columns).
constexpr int kCombineBatch = 8;
// Per-subset column sums: subsets x groups <= threads, Vec floats a group.
constexpr int kCombineSumFloats = kCombineThreads * 4;
static_assert(kCombineSumFloats >= kCombineColumns);
// A block holds 1 << kRowsLog2 rows' parts, at most 8: a part's threads are
// then at least a warp.
constexpr int kCombineMaxRowsLog2 = 3;

// Column groups of Vec floats in a row part.
template <int Vec>
constexpr int kGroupsPerPart = kCombineColumns / Vec;

// log2 of the rows a block holds. One, while the row parts fit one wave of
// blocks (the resident blocks of `multiprocessors` SMs at
// kCombineMinBlocks): a row then has the most threads. Past that (many
// sequences, or many query rows), as many as leave a row's threads one
// batch of loads each for a typical row's splits (a list's sequence of the
// batch's mean length takes split_slots; else num_splits): MLA at 64
// sequences of two splits ran 2048 blocks of one row part in several waves,
// half of each block's threads with nothing to load.
template <int Vec>
int combine_rows_log2(const DecodeParams& p, int multiprocessors) {
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.len_q;
  const int64_t parts = (p.head_dim_v + kCombineColumns - 1) / kCombineColumns;
  if (rows * parts <= int64_t(multiprocessors) * kCombineMinBlocks) return 0;
  const int groups = std::min(kGroupsPerPart<Vec>, (p.head_dim_v + Vec - 1) / Vec);
  const int splits = p.split_slots > 0 ? p.split_slots : p.num_splits;
  const int wanted = groups * ((splits + kCombineBatch - 1) / kCombineBatch);
  const int row_threads = std::clamp(static_cast<int>(std::bit_ceil(static_cast<unsigned>(wanted))),
                                     kCombineThreads >> kCombineMaxRowsLog2, kCombineThreads);
  return std::countr_zero(static_cast<unsigned>(kCombineThreads / row_threads));
}

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

// Vec: floats per column group (4: Dv % 4 == 0 and a 16-byte aligned
// workspace; else 1). kRowsLog2: the block holds 1 << kRowsLog2 consecutive
// rows' parts (combine_rows_log2), each of kRowThreads consecutive threads.
template <typename T, int Vec, int kRowsLog2>
__global__ void __launch_bounds__(kCombineThreads, kCombineMinBlocks)
    decode_combine_kernel(const DecodeParams p) {
  constexpr int kRowThreads = kCombineThreads >> kRowsLog2;
  static_assert(kRowsLog2 >= 0 && kRowsLog2 <= kCombineMaxRowsLog2);
  __shared__ float warp_max_s[kCombineWarps];
  __shared__ float subset_sum_s[kCombineThreads];  // per split subset: its sum of weighted sums
  __shared__ __align__(16) float sum_s[kCombineSumFloats];
  allow_next_launch();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // The block's row of this thread (a constant 0 where the block holds one:
  // the compiler does not know that tid < 256).
  const int row_of_block = kRowsLog2 == 0 ? 0 : static_cast<int>(threadIdx.x / kRowThreads);
  const int row_base = row_of_block * kRowThreads;  // the row part's first thread
  const int in_row = tid - row_base;                // this thread's place in its row part
  const int rows_total = p.batch * p.heads_q * p.len_q;
  const int64_t block_row = (int64_t(blockIdx.x) << kRowsLog2) + row_of_block;
  // The last block's rows may pass the end (whole warps: a part is whole warps).
  const bool real_row = kRowsLog2 == 0 || block_row < rows_total;
  const int64_t row = real_row ? block_row : rows_total - 1;
  const int i = int(row % p.len_q);
  const int head = int((row / p.len_q) % p.heads_q);
  const int batch = int(row / (int64_t(p.len_q) * p.heads_q));
  const float2* stats = reinterpret_cast<const float2*>(p.partial_max_sum) + row;

  // This part's column groups [first_group, + groups) and this thread's
  // group and split subset: splits j, j + subsets, ...
  const int first_group = static_cast<int>(blockIdx.y) * kGroupsPerPart<Vec>;
  const int groups = min(kGroupsPerPart<Vec>, (p.head_dim_v + Vec - 1) / Vec - first_group);
  const int subsets = kRowThreads / groups;
  const int g = in_row % groups, j = in_row / groups;
  const bool has_unit = real_row && j < subsets;
  const int64_t split_stride = int64_t(rows_total) * p.dv_ws;
  const float* partial = p.partial_out + row * p.dv_ws + (first_group + g) * Vec;
  float v[kCombineBatch][Vec];
  float2 ms[kCombineBatch];
  // The row's splits, from the lengths read before the wait: they are final
  // once this kernel runs, since every split kernel lets it launch only
  // after its own wait for the kernel before (decode_block), which may write
  // them. Past L1 (IndexRead::BeforeWait), as every read before a wait.
  const int splits =
      decode_kernel::sequence_splits(p, int(sequence_len_k<IndexRead::BeforeWait>(p.kv, batch)),
                                     decode_kernel::batch_split_keys(p, /*before_wait=*/true));
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
  load_batch(j);               // partials and their (max, sum) in flight together

  // ---- the row's max: this thread's splits, then the row's warps (max
  // only: the sums are weighted once, below, instead of merged pairwise on
  // the way)
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
  for (int w = 0; w < kRowThreads / 32; ++w)
    top = fmaxf(top, warp_max_s[row_of_block * (kRowThreads / 32) + w]);
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
    for (int e = 0; e < Vec; ++e) sum_s[tid * Vec + e] = acc[e];  // tid = row_base + j groups + g
    if (g == 0) subset_sum_s[row_base + j] = weight_sum;
  }
  __syncthreads();
  if (!real_row) return;

  float sum = exp2f(sink - base);
  for (int k = 0; k < subsets; ++k) sum += subset_sum_s[row_base + k];
  const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
  T* out = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
           i * p.out_strides.row + first_group * Vec;
  const int columns = min(groups * Vec, p.head_dim_v - first_group * Vec);
  const float* sums = sum_s + row_base * Vec;  // subset k's column d: sums[k groups Vec + d]
  bool bad = false;
  for (int d = in_row; d < columns; d += kRowThreads) {
    float value = 0.f;
    for (int k = 0; k < subsets; ++k) value += sums[k * groups * Vec + d];
    value *= inv_sum;
    out[d] = from_float<T>(value);
    bad |= non_finite(value);
  }
  if (in_row == 0 && blockIdx.y == 0 && p.lse != nullptr)
    p.lse[batch * p.lse_strides.batch + head * p.lse_strides.head + i * p.lse_strides.row] =
        decode_kernel::row_lse({top, base, sum});
  // The NaN/Inf policy: a row with a non-finite value is recomputed
  // (cuda/common/exact_row.cuh). Each warp stored runs of 32 consecutive
  // columns, kRowThreads apart (one run where the part has no more columns
  // than the row has threads), and recomputes those, with no block barrier.
  // A non-finite lse comes with non-finite values in every column (the max
  // or the sum is not finite), so the warp that holds column 0 of the first
  // part rewrites it.
  if (__any_sync(0xffffffffu, bad)) {
    const int len_k = int(sequence_len_k(p.kv, batch));
    for (int d0 = in_row - lane; d0 < columns; d0 += kRowThreads)
      decode_kernel::decode_exact_row<T>(p, batch, len_k, head, i, first_group * Vec + d0,
                                         min(32, columns - d0), blockIdx.y == 0 && d0 == 0);
  }
}

template <typename T, int Vec, int kRowsLog2>
void launch_combine_rows(const DecodeParams& p, cudaStream_t stream) {
  const auto kernel = decode_combine_kernel<T, Vec, kRowsLog2>;
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.len_q;
  const int64_t blocks = (rows + (int64_t{1} << kRowsLog2) - 1) >> kRowsLog2;
  const int parts = (p.head_dim_v + kCombineColumns - 1) / kCombineColumns;
  // Scheduled while the split kernel finishes (it allows the launch at its
  // start); waits in griddepcontrol.wait for the partials.
  launch_programmatic(kernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(parts)),
                      kCombineThreads, 0, stream, "decode_combine_kernel", p);
}

template <typename T, int Vec>
void launch_combine_vec(const DecodeParams& p, cudaStream_t stream) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const int rows_log2 = combine_rows_log2<Vec>(p, device_info(device).multiprocessors);
  switch (rows_log2) {
    case 0:
      return launch_combine_rows<T, Vec, 0>(p, stream);
    case 1:
      return launch_combine_rows<T, Vec, 1>(p, stream);
    case 2:
      return launch_combine_rows<T, Vec, 2>(p, stream);
    case 3:
      return launch_combine_rows<T, Vec, 3>(p, stream);
    default:
      throw Error("fsdpa: internal: no combine kernel holds " + std::to_string(1 << rows_log2) +
                  " rows a block");
  }
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
