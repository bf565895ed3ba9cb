// The pieces of a prefill block shared by the mma.sync kernel (kernel.cuh)
// and the wgmma kernel (hopper_kernel.cuh): the block's rows and keys, the
// softmax side of a key tile, the epilogue. Both kernels hold a warp's
// scores as s[m][n][e]: m a 16-row tile, n an 8-key tile, e the m16n8 C
// fragment element (rows group and group + 8, keys 2 quad and 2 quad + 1),
// and the output accumulators o[m][n][e] the same way with n over Dv / 8.
// `row_of(m, r)` is the query row of half r (0: group, 1: group + 8) of
// row tile m.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/copy.cuh"
#include "cuda/common/exact_row.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/semantics.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/prefill/params.h"

namespace fsdpa::detail::cuda::prefill_impl {

// How far (log2 units) a row's scores may exceed its reference max before the
// max moves: P <= 2^8 is exact enough in bf16/f16 and far from f32 overflow.
constexpr float kRescaleSlack = 8.0f;

// One block's query rows [q0, q0 + tile_q) of one (batch, head) and the key
// tiles [tile_begin, tile_begin + num_tiles) of tile_k keys that any of its
// rows sees (causal and window skipping: begin and end are monotone in the
// row). Heavy causal blocks (late query rows) run first: better tail
// balance; the column slices of one row block (v_slice) run side by side, so
// they share its K tiles in L2. `slice_shift`: the low bits of blockIdx.x
// that number the block's column slice (PrefillParams::v_slice_shift, or 0
// where one block computes every slice).
struct PrefillBlock {
  int head, batch, kv_head, q0;
  DeviceKeyRange first_range, last_range;  // visible keys of the first and last row
  int tile_begin, num_tiles;
};

// The block's output columns [column0, column0 + columns): all of Dv but for
// column slices (PrefillParams::v_slice_shift), worked out where they are
// used rather than kept live across the key loop.
struct VSlice {
  int column0, columns;
};
__device__ __forceinline__ VSlice v_slice(const PrefillParams& p) {
  const int slice = static_cast<int>(blockIdx.x) & ((1 << p.v_slice_shift) - 1);
  const int column0 = slice * p.v_slice_width;
  return {column0, min(p.v_slice_width, p.head_dim_v - column0)};
}

__device__ __forceinline__ PrefillBlock prefill_block(const PrefillParams& p, int tile_q,
                                                      int tile_k, int slice_shift) {
  PrefillBlock b;
  b.q0 = static_cast<int>((gridDim.x - 1 - blockIdx.x) >> slice_shift) * tile_q;
  b.head = static_cast<int>(blockIdx.y);
  b.batch = static_cast<int>(blockIdx.z);
  b.kv_head = b.head / p.kv_group_size;
  const int last_row = min(b.q0 + tile_q, static_cast<int>(p.semantics.len_q)) - 1;
  b.first_range = visible_key_range(p.semantics, b.q0);
  b.last_range = visible_key_range(p.semantics, last_row);
  const int begin = b.first_range.begin, end = b.last_range.end;
  b.tile_begin = begin / tile_k;
  b.num_tiles = end > begin ? (end + tile_k - 1) / tile_k - b.tile_begin : 0;
  return b;
}

// The copies of one K/V stage of the mma.sync kernels (kernel.cuh,
// pair_kernel.cuh): kKeys rows of K (a kDqk bucket, the first `head_dim_qk`
// columns real) and of V (kVCols columns: a slice, or both slices, the first
// `v_columns` real) from key k0 on, rows past len_k as zeros. Rows 16-byte
// aligned take cp_async_tile_rows (a few instructions a chunk; cp_async_tile
// works out bounds and the alignment's case for every chunk, ~50: at the
// large head dims more than the tile's products, bench/NOTES.md session
// 42). It copies no chunk past the head dims: K's must be zeroed once
// (zero_k_tails: S reads them against Q's zeros), V's feed only output
// columns that are not stored. Other rows take cp_async_tile, and so do
// blocks with fewer threads than a row has chunks (cp_async_tile_rows gives
// each thread one chunk column).
template <typename T, int kKeys, int kDqk, int kKStride, int kVCols, int kVStride, int kThreads>
struct KvStageCopy {
  static constexpr bool kRowCopies = kThreads >= kDqk / 8 && kThreads >= kVCols / 8;
  const T* k_base;
  const T* v_base;
  int64_t k_row_stride, v_row_stride;
  int len_k, head_dim_qk, v_columns, copy_bytes;

