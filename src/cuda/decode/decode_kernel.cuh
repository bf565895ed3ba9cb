// The split-K decode kernel (flash-decoding) on CUDA cores, for f32 (f16 and
// bf16 run on tensor cores: decode_mma_kernel.cuh; decode_bucket_fns below
// picks the kernel by dtype).
//
// One block serves one (batch, kv head, key split, chunk of packed query
// rows): all query heads of the kv group and all query positions share the
// block, so each K/V byte of the split is read from device memory once per
// row chunk (once in total when the group fits one chunk). Each warp is an
// independent key stream with its own cp.async double buffer and its own
// online softmax; the warps merge in shared memory at the end, and either
// write the final output (one split) or an unnormalized partial with its
// (max, sum) for the combine kernel. Scores live in the exp2 domain: q is
// pre-scaled by scale * log2(e).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_launch.h"
#include "cuda/decode/decode_mma_kernel.cuh"

namespace fsdpa::detail::cuda {

namespace decode_kernel {

// 16 bytes of T widened to float (the kernel serves f32 only).
template <typename T>
__device__ __forceinline__ void unpack16(const uint4& raw, float* f);
template <>
__device__ __forceinline__ void unpack16<float>(const uint4& raw, float* f) {
  f[0] = __uint_as_float(raw.x);
  f[1] = __uint_as_float(raw.y);
  f[2] = __uint_as_float(raw.z);
  f[3] = __uint_as_float(raw.w);
}

// ------------------------------------------------------------ the split kernel

// ROWS: the packed query rows this instance computes (decode_kernel_rows);
// at most the bucket's config.rows, whose shared-memory layout every ROWS uses.
template <typename T, int DQK, int DV, int ROWS>
struct Tile {
  static constexpr DecodeTileConfig config = decode_tile_config(sizeof(T), DQK, DV);
  static constexpr int kVec = decode_vector_elems(sizeof(T));
  static constexpr int kKeys = config.keys_per_warp;
  static constexpr int kRows = ROWS;
  static constexpr int kWarps = config.warps;
  static constexpr int kStages = config.stages;
  static constexpr int kThreads = kWarps * 32;
  // Two resident blocks (8 warps) per SM at most 255 registers: without it
  // ptxas aimed at three blocks (168 registers) and spilled in the 320 bucket.
  static constexpr int kMinBlocks = 2;
  static constexpr int kChunksQk = DQK / kVec;  // 16-byte chunks of a K row
  static constexpr int kChunksV = DV / kVec;
  // Q.K: lane = part * kKeys + key; the parts split a key's chunks.
  static constexpr int kQkParts = 32 / kKeys;
  static constexpr int kQkSteps = (kChunksQk + kQkParts - 1) / kQkParts;
  // P.V: lane = key_group * kValueLanes + chunk; key groups split the keys.
  static constexpr int kValueLanes = decode_value_lanes(sizeof(T), DV);
  static constexpr int kKeyGroups = 32 / kValueLanes;
  static constexpr int kKeysPerGroup = kKeys / kKeyGroups;
  static constexpr int kValueSteps = decode_value_chunks_per_lane(sizeof(T), DV);
  static constexpr int kRowK = decode_row_elems(sizeof(T), DQK);
  static constexpr int kRowV = decode_row_elems(sizeof(T), DV);

  static_assert(sizeof(T) == 4, "f32 only: 16-bit types run decode_mma_kernel");
  static_assert(DQK % 16 == 0 && DV % 16 == 0, "buckets are multiples of 16");
  static_assert(32 % kKeys == 0 && kKeyGroups <= kKeys && kKeys % kKeyGroups == 0);
  static_assert(kRows >= 1 && kRows <= config.rows && kStages >= 2);
};

template <typename T, int DQK, int DV, int ROWS>
__global__ void __launch_bounds__(Tile<T, DQK, DV, ROWS>::kThreads,
                                  Tile<T, DQK, DV, ROWS>::kMinBlocks)
    decode_split_kernel(const DecodeParams p) {
  using C = Tile<T, DQK, DV, ROWS>;
  constexpr int kVec = C::kVec, kKeys = C::kKeys, kRows = C::kRows, kWarps = C::kWarps,
                kStages = C::kStages;
  constexpr DecodeSmemLayout kLayoutFull = decode_smem_layout(sizeof(T), DQK, DV, false);

  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem);  // [rows][DQK], pre-scaled, zero past Dqk
  float* probs_s = reinterpret_cast<float*>(smem + kLayoutFull.q);  // [warps][rows][keys]
  int2* range_s = reinterpret_cast<int2*>(smem + kLayoutFull.q + kLayoutFull.probs);
  int64_t* mask_row_s = reinterpret_cast<int64_t*>(range_s + kRows);
  float2* stats_s =
      reinterpret_cast<float2*>(smem + kLayoutFull.q + kLayoutFull.probs + kLayoutFull.row_info);
  T* stage_s = reinterpret_cast<T*>(smem + kLayoutFull.q + kLayoutFull.probs +
                                    kLayoutFull.row_info + kLayoutFull.warp_stats);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const DecodeBlock blk = decode_block(p, kRows);
  allow_next_launch();
  if (!blk.valid) return;  // nothing to do (decode_block)
  const int batch = blk.batch, kv_head = blk.kv_head, rows_here = blk.rows_here;
  wait_for_previous_kernel();  // global memory from here on

