// The split-K decode kernel (flash-decoding) on CUDA cores.
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
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_launch.h"

namespace fsdpa::detail::cuda {

namespace decode_kernel {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
__device__ __forceinline__ float minus_inf() { return __int_as_float(0xff800000u); }

// ------------------------------------------------------------ element access

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

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

// 16 bytes of T widened to float.
template <typename T>
__device__ __forceinline__ void unpack16(const uint4& raw, float* f);
template <>
__device__ __forceinline__ void unpack16<float>(const uint4& raw, float* f) {
  f[0] = __uint_as_float(raw.x);
  f[1] = __uint_as_float(raw.y);
  f[2] = __uint_as_float(raw.z);
  f[3] = __uint_as_float(raw.w);
}
template <>
__device__ __forceinline__ void unpack16<__nv_bfloat16>(const uint4& raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void unpack16<__half>(const uint4& raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &w[i], 4);
    const float2 x = __half22float2(h);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// ------------------------------------------------------------ async copies

// Copies src_bytes (0..16) of global memory to 16 bytes of shared memory,
// zero-filling the rest: the tails of head dims and keys past the split end.
__device__ __forceinline__ void copy16_async(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// ------------------------------------------------------------ semantics

// Keys [begin, end) visible to query position i (core/semantics.h's rule).
__device__ __forceinline__ int2 visible_keys(const DecodeParams& p, int i) {
  const int64_t diagonal = int64_t(i) + p.causal_offset;
  int64_t begin = 0, end = p.len_k;
  const int64_t len_k = p.len_k;
  if (p.causal) end = min(max(diagonal + 1, int64_t(0)), len_k);
  if (p.has_window) begin = min(max(diagonal - p.window_left, int64_t(0)), len_k);
  return make_int2(int(begin), int(end));
}

// The array mask's contribution to a score in the exp2 domain; -inf drops the key.
__device__ __forceinline__ float mask_term(const DecodeParams& p, int64_t row_offset, int key) {
  const int64_t at = row_offset + int64_t(key) * p.mask_strides.col;
  switch (p.mask_kind) {
    case DecodeMask::AddF32:
      return static_cast<const float*>(p.mask)[at] * kLog2e;
    case DecodeMask::AddF16:
      return __half2float(static_cast<const __half*>(p.mask)[at]) * kLog2e;
    case DecodeMask::AddBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p.mask)[at]) * kLog2e;
    case DecodeMask::Bool:
      return static_cast<const unsigned char*>(p.mask)[at] ? 0.f : minus_inf();
    case DecodeMask::None:
      break;
  }
  return 0.f;
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

  static_assert(DQK % 16 == 0 && DV % 16 == 0, "buckets are multiples of the 16-element mma step");
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
  int64_t block = blockIdx.x;
  const int chunk = int(block % p.row_chunks);
  block /= p.row_chunks;
  const int split = int(block % p.num_splits);
  block /= p.num_splits;
  const int kv_head = int(block % p.heads_kv);
  const int batch = int(block / p.heads_kv);
  const int row0 = chunk * kRows;
  const int rows_here = min(kRows, p.rows_per_kv_head - row0);

  // ---- q rows, key ranges, mask row offsets
  for (int idx = tid; idx < kRows * DQK; idx += C::kThreads) {
    const int r = idx / DQK, d = idx % DQK;
    float x = 0.f;
    if (r < rows_here && d < p.head_dim_qk) {
      const int packed = row0 + r;
      const int head = kv_head * p.kv_group_size + packed / p.len_q, i = packed % p.len_q;
      const T* q = static_cast<const T*>(p.q) + batch * p.q_strides.batch +
                   head * p.q_strides.head + i * p.q_strides.row;
      x = to_float(q[d]) * p.scale_log2;
    }
    q_s[idx] = x;
  }
  if (tid < kRows) {
    int2 range = make_int2(0, 0);
    int64_t mask_row = 0;
    if (tid < rows_here) {
      const int packed = row0 + tid;
      const int head = kv_head * p.kv_group_size + packed / p.len_q, i = packed % p.len_q;
      range = visible_keys(p, i);
      mask_row = batch * p.mask_strides.batch + head * p.mask_strides.head + i * p.mask_strides.row;
    }
    range_s[tid] = range;
    mask_row_s[tid] = mask_row;
  }
  __syncthreads();

  // ---- this block's keys: the split, narrowed to what its rows can see
  int key_begin = p.key_begin + split * p.keys_per_split;
  int key_end = min(p.key_end, key_begin + p.keys_per_split);
  {
    int lo = p.len_k, hi = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (range_s[r].x < range_s[r].y) lo = min(lo, range_s[r].x), hi = max(hi, range_s[r].y);
    key_begin = max(key_begin, lo);
    key_end = min(key_end, hi);
  }
  const int num_tiles = key_end > key_begin ? (key_end - key_begin + kKeys - 1) / kKeys : 0;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  const bool v_aliases_k = p.v_aliases_k != 0;
  const int stage_elems = kKeys * (C::kRowK + (v_aliases_k ? 0 : C::kRowV));
  T* warp_stages = stage_s + warp * kStages * stage_elems;
  const T* k_rows =
      static_cast<const T*>(p.k) + batch * p.k_strides.batch + kv_head * p.k_strides.head;
  const T* v_rows =
      static_cast<const T*>(p.v) + batch * p.v_strides.batch + kv_head * p.v_strides.head;
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
      const T* src = bytes > 0 ? k_rows + j * p.k_strides.row + c * kVec : k_rows;
      copy16_async(k_dst + key * C::kRowK + c * kVec, src, bytes);
    }
    if (v_aliases_k) return;
    T* v_dst = k_dst + kKeys * C::kRowK;
#pragma unroll
    for (int idx = lane; idx < kKeys * C::kChunksV; idx += 32) {
      const int key = idx / C::kChunksV, c = idx % C::kChunksV;
      if (c >= chunks_v) continue;
      const int j = key0 + key;
      const int bytes = j < key_end ? min(16, (p.head_dim_v - c * kVec) * int(sizeof(T))) : 0;
      const T* src = bytes > 0 ? v_rows + j * p.v_strides.row + c * kVec : v_rows;
      copy16_async(v_dst + key * C::kRowV + c * kVec, src, bytes);
    }
  };

