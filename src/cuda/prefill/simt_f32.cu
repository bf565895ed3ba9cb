// f32 fused prefill on CUDA cores. Block = kRows query rows x kLanes lanes
// per row (simt_f32_lanes: 4, or 8 where the block holds its SM alone); K/V
// tiles of kKeys keys in shared memory; each lane owns kKeys / kLanes keys of
// a score tile and every kLanes-th float4 of the output columns, and reads
// Q, K and V from shared memory by float4. K and V arrive by cp.async, each
// tile's K while the block computes the previous tile's P V and its V while
// it computes S (a copy through registers, float by float, left one warp a
// scheduler waiting out every load: bench/NOTES.md, session 42). Exact f32 arithmetic:
// this is the path the contract asks for when TF32 is not allowed. The tile
// is the largest of kSimtF32Tiles whose Q, K, V and P fit the device's
// shared memory a block (simt_f32_tile).
#include <cuda_runtime.h>

#include <array>
#include <string>
#include <utility>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/device.h"
#include "cuda/common/exact_row.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/simt_f32.h"

namespace fsdpa::detail::cuda {

namespace {

// One block an SM in the launch bounds: with 4 lanes a row, left to itself
// ptxas capped some tiles at 128 registers and spilled on sm_80 (16-32
// bytes); with 8 lanes the tiles take 124-157 registers, and asking two
// blocks an SM caps the 32 x 32 tile at 128 and spills 8 bytes on sm_90a.
constexpr int kSimtF32MinBlocks = 1;

// Rows [0, rows) of `src` (row stride `stride`) into `dst`, `padded` floats a
// row (a multiple of 4): the first `width` of a row below `valid_rows`, zeros
// elsewhere, by cp.async in 16-byte chunks (4-byte pieces where the rows are
// not 16-byte aligned: `copy_bytes`, the rows' alignment). Issued only: the
// caller commits and waits. The block's threads take the chunks in order,
// stepping (row, chunk) without a division per chunk.
template <int kThreads>
__device__ __forceinline__ void fill_rows(float* dst, const float* src, int64_t stride, int rows,
                                          int valid_rows, int width, int padded, int copy_bytes) {
  const int chunks = padded / 4;
  const int tid = static_cast<int>(threadIdx.x);
  int r = tid / chunks, c = tid % chunks;
  for (int i = tid; i < rows * chunks; i += kThreads) {
    const int valid = r < valid_rows ? min(max(width - 4 * c, 0), 4) : 0;
    const float* from = valid > 0 ? src + r * stride + 4 * c : src;
    const uint32_t to = shared_address(dst + r * padded + 4 * c);
    // 16-byte rows: every chunk starts 16-byte aligned (a V slice starts on
    // a whole float4, simt_f32_v_slice_width); the last one of a row or a
    // slice may hold fewer than 4 valid floats.
    if (copy_bytes >= 16)
      cp_async_16_zfill(to, from, 4 * valid);
    else
      cp_async_pieces<4>(to, reinterpret_cast<const char*>(from), 4 * valid);
    c += kThreads;
    while (c >= chunks) c -= chunks, ++r;
  }
}

template <int kRows, int kKeys, int kLanesPerRow>
__global__ void __launch_bounds__((kRows * kLanesPerRow), kSimtF32MinBlocks)
    simt_f32_kernel(const PrefillParams p) {
  constexpr int kThreads = kRows * kLanesPerRow;
  constexpr int kColumnsPerLane = kLargestVSlice / kLanesPerRow;
  constexpr int kKeysPerLane = kKeys / kLanesPerRow;
  static_assert(kThreads % 32 == 0 && kKeys % kLanesPerRow == 0, "lanes of a row");
  extern __shared__ __align__(16) float shared[];
  // This block's column slice of Dv (PrefillParams::v_slice_shift).
  const int column0 =
      (static_cast<int>(blockIdx.x) & ((1 << p.v_slice_shift) - 1)) * p.v_slice_width;
  const int dqk = p.head_dim_qk, dv = min(p.v_slice_width, p.head_dim_v - column0);
  // Rows of Q and K, and of V, zero-padded to whole float4s (simt_f32.h).
  const int row_qk = simt_f32_qk_stride(dqk), row_v = simt_f32_v_stride(p.v_slice_width);
  const int chunks_qk = (dqk + 3) / 4, chunks_v = (dv + 3) / 4;
  float* shared_q = shared;
  float* shared_k = shared_q + kRows * row_qk;
  float* shared_v = shared_k + kKeys * row_qk;
  float* shared_p = shared_v + kKeys * row_v;

  const int tid = static_cast<int>(threadIdx.x);
  const int local_row = tid / kLanesPerRow;
  const int lane_in_row = tid % kLanesPerRow;
  const int q_block = static_cast<int>((gridDim.x - 1 - blockIdx.x) >> p.v_slice_shift);
  const int head = static_cast<int>(blockIdx.y);
  const int batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / p.kv_group_size;
  const MaskSemantics& sem = p.semantics;
  const int len_q = static_cast<int>(sem.len_q), len_k = static_cast<int>(sem.len_k);
  const int q0 = q_block * kRows;
  const int row = q0 + local_row;

  const float* q_base =
      static_cast<const float*>(p.q) + batch * p.q_strides.batch + head * p.q_strides.head;
  const float* k_base =
      static_cast<const float*>(p.k) + batch * p.k_strides.outer + kv_head * p.k_strides.head;
  const float* v_base = static_cast<const float*>(p.v) + batch * p.v_strides.outer +
                        kv_head * p.v_strides.head + column0;

  const DeviceKeyRange first_range = visible_key_range(sem, q0);
  const DeviceKeyRange last_range = visible_key_range(sem, min(q0 + kRows, len_q) - 1);
  const DeviceKeyRange range = visible_key_range(sem, row);
  const int tile_begin = first_range.begin / kKeys * kKeys;
  const int kv_end = last_range.end > first_range.begin ? last_range.end : tile_begin;
  const bool masked_row = sem.mask_kind != 0 && row < len_q;
  const int64_t mask_row = mask_row_offset(sem, batch, head, row);

  // This lane's columns of O: float4 `c` of the slice is columns
  // 4 * (lane_in_row + kLanesPerRow * c) .. + 3.
  float o[kColumnsPerLane];
#pragma unroll
  for (int w = 0; w < kColumnsPerLane; ++w) o[w] = 0.0f;
  float row_max = kMinusInf, row_sum = 0.0f;
  const float cap = p.softcap_log2, inverse_cap = p.inverse_softcap_log2;

  // K and V of a tile each in a buffer of their own, so that each loads
  // while the other is read: K of tile t + 1 during P V of tile t, V of
  // tile t + 1 during S of tile t + 1. One commit group each, in the order
  // Q + K0, V0, K1, V1, ...: waiting until one group is in flight leaves
  // the older one landed.
  auto load_k = [&](int k0) {
    fill_rows<kThreads>(shared_k, k_base + static_cast<int64_t>(k0) * p.k_strides.row,
                        p.k_strides.row, kKeys, len_k - k0, dqk, row_qk, p.copy_bytes);
  };
  auto load_v = [&](int k0) {
    fill_rows<kThreads>(shared_v, v_base + static_cast<int64_t>(k0) * p.v_strides.row,
                        p.v_strides.row, kKeys, len_k - k0, dv, row_v, p.copy_bytes);
  };
  fill_rows<kThreads>(shared_q, q_base + static_cast<int64_t>(q0) * p.q_strides.row,
                      p.q_strides.row, kRows, len_q - q0, dqk, row_qk, p.copy_bytes);
  if (tile_begin < kv_end) load_k(tile_begin);
  cp_async_commit();
  if (tile_begin < kv_end) load_v(tile_begin);
  cp_async_commit();

  for (int k0 = tile_begin; k0 < kv_end; k0 += kKeys) {
    const bool more = k0 + kKeys < kv_end;
    cp_async_wait<1>();  // this tile's K (and Q); its V may still be in flight
    __syncthreads();

    // S: each Q float4 read once for the lane's keys (one shared load per
    // four FMAs of a key, not two per FMA); each dot in column order, as a
    // plain loop would sum it.
    float dot[kKeysPerLane];
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) dot[u] = 0.0f;
    const float4* q_row = reinterpret_cast<const float4*>(shared_q + local_row * row_qk);
    for (int c = 0; c < chunks_qk; ++c) {
      const float4 q4 = q_row[c];
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        const float4 k4 = reinterpret_cast<const float4*>(
            shared_k + (lane_in_row + kLanesPerRow * u) * row_qk)[c];
        dot[u] = fmaf(q4.x, k4.x, dot[u]);
        dot[u] = fmaf(q4.y, k4.y, dot[u]);
        dot[u] = fmaf(q4.z, k4.z, dot[u]);
        dot[u] = fmaf(q4.w, k4.w, dot[u]);
      }
    }
    float s[kKeysPerLane];
    float tile_max = kMinusInf;
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const int key = k0 + lane_in_row + kLanesPerRow * u;
      float value = kMinusInf;
      if (key >= range.begin && key < range.end) {
        value = dot[u] * p.scale_log2;
        if (cap > 0.0f) value = soft_cap(value, cap, inverse_cap);
        if (masked_row) value += mask_term_log2(sem, mask_row, key);
      }
      s[u] = value;
      tile_max = fmaxf(tile_max, value);
    }
    tile_max = lane_group_max<kLanesPerRow>(tile_max);
    const float new_max = fmaxf(row_max, tile_max);
    const float base = new_max == kMinusInf ? 0.0f : new_max;
    const float correction = exp2f(row_max - base);
    row_max = new_max;
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const float pj = exp2f(s[u] - base);
      sum += pj;
      shared_p[local_row * (kKeys + 1) + lane_in_row + kLanesPerRow * u] = pj;
    }
    row_sum = row_sum * correction + sum;
    __syncthreads();  // every warp is done with K: the next tile's comes in during P V
    if (more) load_k(k0 + kKeys);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's V; the next K may still be in flight
    __syncthreads();     // ... for every thread (and each row's P for its lanes)

    // O += P V: each P value read once for the lane's columns, V by float4.