  // ---- q rows, key ranges, mask row offsets
  for (int idx = tid; idx < kRows * DQK; idx += C::kThreads) {
    const int r = idx / DQK, d = idx % DQK;
    float x = 0.f;
    if (r < rows_here && d < p.head_dim_qk) {
      const int2 hi = packed_row(p, blk, r);
      const T* q = static_cast<const T*>(p.q) + batch * p.q_strides.batch +
                   hi.x * p.q_strides.head + hi.y * p.q_strides.row;
      x = to_float(q[d]) * p.scale_log2;
    }
    q_s[idx] = x;
  }
  load_row_info<kRows>(p, blk, range_s, mask_row_s);
  __syncthreads();

  // ---- this block's keys: the split, narrowed to what its rows can see
  const BlockKeys keys = block_keys(p, blk);
  const int key_begin = keys.begin, key_end = keys.end;
  const int num_tiles = key_end > key_begin ? (key_end - key_begin + kKeys - 1) / kKeys : 0;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  const bool v_aliases_k = p.v_aliases_k != 0;
  const int stage_elems = kKeys * (C::kRowK + (v_aliases_k ? 0 : C::kRowV));
  T* warp_stages = stage_s + warp * kStages * stage_elems;
  const T* k_rows = static_cast<const T*>(p.k);
  const T* v_rows = static_cast<const T*>(p.v);
  const int chunks_qk = (p.head_dim_qk + kVec - 1) / kVec;  // chunks holding real columns
  const int chunks_v = (p.head_dim_v + kVec - 1) / kVec;

  auto load_tile = [&](int n) {
    if (n >= my_tiles) return;
    const int key0 = key_begin + (warp + n * kWarps) * kKeys;
    T* k_dst = warp_stages + (n % kStages) * stage_elems;
#pragma unroll
    for (int idx = lane; idx < kKeys * C::kChunksQk; idx += 32) {
      const int key = idx / C::kChunksQk, c = idx % C::kChunksQk;
      if (c >= chunks_qk) continue;
      const int j = key0 + key;
      const int bytes = j < key_end ? min(16, (p.head_dim_qk - c * kVec) * int(sizeof(T))) : 0;
      const T* src = bytes > 0
                         ? k_rows + key_row_offset(p.kv, p.k_strides, batch, kv_head, j) + c * kVec
                         : k_rows;
      copy_16(shared_address(k_dst + key * C::kRowK + c * kVec), src, bytes, p.copy_bytes);
    }
    if (v_aliases_k) return;
    T* v_dst = k_dst + kKeys * C::kRowK;
#pragma unroll
    for (int idx = lane; idx < kKeys * C::kChunksV; idx += 32) {
      const int key = idx / C::kChunksV, c = idx % C::kChunksV;
      if (c >= chunks_v) continue;
      const int j = key0 + key;
      const int bytes = j < key_end ? min(16, (p.head_dim_v - c * kVec) * int(sizeof(T))) : 0;
      const T* src = bytes > 0
                         ? v_rows + key_row_offset(p.kv, p.v_strides, batch, kv_head, j) + c * kVec
                         : v_rows;
      copy_16(shared_address(v_dst + key * C::kRowV + c * kVec), src, bytes, p.copy_bytes);
    }
  };