  // Before the first copy, over all `kStages` stages of K (kKeys rows each,
  // contiguous from `shared_k`).
  template <int kStages>
  __device__ __forceinline__ void zero_k_tails(T* shared_k) const {
    if constexpr (kRowCopies)
      if (copy_bytes >= 16)
        zero_tail_chunks<kStages * kKeys, kDqk, kKStride, kThreads>(shared_k, head_dim_qk);
  }
  __device__ __forceinline__ void operator()(T* k_stage, T* v_stage, int k0) const {
    if constexpr (kRowCopies) {
      if (copy_bytes >= 16) {
        cp_async_tile_rows<kKeys, kDqk, kKStride, kThreads>(shared_address(k_stage), k_base,
                                                            k_row_stride, k0, len_k, head_dim_qk);
        cp_async_tile_rows<kKeys, kVCols, kVStride, kThreads>(shared_address(v_stage), v_base,
                                                              v_row_stride, k0, len_k, v_columns);
        return;
      }
    }
    cp_async_tile<kKeys, kDqk, kKStride, kThreads>(k_stage, k_base, k_row_stride, k0, len_k,
                                                   head_dim_qk, copy_bytes);
    cp_async_tile<kKeys, kVCols, kVStride, kThreads>(v_stage, v_base, v_row_stride, k0, len_k,
                                                     v_columns, copy_bytes);
  }
};

// S = Q K^T of the warp's kRowTiles x 16 rows and kKeyTiles x 8 keys over a
// Dqk bucket, both operands in shared memory, rows kQStride and kKStride
// elements apart: `q_fragment` is the lane's ldmatrix address of the first
// row tile (rows lane % 16, columns (lane / 16) * 8), `k_fragment` that of
// the first key ((lane % 8) + (lane / 16) * 8, columns ((lane / 8) % 2) * 8).
// Where the tile has fewer than 4 accumulator chains (the large head dims'
// 16 keys a warp) the k steps alternate over kSums partial sums, added at
// the end: with 2 warps a scheduler one chain a key tile would leave the
// tensor pipe waiting out each product's latency.
template <typename T, int kDqk, int kQStride, int kKStride, int kRowTiles, int kKeyTiles>
__device__ __forceinline__ void qk_scores(float (&s)[kRowTiles][kKeyTiles][4], uint32_t q_fragment,
                                          uint32_t k_fragment) {
  constexpr int kChains = kRowTiles * kKeyTiles;
  constexpr int kSums = kChains >= 4 ? 1 : 4 / kChains;
  float partial[kSums][kRowTiles][kKeyTiles][4];
#pragma unroll
  for (int h = 0; h < kSums; ++h)
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) partial[h][m][n][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < kDqk / 16; ++kk) {
    uint32_t a[kRowTiles][4];
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
      ldmatrix_x4(a[m], q_fragment + (m * 16 * kQStride + kk * 16) * sizeof(T));
#pragma unroll
    for (int n2 = 0; n2 < kKeyTiles / 2; ++n2) {
      uint32_t b[4];
      ldmatrix_x4(b, k_fragment + (n2 * 16 * kKStride + kk * 16) * sizeof(T));
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
        mma_16x8x16<T>(partial[kk % kSums][m][2 * n2], a[m], b[0], b[1]);
        mma_16x8x16<T>(partial[kk % kSums][m][2 * n2 + 1], a[m], b[2], b[3]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[m][n][e] = partial[0][m][n][e];
#pragma unroll
        for (int h = 1; h < kSums; ++h) s[m][n][e] += partial[h][m][n][e];
      }
}

// Keys [k0, k0 + kKeyTiles * 8) against the rows of the tile: whether any
// score needs masking (the tile crosses a row's visible range, the end of the
// keys, or an array mask applies). `first` and `last` are the visible ranges
// of the block's first and last rows.
template <int kKeyTiles>
__device__ __forceinline__ bool tile_needs_mask(const MaskSemantics& sem, int k0,
                                                const DeviceKeyRange& first,
                                                const DeviceKeyRange& last) {
  return sem.mask_kind != 0 || k0 + kKeyTiles * 8 > first.end || k0 < last.begin;
}

// How a kernel reads a tile's raw products as exp2-domain values: value(x),
// and 2^(value(x) - base) in one piece (exp2). Both maps are monotone, so a
// tile's largest value is the value of its largest product.
// - ScaledScores: the product times `scale` (the score scale, folded into
//   the exp2's FMA; 1 for values a mask pass already mapped).
// - CappedScores: the product under the soft cap (kSoftCap instances):
//   cap - 2 cap * soft_cap_weight(x) (score.cuh), with the score scale in
//   the weight's exponent and `- base` in the same FMA; the constants are
//   the kernel parameters the host worked out.
struct ScaledScores {
  float scale;
  __device__ __forceinline__ float value(float x) const { return x * scale; }
  __device__ __forceinline__ float exp2(float x, float base) const {
    return fast_exp2(fmaf(x, scale, -base));
  }
};
struct CappedScores {
  const PrefillParams& p;
  // The capped value minus `offset`, the subtraction inside the cap's FMA.
  __device__ __forceinline__ float minus(float x, float offset) const {
    return fmaf(-p.two_softcap_log2, soft_cap_weight(x, p.softcap_exponent),
                p.softcap_log2 - offset);
  }
  __device__ __forceinline__ float value(float x) const { return minus(x, 0.0f); }
  __device__ __forceinline__ float exp2(float x, float base) const {
    return fast_exp2(minus(x, base));
  }
};

// Maps the tile's products to exp2-domain values (`map`) and masks them:
// -inf outside a row's visible keys, plus the array mask (in log2 units)
// where one applies.
template <int kRowTiles, int kKeyTiles, typename Map, typename RowOf>
__device__ __forceinline__ void mask_scores(float (&s)[kRowTiles][kKeyTiles][4],
                                            const MaskSemantics& sem, const Map& map,
                                            const RowOf& row_of, int k0, int quad, int batch,
                                            int head) {
  const int len_q = static_cast<int>(sem.len_q);
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_of(m, r);
      const DeviceKeyRange range = visible_key_range(sem, row);
      const bool masked_row = sem.mask_kind != 0 && row < len_q;
      const int64_t mask_row = mask_row_offset(sem, batch, head, row);
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = k0 + n * 8 + 2 * quad + e;
          float value = kMinusInf;
          if (key >= range.begin && key < range.end) {
            value = map.value(s[m][n][2 * r + e]);
            if (masked_row) value += mask_term_log2(sem, mask_row, key);
          }
          s[m][n][2 * r + e] = value;
        }
    }
}

