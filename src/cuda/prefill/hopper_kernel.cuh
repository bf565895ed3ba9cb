// The wgmma prefill kernel (sm_90a): the same tiled online softmax as the
// mma.sync kernel (kernel.cuh), with both products on warpgroup MMAs. Each
// warpgroup owns 64 query rows of one (batch, head); Q stays in shared
// memory, K/V tiles stream in through the tensor memory accelerator (TMA),
// all in the 128-byte swizzle that wgmma reads. S = Q K^T takes both
// operands from shared memory (K-major); O += P V takes P from the S
// registers and V from shared memory (N-major, transposed by the
// instruction). Included only by the generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/instances.h"
#include "cuda/prefill/params.h"
#include "cuda/prefill/tile_softmax.cuh"

namespace fsdpa::detail::cuda {

// The tensor maps of one launch (cuda/common/tma.h): Q, K and V read in
// boxes of 64 columns x a tile's rows.
struct PrefillMaps {
  TileMap q, k, v;
};

// kSoftCap: the instance for calls with a soft cap (kernel.cuh says why).
template <int kDqk, int kDv, typename T, bool kSoftCap>
__global__ void __launch_bounds__(kHopperWarpgroups * 128, 1)
    prefill_hopper_kernel(const PrefillParams p, const __grid_constant__ PrefillMaps maps) {
#if FSDPA_WGMMA_ARCH
  using namespace prefill_impl;
  constexpr int kTileQ = kHopperTileQ;
  constexpr int kTileK = hopper_tile_k(kDqk, kDv);
  constexpr int kStages = kHopperStages;
  constexpr int kKeyTiles = kTileK / 8;  // 8-column tiles of S
  constexpr int kDvTiles = kDv / 8;      // 8-column tiles of O
  constexpr int kQBytes = swizzle128_bytes(kTileQ, kDqk);
  constexpr int kKBytes = swizzle128_bytes(kTileK, kDqk);
  constexpr int kVBytes = swizzle128_bytes(kTileK, kDv);
  static_assert(kDqk % 16 == 0 && kDv % 16 == 0 && kTileK % 16 == 0, "buckets of 16");
  static_assert(kStages == 2, "the schedule below keeps two K and two V tiles");

  extern __shared__ unsigned char shared_raw[];
  const uint32_t shared_q = (shared_address(shared_raw) + 1023u) & ~1023u;
  const uint32_t shared_k = shared_q + kQBytes;
  const uint32_t shared_v = shared_k + kStages * kKBytes;
  // Barriers, 8 bytes each: Q, then K of stage 0 and 1, then V of stage 0 and 1.
  const uint32_t barriers = shared_v + kStages * kVBytes;
  const uint32_t q_barrier = barriers;
  auto k_barrier = [&](int tile) { return barriers + 8 * (1 + tile % kStages); };
  auto v_barrier = [&](int tile) { return barriers + 8 * (1 + kStages + tile % kStages); };
  // Tile t is the (t / kStages)-th use of its stage's barriers.
  auto parity = [](int tile) { return static_cast<uint32_t>(tile / kStages % 2); };

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int warp = static_cast<int>(threadIdx.x) / 32;  // in the block: 4 per warpgroup
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int group = lane / 4;
  const int quad = lane % 4;
  const bool issuer = threadIdx.x == 0;  // the thread that issues the copies

  const PrefillBlock block = prefill_block(p, kTileQ, kTileK);
  const int head = block.head, batch = block.batch, kv_head = block.kv_head, q0 = block.q0;
  const DeviceKeyRange first_range = block.first_range, last_range = block.last_range;
  const int tile_begin = block.tile_begin, num_tiles = block.num_tiles;
  const MaskSemantics& sem = p.semantics;

  // Row of this thread's accumulator half r (one 16-row tile per warp).
  auto row_of = [&](int, int r) { return q0 + warp * 16 + group + 8 * r; };

  // Copies: one TMA box per 64-column panel; rows past the tensor's end and
  // columns past the real head dim arrive as zeros. They run one tile ahead,
  // V one tile behind K: the copies issued while tile j is computed bring K
  // of tile j + 1 and V of tile j, which the next iteration needs (S of
  // j + 1 and P V of j). Prologue: Q, K of tile 0, V of tile 0, K of tile 1.
  auto load = [&](const TileMap& map, uint32_t destination, uint32_t barrier, int bytes,
                  int columns, int rows, int row0, int head_index, int column0) {
    barrier_expect_bytes(barrier, bytes);
#pragma unroll
    for (int panel = 0; panel * 64 < columns; ++panel)
      tma_load_4d(destination + panel * rows * 128, &map.map, barrier, column0 + panel * 64, row0,
                  head_index * map.head_step, batch * map.batch_step);
  };
  auto load_k = [&](int tile) {
    if (tile < num_tiles)
      load(maps.k, shared_k + tile % kStages * kKBytes, k_barrier(tile), kKBytes, kDqk, kTileK,
           (tile_begin + tile) * kTileK, kv_head, 0);
  };
  auto load_v = [&](int tile) {
    if (tile < num_tiles)
      load(maps.v, shared_v + tile % kStages * kVBytes, v_barrier(tile), kVBytes, kDv, kTileK,
           (tile_begin + tile) * kTileK, kv_head, v_slice(p).column0);
  };
  if (issuer) {
    for (int b = 0; b < 1 + 2 * kStages; ++b) barrier_init(barriers + 8 * b);
    barrier_init_fence();
  }
  __syncthreads();
  if (issuer) {
    load(maps.q, shared_q, q_barrier, kQBytes, kDqk, kTileQ, q0, head, 0);
    load_k(0);
    load_v(0);
    load_k(1);
  }

  float o[1][kDvTiles][4];
  float row_max[1][2] = {{kMinusInf, kMinusInf}};
  float row_sum[1][2] = {{0.0f, 0.0f}};  // per-thread partial; quad-reduced at the end
#pragma unroll
  for (int n = 0; n < kDvTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][n][e] = 0.0f;
  uint32_t pa[kTileK / 16][4];  // P of the previous tile, as wgmma A fragments

  // Descriptors of the first byte of this warpgroup's 64 Q rows, of K stage
  // 0 and of V stage 0; an offset moves the address field (bits 0-13, in 16
  // bytes), which never carries (shared memory < 256 KB). Q and K: K-major,
  // 8-row groups 1024 bytes apart, panel kk / 4, 32 bytes per k step. V:
  // N-major, 64-column panels of Dv one panel (tile_k rows x 128 bytes)
  // apart, 8-key groups 1024 bytes apart.
  const uint64_t q_descriptor = swizzle128_descriptor(shared_q + warpgroup * 64 * 128, 16, 1024);
  const uint64_t k_descriptor = swizzle128_descriptor(shared_k, 16, 1024);
  const uint64_t v_descriptor = swizzle128_descriptor(shared_v, kTileK * 128, 1024);

  // S = Q K^T of `tile`, issued (not waited for).
  float s[1][kKeyTiles][4];
  auto issue_scores = [&](int tile) {
    const uint32_t stage = tile % kStages * kKBytes;
    barrier_wait(k_barrier(tile), parity(tile));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      const uint32_t q_offset = (kk / 4) * kTileQ * 128 + (kk % 4) * 32;
      const uint32_t k_offset = stage + (kk / 4) * kTileK * 128 + (kk % 4) * 32;
      wgmma_ss<T, kTileK>(s[0], q_descriptor + (q_offset >> 4), k_descriptor + (k_offset >> 4),
                          kk > 0);
    }
    wgmma_commit();
  };
  // O += P V of `tile`, issued.
  auto issue_output = [&](int tile) {
    const uint32_t stage = tile % kStages * kVBytes;
    barrier_wait(v_barrier(tile), parity(tile));
    pin_registers(pa);
    pin_registers(o[0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk)
      wgmma_rs<T, kDv>(o[0], pa[kk], v_descriptor + ((stage + kk * 16 * 128) >> 4), 1);
    wgmma_commit();
  };
  // Softmax of the scores of `tile` (waited for); P into pa once O is free.
  // P V of the previous tile may still be running: O is rescaled only after
  // it completes.
  auto softmax_to_p = [&](int tile) {
    const int k0 = (tile_begin + tile) * kTileK;
    // Scale into the exp2 domain and mask where needed; unmasked tiles keep
    // raw scores and the scale joins the exp2's FMA.
    const bool need_mask = tile_needs_mask<kSoftCap, kKeyTiles>(sem, k0, first_range, last_range);
    if (need_mask) mask_scores<kSoftCap>(s, sem, row_of, k0, quad, p.scale_log2, batch, head);
    float correction[1][2];
    const bool rescale =
        softmax_scores(s, row_max, row_sum, correction, need_mask ? 1.0f : p.scale_log2);
    pin_registers(s[0]);  // the softmax is done before the wait below, not after
    wgmma_wait<0>();
    pin_registers(o[0]);
    if (rescale) rescale_output(o, correction);
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) p_fragment<T>(pa[kk], s[0], kk);
  };