  // ---- per-warp online softmax state
  const int qk_key = lane % kKeys, qk_part = lane / kKeys;
  const int value_chunk = lane % C::kValueLanes, key_group = lane / C::kValueLanes;
  float row_max[kRows], row_sum[kRows];  // row_sum: this lane's key only, reduced at the end
  float acc[kRows][C::kValueSteps][kVec];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = kMinusInf;
    row_sum[r] = 0.f;
#pragma unroll
    for (int s = 0; s < C::kValueSteps; ++s)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[r][s][e] = 0.f;
  }
  float* probs = probs_s + warp * kRows * kKeys;
  const bool has_mask = p.semantics.mask_kind != 0;

#pragma unroll
  for (int n = 0; n < kStages - 1; ++n) {
    load_tile(n);
    cp_async_commit();
  }
  for (int n = 0; n < my_tiles; ++n) {
    load_tile(n + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const T* k_tile = warp_stages + (n % kStages) * stage_elems;
    const T* v_tile = v_aliases_k ? k_tile : k_tile + kKeys * C::kRowK;
    const int v_row = v_aliases_k ? C::kRowK : C::kRowV;
    const int key = key_begin + (warp + n * kWarps) * kKeys + qk_key;

    // Scores of this lane's key for every row: a slice of the dot product
    // per lane, then a sum over the lanes that share the key.
    float score[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) score[r] = 0.f;
#pragma unroll
    for (int step = 0; step < C::kQkSteps; ++step) {
      const int c = qk_part + step * C::kQkParts;
      if (c >= C::kChunksQk || c >= chunks_qk) continue;
      float kf[kVec];
      unpack16<T>(*reinterpret_cast<const uint4*>(k_tile + qk_key * C::kRowK + c * kVec), kf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4* qv = reinterpret_cast<const float4*>(q_s + r * DQK + c * kVec);
#pragma unroll
        for (int e = 0; e < kVec / 4; ++e) {
          const float4 x = qv[e];
          score[r] +=
              x.x * kf[4 * e] + x.y * kf[4 * e + 1] + x.z * kf[4 * e + 2] + x.w * kf[4 * e + 3];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int offset = kKeys; offset < 32; offset *= 2)
        score[r] += __shfl_xor_sync(0xffffffffu, score[r], offset);
      const int2 range = range_s[r];
      bool visible = key < key_end && key >= range.x && key < range.y;
      if (visible) score[r] = capped_score(p, score[r]);
      if (visible && has_mask) score[r] += mask_term(p, mask_row_s[r], key);
      if (!visible) score[r] = kMinusInf;
    }

    // Online softmax over the warp's tile.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float tile_max = score[r];
#pragma unroll
      for (int offset = 1; offset < kKeys; offset *= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      const float new_max = fmaxf(row_max[r], tile_max);
      const float base = new_max == kMinusInf ? 0.f : new_max;
      const float rescale = exp2f(row_max[r] - base);
      const float prob = exp2f(score[r] - base);
      row_sum[r] = row_sum[r] * rescale + prob;
      row_max[r] = new_max;
      if (qk_part == 0) probs[r * kKeys + qk_key] = prob;
      if (rescale != 1.f) {  // warp-uniform
#pragma unroll
        for (int s = 0; s < C::kValueSteps; ++s)
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[r][s][e] *= rescale;
      }
    }
    __syncwarp();

    // P.V: this lane's value chunks over its key group's keys.
#pragma unroll
    for (int u = 0; u < C::kKeysPerGroup; ++u) {
      const int k_in_tile = key_group * C::kKeysPerGroup + u;
      float prob[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) prob[r] = probs[r * kKeys + k_in_tile];
#pragma unroll
      for (int s = 0; s < C::kValueSteps; ++s) {
        const int c = value_chunk + s * C::kValueLanes;
        if (c >= C::kChunksV || c >= chunks_v) continue;
        float vf[kVec];
        unpack16<T>(*reinterpret_cast<const uint4*>(v_tile + k_in_tile * v_row + c * kVec), vf);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[r][s][e] += prob[r] * vf[e];
      }
    }
    __syncwarp();
  }
  cp_async_wait<0>();

  // ---- merge the lanes of each warp, then the warps of the block
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int offset = 1; offset < kKeys; offset *= 2)
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], offset);
#pragma unroll
    for (int s = 0; s < C::kValueSteps; ++s)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
