// The mma.sync prefill kernel (sm_80+): FlashAttention-style tiled online
// softmax. Each block owns tile_q query rows of one (batch, head); the Q tile
// stays in shared memory, K/V tiles stream through a cp.async ring, S = QK^T
// and O += PV run on m16n8k16 tensor-core tiles, softmax in the exp2 domain
// with the scale folded in. Included only by the generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/instances.h"
#include "cuda/prefill/pair_kernel.cuh"
#include "cuda/prefill/params.h"
#include "cuda/prefill/tile_softmax.cuh"

namespace fsdpa::detail::cuda {

// kTileCode (encode_tile) is the tuning table's row but in
// bench/prefill_tune.cu, which times others. kSoftCap: the instance for calls
// with a soft cap (softmax_tile caps every tile); as a runtime branch it
// slowed the calls without one (bench/NOTES.md, session 11).
template <int kDqk, int kDv, typename T, int kTileCode, bool kSoftCap>
__global__ void __launch_bounds__(decode_tile(kTileCode).warps * 32,
                                  decode_tile(kTileCode).min_blocks)
    prefill_kernel(const PrefillParams p) {
  using namespace prefill_impl;
  constexpr PrefillTile kTile = decode_tile(kTileCode);
  constexpr int kThreads = kTile.warps * 32;
  constexpr int kRowTiles = kTile.row_tiles;
  constexpr int kTileQ = prefill_tile_q(kTile);
  constexpr int kTileK = kTile.tile_k;
  constexpr int kStages = kTile.stages;
  constexpr int kQStride = kDqk + 8;  // elements; +16 bytes keeps ldmatrix conflict-free
  constexpr int kKStride = kDqk + 8;
  constexpr int kVStride = kDv + 8;
  constexpr int kKeyTiles = kTileK / 8;  // n-tiles of S
  constexpr int kDvTiles = kDv / 8;      // n-tiles of O
  static_assert(kDqk % 16 == 0 && kDv % 16 == 0 && kTileK % 16 == 0, "buckets of 16");

  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* shared_q = reinterpret_cast<T*>(shared_raw);
  T* shared_k = shared_q + kTileQ * kQStride;
  T* shared_v = shared_k + kStages * kTileK * kKStride;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int group = lane / 4;
  const int quad = lane % 4;

  const PrefillBlock block = prefill_block(p, kTileQ, kTileK, p.v_slice_shift);
  const int head = block.head, batch = block.batch, kv_head = block.kv_head, q0 = block.q0;
  const DeviceKeyRange first_range = block.first_range, last_range = block.last_range;
  const int tile_begin = block.tile_begin, num_tiles = block.num_tiles;
  const MaskSemantics& sem = p.semantics;
  const int len_q = static_cast<int>(sem.len_q);

  const T* q_base =
      static_cast<const T*>(p.q) + batch * p.q_strides.batch + head * p.q_strides.head;
  const T* k_base =
      static_cast<const T*>(p.k) + batch * p.k_strides.outer + kv_head * p.k_strides.head;
  const VSlice slice = v_slice(p);
  const T* v_base = static_cast<const T*>(p.v) + batch * p.v_strides.outer +
                    kv_head * p.v_strides.head + slice.column0;

  // Row of this thread's accumulator half r of row tile m.
  auto row_of = [&](int m, int r) { return q0 + (warp * kRowTiles + m) * 16 + group + 8 * r; };

  // Prologue: Q and the first kStages-1 K/V tiles, one commit group each.
  cp_async_tile<kTileQ, kDqk, kQStride, kThreads>(shared_q, q_base, p.q_strides.row, q0, len_q,
                                                  p.head_dim_qk, p.copy_bytes);
  const int len_k = static_cast<int>(sem.len_k);
  const KvStageCopy<T, kTileK, kDqk, kKStride, kDv, kVStride, kThreads> copy_kv{
      k_base, v_base,        p.k_strides.row, p.v_strides.row,
      len_k,  p.head_dim_qk, slice.columns,   p.copy_bytes};
  copy_kv.template zero_k_tails<kStages>(shared_k);
  auto load_kv = [&](int tile, int stage) {
    copy_kv(shared_k + stage * kTileK * kKStride, shared_v + stage * kTileK * kVStride,
            (tile_begin + tile) * kTileK);
  };
  const CpAsyncRing<kStages> ring{num_tiles};
  ring.start(load_kv);

  float o[kRowTiles][kDvTiles][4];
  float row_max[kRowTiles][2];
  float row_sum[kRowTiles][2];  // per-thread partial; quad-reduced at the end
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int n = 0; n < kDvTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][n][e] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[m][r] = kMinusInf;
      row_sum[m][r] = 0.0f;
    }
  }

  const uint32_t q_fragment_base =
      shared_address(shared_q + (warp * kRowTiles * 16 + (lane % 16)) * kQStride + (lane / 16) * 8);

  for (int it = 0; it < num_tiles; ++it) {
    const int stage = ring.acquire(it, load_kv);
    const T* stage_k = shared_k + stage * kTileK * kKStride;
    const T* stage_v = shared_v + stage * kTileK * kVStride;
    const int k0 = (tile_begin + it) * kTileK;

    // S = Q K^T over the Dqk bucket.
    float s[kRowTiles][kKeyTiles][4];
    qk_scores<T, kDqk, kQStride, kKStride>(
        s, q_fragment_base,
        shared_address(stage_k + ((lane % 8) + (lane / 16) * 8) * kKStride + ((lane / 8) % 2) * 8));

    const bool need_mask = tile_needs_mask<kKeyTiles>(sem, k0, first_range, last_range);
    float correction[kRowTiles][2];
    if (softmax_tile<kSoftCap>(s, row_max, row_sum, correction, p, need_mask, row_of, k0, quad,
                               batch, head))
      rescale_output(o, correction);

    // O += P V: the S accumulators are already in the A-fragment layout.
    const uint32_t v_fragment_base =
        shared_address(stage_v + (lane % 16) * kVStride + (lane / 16) * 8);
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      uint32_t a[kRowTiles][4];
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) p_fragment<T>(a[m], s[m], kk);
#pragma unroll
      for (int n2 = 0; n2 < kDvTiles / 2; ++n2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_fragment_base + (kk * 16 * kVStride + n2 * 16) * sizeof(T));