// The largest exp2-domain value of half r of row tile m among this warp's
// scores of the tile (quad-reduced: every lane of the row's quad has it).
template <int kRowTiles, int kKeyTiles, typename Map>
__device__ __forceinline__ float row_tile_max(const float (&s)[kRowTiles][kKeyTiles][4], int m,
                                              int r, const Map& map) {
  float tile_max = kMinusInf;
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n)
    tile_max = fmaxf(tile_max, fmaxf(s[m][n][2 * r], s[m][n][2 * r + 1]));
  return map.value(quad_max(tile_max));
}

// Online softmax with lazy rescaling, for half r of row tile m whose tile
// max is `tile_max`: turns the scores into P = 2^(S - max) in place (S the
// values `map` reads) and updates the row max and partial sum; sets
// `moved` if the max moved, and then O must be multiplied by `correction`
// (rescale_output) before P V joins it. The reference max moves only when
// the tile's max exceeds it by more than kRescaleSlack (log2 units), so P
// stays below 2^kRescaleSlack and most tiles skip the O *= correction pass
// (Dv / 2 multiplies per row tile and lane); the final division by the row
// sum cancels whichever max was used.
template <int kRowTiles, int kKeyTiles, typename Map>
__device__ __forceinline__ void softmax_row(float (&s)[kRowTiles][kKeyTiles][4], int m, int r,
                                            float tile_max, float (&row_max)[kRowTiles][2],
                                            float (&row_sum)[kRowTiles][2],
                                            float (&correction)[kRowTiles][2], const Map& map,
                                            bool& moved) {
  // -inf + slack is -inf: a row's first tile with a visible key always moves it.
  const bool move = tile_max > row_max[m][r] + kRescaleSlack;
  correction[m][r] = move ? fast_exp2(row_max[m][r] - tile_max) : 1.0f;
  if (move) row_max[m][r] = tile_max;
  moved |= move;
  // A row that has seen no key yet keeps max -inf; subtract 0 instead
  // so that exp2 gives 0, never NaN.
  const float base = row_max[m][r] == kMinusInf ? 0.0f : row_max[m][r];
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n) {
    s[m][n][2 * r] = map.exp2(s[m][n][2 * r], base);
    s[m][n][2 * r + 1] = map.exp2(s[m][n][2 * r + 1], base);
    sum += s[m][n][2 * r] + s[m][n][2 * r + 1];
  }
  row_sum[m][r] = row_sum[m][r] * correction[m][r] + sum;
}