#pragma unroll
        for (int offset = C::kValueLanes; offset < 32; offset *= 2)
          acc[r][s][e] += __shfl_xor_sync(0xffffffffu, acc[r][s][e], offset);
  }
  __syncthreads();  // every warp is done with the stage buffers: reuse them
  float* merge_s = reinterpret_cast<float*>(stage_s);  // [warps][rows][DV]
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r) stats_s[warp * kRows + r] = make_float2(row_max[r], row_sum[r]);
  if (key_group == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int s = 0; s < C::kValueSteps; ++s) {
        const int c = value_chunk + s * C::kValueLanes;
        if (c >= C::kChunksV) continue;
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          merge_s[(warp * kRows + r) * DV + c * kVec + e] = acc[r][s][e];
      }
  __syncthreads();

  store_block_rows<T, kWarps, kRows, DV>(p, blk, stats_s, merge_s);
}

// Calls f.template operator()<R>() with R = decode_kernel_rows(max, rows): the
// compiled row counts are 1, 2, 4 and the bucket's maximum.
template <typename T, int DQK, int DV, typename F>
decltype(auto) with_kernel_rows(int rows, F&& f) {
  constexpr int kMax = decode_tile_config(sizeof(T), DQK, DV).rows;
  const int kernel_rows = decode_kernel_rows(kMax, rows);
  if (kernel_rows == kMax) return f.template operator()<kMax>();
  if constexpr (kMax > 1)
    if (kernel_rows == 1) return f.template operator()<1>();
  if constexpr (kMax > 2)
    if (kernel_rows == 2) return f.template operator()<2>();
  if constexpr (kMax > 4)
    if (kernel_rows == 4) return f.template operator()<4>();
  check(cudaErrorInvalidValue, "decode_split_kernel: no instance for this row count");
  return f.template operator()<kMax>();  // not reached: check() raised
}

template <typename T, int DQK, int DV, int ROWS>
void launch_split_rows(const DecodeParams& p, cudaStream_t stream) {
  using C = Tile<T, DQK, DV, ROWS>;
  const auto kernel = decode_split_kernel<T, DQK, DV, ROWS>;
  const size_t smem = decode_smem_layout(sizeof(T), DQK, DV, p.v_aliases_k != 0).total;
  const int64_t blocks = decode_grid_blocks(p);
  launch_programmatic(kernel, static_cast<unsigned>(blocks), C::kThreads, smem, stream,
                      "decode_split_kernel", p);
  if (p.num_splits > 1) launch_decode_combine<T>(p, stream);
}

template <typename T, int DQK, int DV>
void launch_split(const DecodeParams& p, cudaStream_t stream) {
  with_kernel_rows<T, DQK, DV>(p.rows_per_kv_head,
                               [&]<int R>() { launch_split_rows<T, DQK, DV, R>(p, stream); });
}

template <typename T, int DQK, int DV, int ROWS>
int blocks_per_sm_rows(bool v_aliases_k) {
  using C = Tile<T, DQK, DV, ROWS>;
  const auto kernel = decode_split_kernel<T, DQK, DV, ROWS>;
  const size_t smem = decode_smem_layout(sizeof(T), DQK, DV, v_aliases_k).total;
  prepare_launch(reinterpret_cast<const void*>(kernel), C::kThreads, smem, "decode_split_kernel");
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, C::kThreads, smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

template <typename T, int DQK, int DV>
int blocks_per_sm(int rows_per_kv_head, bool v_aliases_k) {
  return with_kernel_rows<T, DQK, DV>(
      rows_per_kv_head, [&]<int R>() { return blocks_per_sm_rows<T, DQK, DV, R>(v_aliases_k); });
}

}  // namespace decode_kernel

template <typename T, int DQK, int DV, int kClass>
DecodeBucketFns decode_bucket_fns() {
  if constexpr (sizeof(T) == 2) {
    constexpr int kTiling = decode_mma_tiling_class(DQK, DV, kClass);
    return {decode_kernel::launch_mma_split<T, DQK, DV, kTiling>,
            decode_kernel::mma_blocks_per_sm<T, DQK, DV, kTiling>,
            decode_kernel::mma_binary_version<T, DQK, DV>};
  } else {
    return {decode_kernel::launch_split<T, DQK, DV>, decode_kernel::blocks_per_sm<T, DQK, DV>};
  }
}

}  // namespace fsdpa::detail::cuda