#pragma unroll
        for (int m = 0; m < kRowTiles; ++m) {
          mma_16x8x16<T>(o[m][2 * n2], a[m], b[0], b[1]);
          mma_16x8x16<T>(o[m][2 * n2 + 1], a[m], b[2], b[3]);
        }
      }
    }
  }
  ring.drain();

  store_rows<T>(o, row_max, row_sum, p, block, v_slice(p), row_of, quad);
}

// Checks the compiled limits, then launches one (bucket, dtype, tile) kernel.
template <int kDqk, int kDv, typename T, int kTileCode>
void launch_prefill_tile(const PrefillParams& params, cudaStream_t stream) {
  constexpr PrefillTile kTile = decode_tile(kTileCode);
  constexpr int kThreads = kTile.warps * 32;
  constexpr int kSharedBytes = prefill_shared_bytes(kTile, kDqk, kDv, sizeof(T));
  const bool soft_cap = params.semantics.softcap > 0.0f;
  const auto kernel_function = soft_cap ? &prefill_kernel<kDqk, kDv, T, kTileCode, true>
                                        : &prefill_kernel<kDqk, kDv, T, kTileCode, false>;
  const void* kernel = reinterpret_cast<const void*>(kernel_function);
  prepare_launch(kernel, kThreads, kSharedBytes, "cuda_fused_prefill");
  const int64_t q_blocks =
      (params.semantics.len_q + prefill_tile_q(kTile) - 1) / prefill_tile_q(kTile);
  const dim3 grid(static_cast<unsigned>(q_blocks << params.v_slice_shift),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  kernel_function<<<grid, kThreads, kSharedBytes, stream>>>(params);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

// The tile of the shared-memory class (shared_budget.h's kSharedBudgets) the
// plan chose for the device, or the pair kernel where it serves the call
// (pair_kernel_serves, which the plan reads too).
template <int kDqk, int kDv, typename T, int kSharedClass>
void launch_prefill(const PrefillParams& params, cudaStream_t stream) {
  constexpr int kBudget = kSharedBudgets[kSharedClass];
  if constexpr (pair_kernel_serves(kDqk, kDv, 2, kBudget)) {
    if (pair_kernel_serves(kDqk, kDv, int64_t{1} << params.v_slice_shift, kBudget)) {
      if (params.v_slice_width != kDv)
        throw Error("fsdpa: internal: column slices of " + std::to_string(params.v_slice_width) +
                    " for the pair kernel of a " + std::to_string(kDv) + " bucket");
      launch_prefill_pair<kDqk, kDv, T, kSharedClass>(params, stream);
      return;
    }
  }
  launch_prefill_tile<kDqk, kDv, T, encode_tile(prefill_tile(kDqk, kDv, kBudget))>(params, stream);
}

}  // namespace fsdpa::detail::cuda