// How the warps that share a key tile agree on its row maxima. NoExchange:
// one warp sees all of the tile's keys. Otherwise `exchange(tile_max)` turns
// this warp's maxima into those of the whole tile (pair_kernel.cuh: two warps,
// half the keys each).
struct NoExchange {};

// softmax_row over the warp's rows; returns whether any row of the warp moved
// its max (then every lane rescales O). Without an exchange each row takes
// its max and its softmax in one step, the order the kernels were tuned in
// (taking every row's max first reordered their code); an exchange needs
// all the maxima before any row's softmax.
template <int kRowTiles, int kKeyTiles, typename Map, typename Exchange = NoExchange>
__device__ __forceinline__ bool softmax_scores(float (&s)[kRowTiles][kKeyTiles][4],
                                               float (&row_max)[kRowTiles][2],
                                               float (&row_sum)[kRowTiles][2],
                                               float (&correction)[kRowTiles][2], const Map& map,
                                               const Exchange& exchange = {}) {
  bool any_rescale = false;
  if constexpr (std::is_same_v<Exchange, NoExchange>) {
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        softmax_row(s, m, r, row_tile_max(s, m, r, map), row_max, row_sum, correction, map,
                    any_rescale);
  } else {
    float tile_max[kRowTiles][2];
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) tile_max[m][r] = row_tile_max(s, m, r, map);
    exchange(tile_max);
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        softmax_row(s, m, r, tile_max[m][r], row_max, row_sum, correction, map, any_rescale);
  }
  return __any_sync(0xffffffffu, any_rescale);
}

// The softmax side of a key tile: a tile that needs a mask (need_mask) goes
// through mask_scores and takes its values as they are; an unmasked one
// keeps its raw products, which the softmax scales (or, in kSoftCap
// instances, caps) as it reads them. Returns softmax_scores' answer. The
// uncapped instances run one softmax for both kinds of tile (a scale of 1
// or the score scale). `k0`: the first key of this warp's scores;
// `exchange` as softmax_scores takes it.
template <bool kSoftCap, int kRowTiles, int kKeyTiles, typename RowOf,
          typename Exchange = NoExchange>
__device__ __forceinline__ bool softmax_tile(float (&s)[kRowTiles][kKeyTiles][4],
                                             float (&row_max)[kRowTiles][2],
                                             float (&row_sum)[kRowTiles][2],
                                             float (&correction)[kRowTiles][2],
                                             const PrefillParams& p, bool need_mask,
                                             const RowOf& row_of, int k0, int quad, int batch,
                                             int head, const Exchange& exchange = {}) {
  if constexpr (kSoftCap) {
    const CappedScores capped{p};
    if (!need_mask) return softmax_scores(s, row_max, row_sum, correction, capped, exchange);
    mask_scores(s, p.semantics, capped, row_of, k0, quad, batch, head);
    return softmax_scores(s, row_max, row_sum, correction, ScaledScores{1.0f}, exchange);
  } else {
    if (need_mask)
      mask_scores(s, p.semantics, ScaledScores{p.scale_log2}, row_of, k0, quad, batch, head);
    return softmax_scores(s, row_max, row_sum, correction,
                          ScaledScores{need_mask ? 1.0f : p.scale_log2}, exchange);
  }
}

template <int kRowTiles, int kDvTiles>
__device__ __forceinline__ void rescale_output(float (&o)[kRowTiles][kDvTiles][4],
                                               const float (&correction)[kRowTiles][2]) {
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
    for (int n = 0; n < kDvTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][n][e] *= correction[m][e / 2];
}