#pragma unroll
    for (int w = 0; w < kColumnsPerLane; ++w) o[w] *= correction;
    for (int j = 0; j < kKeys; ++j) {
      const float pj = shared_p[local_row * (kKeys + 1) + j];
      const float4* v_row = reinterpret_cast<const float4*>(shared_v + j * row_v);
#pragma unroll
      for (int c = 0; c < kColumnsPerLane / 4; ++c) {
        const int chunk = lane_in_row + kLanesPerRow * c;
        if (chunk >= chunks_v) break;
        const float4 v4 = v_row[chunk];
        o[4 * c] = fmaf(pj, v4.x, o[4 * c]);
        o[4 * c + 1] = fmaf(pj, v4.y, o[4 * c + 1]);
        o[4 * c + 2] = fmaf(pj, v4.z, o[4 * c + 2]);
        o[4 * c + 3] = fmaf(pj, v4.w, o[4 * c + 3]);
      }
    }
    __syncthreads();  // every warp is done with V and P
    if (more) load_v(k0 + kKeys);
    cp_async_commit();
  }
  cp_async_wait<0>();

  const float sink = sink_log2(sem.sinks, sem.sink_stride, head);
  const float total_max = fmaxf(row_max, sink);
  float sum = lane_group_sum<kLanesPerRow>(row_sum);
  float inverse = 0.0f, lse = kMinusInf;
  if (total_max != kMinusInf) {
    const float correction = exp2f(row_max - total_max);
    sum = sum * correction + exp2f(sink - total_max);
    inverse = correction / sum;
    lse = (total_max + log2f(sum)) * kLn2;
  }
  // A row with a non-finite value is recomputed by exact_row (the NaN/Inf
  // policy, cuda/common/exact_row.cuh) by its warp: no lane leaves before.
  float* out_row = static_cast<float*>(p.out) + batch * p.out_strides.batch +
                   head * p.out_strides.head + static_cast<int64_t>(row) * p.out_strides.row +
                   column0;
  float* lse_at = p.lse != nullptr && column0 == 0
                      ? p.lse + batch * p.lse_strides.batch + head * p.lse_strides.head +
                            row * p.lse_strides.row
                      : nullptr;
  bool bad = false;
  if (row < len_q) {
#pragma unroll
    for (int w = 0; w < kColumnsPerLane; ++w) {
      const int col = 4 * (lane_in_row + kLanesPerRow * (w / 4)) + w % 4;
      if (col >= dv) continue;
      const float value = o[w] * inverse;
      out_row[col] = value;
      bad |= non_finite(value);
    }
    if (lse_at != nullptr && lane_in_row == 0) *lse_at = lse;
  }
  repair_rows(bad, row, kLanesPerRow, [&](int bad_row) {
    const int64_t rows_from_here = bad_row - row;
    exact_row<float, kLargestVSlice>(
        DenseRowOperands<float>{q_base + static_cast<int64_t>(bad_row) * p.q_strides.row, k_base,
                                v_base, 1, p.k_strides.row, 1, p.v_strides.row, 1},
        sem, batch, head, bad_row, dqk, p.scale_log2, out_row + rows_from_here * p.out_strides.row,
        dv, lse_at != nullptr ? lse_at + rows_from_here * p.lse_strides.row : nullptr);
  });
}