  // ---- per-warp online softmax state
  const int qk_key = lane % kKeys, qk_part = lane / kKeys;
  const int value_chunk = lane % C::kValueLanes, key_group = lane / C::kValueLanes;
  float row_max[kRows], row_sum[kRows];  // row_sum: this lane's key only, reduced at the end
  float acc[kRows][C::kValueSteps][kVec];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = minus_inf();
    row_sum[r] = 0.f;
#pragma unroll
    for (int s = 0; s < C::kValueSteps; ++s)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[r][s][e] = 0.f;
  }
  float* probs = probs_s + warp * kRows * kKeys;
  const bool has_mask = p.mask_kind != DecodeMask::None;

#pragma unroll
  for (int n = 0; n < kStages - 1; ++n) {
    load_tile(n);
    commit_copies();
  }
  for (int n = 0; n < my_tiles; ++n) {
    load_tile(n + kStages - 1);
    commit_copies();
    wait_copies<kStages - 1>();
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
      if (visible && has_mask) score[r] += mask_term(p, mask_row_s[r], key);
      if (!visible) score[r] = minus_inf();
    }

    // Online softmax over the warp's tile.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float tile_max = score[r];
#pragma unroll
      for (int offset = 1; offset < kKeys; offset *= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      const float new_max = fmaxf(row_max[r], tile_max);
      const float base = new_max == minus_inf() ? 0.f : new_max;
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
  wait_copies<0>();

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

  const bool single_split = p.num_splits == 1;
  const int rows_total = p.batch * p.heads_q * p.len_q;
  for (int idx = tid; idx < kRows * p.head_dim_v; idx += C::kThreads) {
    const int r = idx / p.head_dim_v, d = idx % p.head_dim_v;
    if (r >= rows_here) break;
    const int packed = row0 + r;
    const int head = kv_head * p.kv_group_size + packed / p.len_q, i = packed % p.len_q;
    float block_max = minus_inf();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, stats_s[w * kRows + r].x);
    float sink = minus_inf();
    if (single_split && p.sinks != nullptr) sink = p.sinks[head * p.sinks_stride] * kLog2e;
    const float top = fmaxf(block_max, sink);
    const float base = top == minus_inf() ? 0.f : top;
    float sum = exp2f(sink - base), value = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = exp2f(stats_s[w * kRows + r].x - base);
      sum += stats_s[w * kRows + r].y * weight;
      value += merge_s[(w * kRows + r) * DV + d] * weight;
    }
    if (single_split) {
      T* out = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
               i * p.out_strides.row;
      out[d] = from_float<T>(sum > 0.f ? value / sum : 0.f);
      if (d == 0 && p.lse != nullptr)
        p.lse[batch * p.lse_strides.batch + head * p.lse_strides.head + i * p.lse_strides.row] =
            top == minus_inf() ? minus_inf() : (base + log2f(sum)) * kLn2;
    } else {
      const int64_t row = (int64_t(batch) * p.heads_q + head) * p.len_q + i;
      const int64_t slot = int64_t(split) * rows_total + row;
      p.partial_out[slot * p.dv_ws + d] = value;
      if (d == 0) reinterpret_cast<float2*>(p.partial_max_sum)[slot] = make_float2(top, sum);
    }
  }
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
  const int64_t blocks = int64_t(p.batch) * p.heads_kv * p.num_splits * p.row_chunks;
  prepare_launch(reinterpret_cast<const void*>(kernel), C::kThreads, smem, "decode_split_kernel");
  kernel<<<static_cast<unsigned>(blocks), C::kThreads, smem, stream>>>(p);
  check(cudaGetLastError(), "decode_split_kernel<<<>>>");
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

template <typename T, int DQK, int DV>
DecodeBucketFns decode_bucket_fns() {
  return {decode_kernel::launch_split<T, DQK, DV>, decode_kernel::blocks_per_sm<T, DQK, DV>};
}

}  // namespace fsdpa::detail::cuda
