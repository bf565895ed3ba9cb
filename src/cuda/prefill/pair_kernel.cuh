// The paired-slice prefill kernel (sm_80+): a Dv in two column slices
// (PrefillParams::v_slice_shift 1) in one block, Q K^T computed once for
// both. The mma.sync kernel (kernel.cuh) runs each slice in a block of its
// own, each computing all of Q K^T; here the block's 8 warps are 4 row tiles
// x 2 slices. The two warps of a row tile (warp w and its partner w ^ 4)
// compute the scores of half of each key tile each (slice 0 the first half),
// trade their tile maxima through shared memory so that both run the
// softmax against the same max, write their P to shared memory, and each
// then accumulates P V over the whole key tile for its own slice's columns:
// its own half of P from registers, its partner's by ldmatrix. K/V tiles
// (V with both slices' columns) stream through the same cp.async ring as
// the mma.sync kernel's. Included by kernel.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/params.h"
#include "cuda/prefill/tile_softmax.cuh"

namespace fsdpa::detail::cuda {

template <int kDqk, int kDv, typename T, int kTileK, int kStages, bool kSoftCap>
__global__ void __launch_bounds__(kPairWarps * 32, 1) prefill_pair_kernel(const PrefillParams p) {
  using namespace prefill_impl;
  constexpr int kThreads = kPairWarps * 32;
  constexpr int kHalfK = kTileK / 2;  // keys of one warp's scores
  constexpr int kHalfKeyTiles = kHalfK / 8;
  constexpr int kQStride = kDqk + 8;  // elements; +16 bytes keeps ldmatrix conflict-free
  constexpr int kKStride = kDqk + 8;
  constexpr int kVStride = 2 * kDv + 8;  // both slices' columns
  constexpr int kPStride = kHalfK + 8;
  constexpr int kDvTiles = kDv / 8;
  static_assert(kDqk % 16 == 0 && kDv % 16 == 0 && kHalfK % 16 == 0, "buckets of 16");

  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* shared_q = reinterpret_cast<T*>(shared_raw);
  T* shared_k = shared_q + kPairTileQ * kQStride;
  T* shared_v = shared_k + kStages * kTileK * kKStride;
  T* shared_p = shared_v + kStages * kTileK * kVStride;  // [warp][16 rows][kPStride]
  // [warp][lane][2]: a lane's two rows' tile maxima, at the end their partial sums.
  float* shared_stats = reinterpret_cast<float*>(shared_p + kPairWarps * 16 * kPStride);

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int group = lane / 4;
  const int quad = lane % 4;
  const int row_tile = warp % kPairRowTiles;
  const int slice = warp / kPairRowTiles;  // its output columns, and its half of each key tile
  const int partner = warp ^ kPairRowTiles;

  const PrefillBlock block = prefill_block(p, kPairTileQ, kTileK, 0);
  const int head = block.head, batch = block.batch, kv_head = block.kv_head, q0 = block.q0;
  const DeviceKeyRange first_range = block.first_range, last_range = block.last_range;
  const int tile_begin = block.tile_begin, num_tiles = block.num_tiles;
  const MaskSemantics& sem = p.semantics;
  const int len_q = static_cast<int>(sem.len_q);
  const int len_k = static_cast<int>(sem.len_k);

  const T* q_base =
      static_cast<const T*>(p.q) + batch * p.q_strides.batch + head * p.q_strides.head;
  const T* k_base =
      static_cast<const T*>(p.k) + batch * p.k_strides.outer + kv_head * p.k_strides.head;
  const T* v_base =
      static_cast<const T*>(p.v) + batch * p.v_strides.outer + kv_head * p.v_strides.head;
  // The launch checked that two slices of v_slice_width == kDv columns cover Dv.
  const VSlice columns{slice * p.v_slice_width,
                       min(p.v_slice_width, p.head_dim_v - slice * p.v_slice_width)};

  auto row_of = [&](int, int r) { return q0 + row_tile * 16 + group + 8 * r; };

  // Prologue: Q and the first kStages-1 K/V tiles, one commit group each.
  cp_async_tile<kPairTileQ, kDqk, kQStride, kThreads>(shared_q, q_base, p.q_strides.row, q0, len_q,
                                                      p.head_dim_qk, p.copy_bytes);
  const KvStageCopy<T, kTileK, kDqk, kKStride, 2 * kDv, kVStride, kThreads> copy_kv{
      k_base, v_base,        p.k_strides.row, p.v_strides.row,
      len_k,  p.head_dim_qk, p.head_dim_v,    p.copy_bytes};
  copy_kv.template zero_k_tails<kStages>(shared_k);
  auto load_kv = [&](int tile, int stage) {
    copy_kv(shared_k + stage * kTileK * kKStride, shared_v + stage * kTileK * kVStride,
            (tile_begin + tile) * kTileK);
  };
  const CpAsyncRing<kStages> ring{num_tiles};
  ring.start(load_kv);

  float o[1][kDvTiles][4];
  float row_max[1][2];
  // Per-thread partial sums over this warp's keys, quad- and pair-reduced at the end.
  float row_sum[1][2];
#pragma unroll
  for (int n = 0; n < kDvTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][n][e] = 0.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[0][r] = kMinusInf;
    row_sum[0][r] = 0.0f;
  }