template <int kRows, int kKeys, int kLanes>
void launch_simt_f32(const PrefillParams& params, cudaStream_t stream) {
  constexpr int kThreads = kRows * kLanes;
  const size_t bytes =
      simt_f32_shared_bytes({kRows, kKeys}, params.head_dim_qk, params.v_slice_width);
  const void* kernel = reinterpret_cast<const void*>(&simt_f32_kernel<kRows, kKeys, kLanes>);
  prepare_launch(kernel, kThreads, bytes, "cuda_fused_prefill_f32");
  const int64_t q_blocks = (params.semantics.len_q + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(q_blocks << params.v_slice_shift),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  simt_f32_kernel<kRows, kKeys, kLanes><<<grid, kThreads, bytes, stream>>>(params);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

// One launch per entry of kSimtF32Tiles, in its order, with 4 lanes a row
// and with 8.
using SimtF32Launch = void (*)(const PrefillParams&, cudaStream_t);
template <size_t... I>
constexpr std::array<std::array<SimtF32Launch, 2>, sizeof...(I)> simt_f32_launches(
    std::index_sequence<I...>) {
  return {{{launch_simt_f32<kSimtF32Tiles[I].rows, kSimtF32Tiles[I].keys, 4>,
            launch_simt_f32<kSimtF32Tiles[I].rows, kSimtF32Tiles[I].keys, 8>}...}};
}
constexpr auto kSimtF32Launches =
    simt_f32_launches(std::make_index_sequence<std::size(kSimtF32Tiles)>{});

// The shared memory a block may take where the problem is planned (sm_90's
// without a device).
size_t planning_shared_bytes(const Problem& problem) {
  const DeviceInfo* device = planning_device(problem.device.index);
  return device != nullptr ? block_shared_memory(*device) : size_t{kSm90SharedBytes};
}

}  // namespace

int simt_f32_tile(int64_t head_dim_qk, int64_t head_dim_v, size_t shared_bytes_per_block) {
  for (int t = 0; t < static_cast<int>(std::size(kSimtF32Tiles)); ++t)
    if (simt_f32_shared_bytes(kSimtF32Tiles[t], head_dim_qk, simt_f32_v_slice_width(head_dim_v)) <=
        shared_bytes_per_block)
      return t;
  return -1;
}

Verdict simt_f32_supports(const Problem& problem, const Options&) {
  if (const DeviceInfo* device = planning_device(problem.device.index)) {
    // Where no tile fits, the smallest one's bytes name what is missing.
    const SimtF32Tile smallest = kSimtF32Tiles[std::size(kSimtF32Tiles) - 1];
    return fits_shared_memory(
        "f32 prefill with head_dim_qk=" + std::to_string(problem.head_dim_qk) +
            ", head_dim_v=" + std::to_string(problem.head_dim_v),
        simt_f32_shared_bytes(smallest, problem.head_dim_qk,
                              simt_f32_v_slice_width(problem.head_dim_v)),
        block_shared_memory(*device), problem);
  }
  return Verdict::yes();
}

void simt_f32_configure(const Problem& problem, Plan& plan) {
  const int tile =
      simt_f32_tile(problem.head_dim_qk, problem.head_dim_v, planning_shared_bytes(problem));
  if (tile < 0) throw Error("fsdpa: internal: simt_f32_configure without a tile that fits");
  // Runtime head dims: no compiled bucket, no padding.
  plan.head_dim_qk_bucket = 0;
  plan.head_dim_v_bucket = 0;
  plan.pad_ratio = 1.0;
  plan.tile_q = kSimtF32Tiles[tile].rows;
  plan.tile_k = kSimtF32Tiles[tile].keys;
  const size_t bytes = simt_f32_shared_bytes(kSimtF32Tiles[tile], problem.head_dim_qk,
                                             simt_f32_v_slice_width(problem.head_dim_v));
  const int lanes = simt_f32_lanes(bytes, planning_shared_bytes(problem));
  plan.instance = reinterpret_cast<void (*)()>(kSimtF32Launches[tile][lanes == 8 ? 1 : 0]);
}

void simt_f32_launch(const Plan& plan, const PrefillParams& params, cudaStream_t stream) {
  const auto launch = reinterpret_cast<SimtF32Launch>(plan.instance);
  if (launch == nullptr) throw Error("fsdpa: internal: an f32 prefill plan without its launch");
  launch(params, stream);
}

}  // namespace fsdpa::detail::cuda