  barrier_wait(q_barrier, 0);
  // Each iteration overlaps the softmax of tile `it` with P V of tile it - 1
  // on the tensor cores. The block barrier frees the stages the copies below
  // overwrite: K of it - 1 and V of it - 2, whose products every warpgroup
  // waited for in the previous iteration.
  for (int it = 0; it < num_tiles; ++it) {
    if (it > 0) {
      __syncthreads();
      if (issuer) {
        load_k(it + 1);
        load_v(it);
      }
    }
    issue_scores(it);
    if (it > 0) issue_output(it - 1);
    // The scores; P V may still run.
    if (it > 0)
      wgmma_wait<1>();
    else
      wgmma_wait<0>();
    pin_registers(s[0]);
    softmax_to_p(it);
  }
  if (num_tiles > 0) {
    issue_output(num_tiles - 1);
    wgmma_wait<0>();
    pin_registers(o[0]);
  }

  store_rows<T>(o, row_max, row_sum, p, block, row_of, quad);
#endif  // FSDPA_WGMMA_ARCH
}

// Checks the compiled limits, builds the tensor maps, then launches one
// (bucket, dtype) kernel.
template <int kDqk, int kDv, typename T>
void launch_prefill_hopper(const PrefillParams& params, cudaStream_t stream) {
  constexpr int kThreads = kHopperWarpgroups * 128;
  constexpr int kSharedBytes = hopper_shared_bytes(kDqk, kDv);
  const auto kernel_function = params.semantics.softcap > 0.0f
                                   ? &prefill_hopper_kernel<kDqk, kDv, T, true>
                                   : &prefill_hopper_kernel<kDqk, kDv, T, false>;
  const void* kernel = reinterpret_cast<const void*>(kernel_function);
  prepare_launch(kernel, kThreads, kSharedBytes, "cuda_fused_prefill_hopper");
  const int64_t heads_kv = params.heads_q / params.kv_group_size;
  const MaskSemantics& sem = params.semantics;
  const PrefillMaps maps{
      make_swizzle128_map(params.q, params.batch, params.heads_q, sem.len_q, params.head_dim_qk,
                          params.q_strides, kHopperTileQ),
      make_swizzle128_map(params.k, params.batch, heads_kv, sem.len_k, params.head_dim_qk,
                          params.k_strides, hopper_tile_k(kDqk, kDv)),
      make_swizzle128_map(params.v, params.batch, heads_kv, sem.len_k, params.head_dim_v,
                          params.v_strides, hopper_tile_k(kDqk, kDv))};
  const int64_t q_blocks = (sem.len_q + kHopperTileQ - 1) / kHopperTileQ;
  const dim3 grid(static_cast<unsigned>(q_blocks << params.v_slice_shift),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  kernel_function<<<grid, kThreads, kSharedBytes, stream>>>(params, maps);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fsdpa::detail::cuda