  const uint32_t q_fragment_base =
      shared_address(shared_q + (row_tile * 16 + (lane % 16)) * kQStride + (lane / 16) * 8);
  T* own_p = shared_p + warp * 16 * kPStride;
  const uint32_t partner_p_fragment_base =
      shared_address(shared_p + (partner * 16 + (lane % 16)) * kPStride + (lane / 16) * 8);
  float* own_stats = shared_stats + (warp * 32 + lane) * 2;
  const float* partner_stats = shared_stats + (partner * 32 + lane) * 2;
  // The pair's barrier (ids 1..kPairRowTiles; 0 is __syncthreads). What a
  // warp writes to its stats and P before it is read after it, and written
  // again only after the next tile's __syncthreads, which every read precedes.
  auto pair_barrier = [&] { named_barrier_sync(1 + row_tile, 64); };
  // Both warps take the larger of their maxima: the same values in the same
  // order, so their row maxima, corrections and P's base stay equal.
  auto trade_maxima = [&](float(&tile_max)[1][2]) {
    own_stats[0] = tile_max[0][0];
    own_stats[1] = tile_max[0][1];
    pair_barrier();
    tile_max[0][0] = fmaxf(tile_max[0][0], partner_stats[0]);
    tile_max[0][1] = fmaxf(tile_max[0][1], partner_stats[1]);
  };

  for (int it = 0; it < num_tiles; ++it) {
    const int stage = ring.acquire(it, load_kv);
    const T* stage_k = shared_k + stage * kTileK * kKStride;
    const T* stage_v = shared_v + stage * kTileK * kVStride;
    const int k0 = (tile_begin + it) * kTileK;
    const int own_k0 = k0 + slice * kHalfK;

    // S = Q K^T over the Dqk bucket, this warp's half of the keys.
    float s[1][kHalfKeyTiles][4];
    qk_scores<T, kDqk, kQStride, kKStride>(
        s, q_fragment_base,
        shared_address(stage_k + (slice * kHalfK + (lane % 8) + (lane / 16) * 8) * kKStride +
                       ((lane / 8) % 2) * 8));

    const bool need_mask = tile_needs_mask<kHalfKeyTiles>(sem, own_k0, first_range, last_range);
    float correction[1][2];
    if (softmax_tile<kSoftCap>(s, row_max, row_sum, correction, p, need_mask, row_of, own_k0, quad,
                               batch, head, trade_maxima)) {
      rescale_output(o, correction);
    }

    // This warp's P for its partner, as 16-bit pairs in the A-fragment rows.
#pragma unroll
    for (int n = 0; n < kHalfKeyTiles; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(own_p + (group + 8 * r) * kPStride + n * 8 + 2 * quad) =
            pack_pair<T>(s[0][n][2 * r], s[0][n][2 * r + 1]);
    pair_barrier();

    // O += P V over the tile's keys for this slice's columns: the own half
    // of P from registers (already in the A-fragment layout), the partner's
    // from shared memory.
    const uint32_t v_fragment_base =
        shared_address(stage_v + (lane % 16) * kVStride + (lane / 16) * 8 + slice * kDv);
    auto accumulate = [&](const uint32_t(&a)[4], int key) {
#pragma unroll
      for (int n2 = 0; n2 < kDvTiles / 2; ++n2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_fragment_base + (key * kVStride + n2 * 16) * sizeof(T));
        mma_16x8x16<T>(o[0][2 * n2], a, b[0], b[1]);
        mma_16x8x16<T>(o[0][2 * n2 + 1], a, b[2], b[3]);
      }
    };
#pragma unroll
    for (int kk = 0; kk < kHalfK / 16; ++kk) {
      uint32_t a[4];
      p_fragment<T>(a, s[0], kk);
      accumulate(a, slice * kHalfK + kk * 16);
    }
#pragma unroll
    for (int kk = 0; kk < kHalfK / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, partner_p_fragment_base + kk * 16 * sizeof(T));
      accumulate(a, (1 - slice) * kHalfK + kk * 16);
    }
  }
  ring.drain();

  // Each lane's partial sums over its half of the keys, plus its partner
  // lane's (the same rows and quad, the other half).
  own_stats[0] = row_sum[0][0];
  own_stats[1] = row_sum[0][1];
  pair_barrier();
  row_sum[0][0] += partner_stats[0];
  row_sum[0][1] += partner_stats[1];

  store_rows<T>(o, row_max, row_sum, p, block, columns, row_of, quad);
}

// Launches the pair kernel of one (bucket, dtype, shared-memory class) for a
// call in two slices of kDv columns (launch_prefill's check).
template <int kDqk, int kDv, typename T, int kSharedClass>
void launch_prefill_pair(const PrefillParams& params, cudaStream_t stream) {
  constexpr PairTile kTile = prefill_pair_tile(kDqk, kDv, kSharedBudgets[kSharedClass]);
  static_assert(kTile.tile_k > 0, "a pair tile for the class");
  constexpr int kThreads = kPairWarps * 32;
  constexpr int kSharedBytes = pair_shared_bytes(kTile, kDqk, kDv);
  const bool soft_cap = params.semantics.softcap > 0.0f;
  const auto kernel_function =
      soft_cap ? &prefill_pair_kernel<kDqk, kDv, T, kTile.tile_k, kTile.stages, true>
               : &prefill_pair_kernel<kDqk, kDv, T, kTile.tile_k, kTile.stages, false>;
  const void* kernel = reinterpret_cast<const void*>(kernel_function);
  prepare_launch(kernel, kThreads, kSharedBytes, "cuda_fused_prefill");
  const int64_t q_blocks = (params.semantics.len_q + kPairTileQ - 1) / kPairTileQ;
  const dim3 grid(static_cast<unsigned>(q_blocks), static_cast<unsigned>(params.heads_q),
                  static_cast<unsigned>(params.batch));
  kernel_function<<<grid, kThreads, kSharedBytes, stream>>>(params);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fsdpa::detail::cuda