// P of 16 keys (8-key tiles 2 kk and 2 kk + 1) as the A fragment of an
// m16n8k16 product, which is also the register A of wgmma m64nNk16.
template <typename T, int kKeyTiles>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[kKeyTiles][4],
                                           int kk) {
  a[0] = pack_pair<T>(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack_pair<T>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Row `row` of (batch, head) and its kv head's keys as exact_row reads them,
// v from column `column0` on.
template <typename T>
__device__ __forceinline__ DenseRowOperands<T> prefill_row_operands(const PrefillParams& p,
                                                                    int batch, int head,
                                                                    int kv_head, int row,
                                                                    int column0) {
  return {
      static_cast<const T*>(p.q) + batch * p.q_strides.batch + head * p.q_strides.head +
          static_cast<int64_t>(row) * p.q_strides.row,
      static_cast<const T*>(p.k) + batch * p.k_strides.outer + kv_head * p.k_strides.head,
      static_cast<const T*>(p.v) + batch * p.v_strides.outer + kv_head * p.v_strides.head + column0,
      1,
      p.k_strides.row,
      1,
      p.v_strides.row,
      1};
}

// The epilogue: the sink joins the denominator, then O is normalized and
// stored (masked to the block's real columns and rows), and the LSE written
// if asked (by the first column slice only: every slice has the same row
// statistics). `slice`: the warp's output columns. A row with a non-finite
// value stored is recomputed by exact_row (the NaN/Inf policy:
// cuda/common/exact_row.cuh). Called by all 32 lanes of each warp.
template <typename T, int kRowTiles, int kDvTiles, typename RowOf>
__device__ __forceinline__ void store_rows(const float (&o)[kRowTiles][kDvTiles][4],
                                           const float (&row_max)[kRowTiles][2],
                                           const float (&row_sum)[kRowTiles][2],
                                           const PrefillParams& p, const PrefillBlock& block,
                                           const VSlice& slice, const RowOf& row_of, int quad) {
  const MaskSemantics& sem = p.semantics;
  const int len_q = static_cast<int>(sem.len_q);
  const int batch = block.batch, head = block.head, columns = slice.columns;
  const float sink = sink_log2(sem.sinks, sem.sink_stride, head);
  T* out_base = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
                slice.column0;
  bool bad[kRowTiles][2] = {};
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total_max = fmaxf(row_max[m][r], sink);
      float sum = quad_sum(row_sum[m][r]);
      float inverse = 0.0f;
      float lse = kMinusInf;
      if (total_max != kMinusInf) {
        const float correction = fast_exp2(row_max[m][r] - total_max);
        sum = sum * correction + fast_exp2(sink - total_max);
        inverse = correction / sum;
        lse = (total_max + log2f(sum)) * kLn2;
      }
      const int row = row_of(m, r);
      if (row >= len_q) continue;
      T* out_row = out_base + static_cast<int64_t>(row) * p.out_strides.row;
#pragma unroll
      for (int n = 0; n < kDvTiles; ++n) {
        const int col = n * 8 + 2 * quad;
        const float x0 = o[m][n][2 * r] * inverse;
        const float x1 = o[m][n][2 * r + 1] * inverse;
        bad[m][r] |= col < columns && (non_finite(x0) || (col + 1 < columns && non_finite(x1)));
        if (col + 1 < columns && p.copy_bytes >= 4) {
          *reinterpret_cast<uint32_t*>(out_row + col) = pack_pair<T>(x0, x1);
        } else if (col < columns) {  // the last odd column, or rows at odd element offsets
          out_row[col] = from_float<T>(x0);
          if (col + 1 < columns) out_row[col + 1] = from_float<T>(x1);
        }
      }
      if (p.lse != nullptr && quad == 0 && slice.column0 == 0)
        p.lse[batch * p.lse_strides.batch + head * p.lse_strides.head + row * p.lse_strides.row] =
            lse;
    }
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      repair_rows(bad[m][r], row_of(m, r), 4, [&](int row) {
        exact_row<T, (kDvTiles * 8 + 31) / 32 * 32>(
            prefill_row_operands<T>(p, batch, head, block.kv_head, row, slice.column0), sem, batch,
            head, row, p.head_dim_qk, p.scale_log2,
            out_base + static_cast<int64_t>(row) * p.out_strides.row, columns,
            p.lse != nullptr && slice.column0 == 0
                ? p.lse + batch * p.lse_strides.batch + head * p.lse_strides.head +
                      row * p.lse_strides.row
                : nullptr);
      });
}

}  // namespace fsdpa::detail::cuda::prefill_impl
