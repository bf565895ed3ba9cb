// The wgmma prefill kernel (sm_90a): the same tiled online softmax as the
// mma.sync kernel (kernel.cuh), with both products on warpgroup MMAs, in a
// warp-specialized block. Warpgroup 0 is the producer: one of its threads
// issues every copy through the tensor memory accelerator (TMA), into rings
// of K and V stages (cuda/common/pipeline.cuh); where rows are not 16-byte
// aligned (TMA's rule), all of its threads fill the same layout instead:
// bulk copies into staging buffers, each thread then shifting one row into
// place (cuda/common/staged_copy.cuh), or, where the staging buffers do not
// fit (buckets above 176), cp.async pieces. It hands most of its registers
// to the consumers, warpgroups 1 and 2, which own 64 query rows each of one
// (batch, head); Q stays in shared memory. All tiles are in the 128-byte
// swizzle that wgmma reads. S = Q K^T takes both operands from shared
// memory (K-major); O += P V takes P from the S registers and V from shared
// memory (N-major, transposed by the instruction).
//
// The schedule, per consumer and key tile j: issue S_j and P V of tile
// j - 1, then the softmax of S_j while that P V runs. The two consumers take
// turns issuing (ping-pong, two named barriers), so one's softmax runs while
// the other's products keep the tensor cores busy. Included only by the
// generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/common/staged_copy.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/prefill/config.h"
#include "cuda/prefill/instances.h"
#include "cuda/prefill/params.h"
#include "cuda/prefill/tile_softmax.cuh"
#include "cuda/prefill/trace.cuh"

namespace fsdpa::detail::cuda {

// The tensor maps of one launch (cuda/common/tma.h): Q, K and V read in
// boxes of 64 columns x a tile's rows.
struct PrefillMaps {
  TileMap q, k, v;
};

// kSoftCap: the instance for calls with a soft cap (kernel.cuh says why).
// kStaged: the instance for the staged load stage, whose producer keeps more
// registers (config.h); the other one takes TMA or cp.async pieces, as
// PrefillParams::hopper_load says.
template <int kDqk, int kDv, typename T, bool kSoftCap, bool kStaged>
__global__ void __launch_bounds__(kHopperThreads, 1)
    prefill_hopper_kernel(const PrefillParams p, const __grid_constant__ PrefillMaps maps) {
#if FSDPA_WGMMA_ARCH
  using namespace prefill_impl;
  constexpr int kTileQ = kHopperTileQ;
  constexpr HopperLoad kTiles = kStaged ? HopperLoad::Staged : HopperLoad::Tma;  // of the tiles
  constexpr int kTileK = hopper_tile_k(kDqk, kDv, kTiles);
  constexpr int kStages = kHopperStages;
  constexpr int kKeyTiles = kTileK / 8;  // 8-column tiles of S
  constexpr int kDvTiles = kDv / 8;      // 8-column tiles of O
  constexpr int kQBytes = swizzle128_bytes(kTileQ, kDqk);
  constexpr int kKBytes = swizzle128_bytes(kTileK, kDqk);
  constexpr int kVBytes = swizzle128_bytes(kTileK, kDv);
  constexpr int kConsumerThreads = kHopperWarpgroups * 128;
  static_assert(kDqk % 16 == 0 && kDv % 16 == 0 && kTileK % 16 == 0, "buckets of 16");
  static_assert(kHopperWarpgroups == 2, "the turns below alternate between two consumers");
  using Ring = PipelineRing<kStages>;

  extern __shared__ unsigned char shared_raw[];
  const uint32_t shared_q = (shared_address(shared_raw) + 1023u) & ~1023u;
  const uint32_t shared_k = shared_q + kQBytes;
  const uint32_t shared_v = shared_k + kStages * kKBytes;
  // Barriers: Q's, then the K ring's, then the V ring's.
  const uint32_t q_barrier = shared_v + kStages * kVBytes;
  const Ring k_ring(q_barrier + 8), v_ring(q_barrier + 8 + Ring::kBarrierBytes);

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;  // 0: the producer

  // The load stage (config.h's hopper_load, chosen by the launch): TMA boxes
  // where every row start is 16-byte aligned (one thread issues them), else
  // the whole producer warpgroup stages rows or copies cp.async pieces.
  const HopperLoad load = kStaged ? HopperLoad::Staged : static_cast<HopperLoad>(p.hopper_load);
  const bool tma = load == HopperLoad::Tma;
  const uint32_t producer_arrivals = tma ? 1u : 128u;
  // The staged stage's two staging buffers and their barriers (after the
  // rings' barriers; the launch sized shared memory for them).
  const uint32_t staging_barriers = (q_barrier + 8 + 2 * Ring::kBarrierBytes + 15u) & ~15u;
  const uint32_t staging = staging_barriers + 16;
  constexpr uint32_t kStagingPitch = staged_row_pitch(max_bucket(kDqk, kDv));
  if (threadIdx.x == 0) {
    barrier_init(q_barrier, producer_arrivals);
    k_ring.init(producer_arrivals, kConsumerThreads);
    v_ring.init(producer_arrivals, kConsumerThreads);
    if constexpr (kStaged) {
      barrier_init(staging_barriers, 128);
      barrier_init(staging_barriers + 8, 128);
    }
    barrier_init_fence();
  }
  __syncthreads();

  // Each role works out the block's rows and key tiles itself, after its
  // register change.
  if (warpgroup == 0) {
    registers_decrease<hopper_producer_registers(kTiles)>();
    const PrefillBlock block = prefill_block(p, kTileQ, kTileK, p.v_slice_shift);
    const int head = block.head, batch = block.batch, kv_head = block.kv_head, q0 = block.q0;
    const int tile_begin = block.tile_begin, num_tiles = block.num_tiles;
    // Order: Q, then K and V of each tile, each as soon as its stage is free.
    // Rows past the tensor's end and columns past the real head dim arrive
    // as zeros.
    const int v_column0 = v_slice(p).column0;
    if (tma) {
      if (threadIdx.x != 0) return;
      // One box per 64-column panel; trace_phase: key tile `tile`'s stamp
      // in the phase trace (trace.h), -1 none.
      auto load = [&](const TileMap& map, uint32_t destination, uint32_t barrier, uint32_t bytes,
                      int columns, int rows, int row0, int head_index, int column0, int tile,
                      int trace_phase) {
        if (trace_phase >= 0) trace_stamp(p, 0, tile, trace_phase);
        barrier_expect_bytes(barrier, bytes);
#pragma unroll
        for (int panel = 0; panel * 64 < columns; ++panel)
          tma_load_4d(destination + panel * rows * 128, &map.map, barrier, column0 + panel * 64,
                      row0, head_index * map.head_step, batch * map.batch_step);
      };
      load(maps.q, shared_q, q_barrier, kQBytes, kDqk, kTileQ, q0, head, 0, 0, -1);
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int key0 = (tile_begin + tile) * kTileK;
        load(maps.k, shared_k + Ring::stage(tile) * kKBytes, k_ring.producer_acquire(tile), kKBytes,
             kDqk, kTileK, key0, kv_head, 0, tile, 0);
        load(maps.v, shared_v + Ring::stage(tile) * kVBytes, v_ring.producer_acquire(tile), kVBytes,
             kDv, kTileK, key0, kv_head, v_column0, tile, 1);
      }
    } else if constexpr (kStaged) {
      // Q, then each K and V tile through staging buffer 0 (Q, the V tiles)
      // or 1 (the K tiles), each copy issued one use ahead of moving its rows
      // into place (thread t moves row t); then every thread arrives on the
      // use's barrier. A use is staged packed (one copy, by thread 0) where
      // its operand's rows are contiguous (PrefillParams::staged_packed),
      // else a copy per row. Indices and offsets are worked out anew for
      // each use (fresh_*, opaque): hoisted out of the loop, they held
      // registers that the shift needs.
      constexpr uint32_t kBufferBytes = 128 * kStagingPitch;
      constexpr int kBytes = static_cast<int>(sizeof(T));
      const MaskSemantics& sem = p.semantics;
      const uint32_t buffer0 = staging, buffer1 = staging + kBufferBytes;
      // Stages rows [row0, row0 + rows) of an operand (`first`: row 0 of
      // its head, `stride` in elements, `packed` its bit) into `buffer`;
      // returns what `staged_row_of` needs: packed, rows * 16 + the tile's
      // offset; else this thread's row bytes * 16 + its offset.
      auto stage = [&](uint32_t buffer, uint32_t barrier, const char* first, int64_t stride,
                       int row0, int rows, int row_bytes, const char* limit, bool packed) {
        const int t = fresh_thread_index() % 128;
        const char* start = first + kBytes * (row0 + (packed ? 0 : t)) * stride;
        if (packed) {
          // Every thread is done reading the buffer's last use.
          fence_async_shared();
          named_barrier_sync(3, 128);
          const int offset =
              stage_span(buffer, t == 0 ? start : nullptr, rows * row_bytes, limit, barrier);
          return rows * 16 +
                 (t == 0 ? offset : static_cast<int>(reinterpret_cast<uintptr_t>(start) & 15));
        }
        const bool mine = t < rows;
        const int offset = stage_span(buffer + static_cast<uint32_t>(t) * kStagingPitch,
                                      mine ? start : nullptr, row_bytes, limit, barrier);
        return (mine ? row_bytes * 16 : 0) + offset;
      };
      auto staged_row_of = [&](uint32_t buffer, int staged, int row_bytes, bool packed) {
        const int t = fresh_thread_index() % 128;
        if (packed) return packed_row(buffer, staged & 15, staged >> 4, row_bytes, t);
        return StagedRow{buffer + static_cast<uint32_t>(t) * kStagingPitch, staged & 15,
                         staged >> 4};
      };
      auto key_rows = [&](int tile) {
        return max(0, min(kTileK, static_cast<int>(sem.len_k) - (tile_begin + tile) * kTileK));
      };
      auto stage_k = [&](int tile) {
        const int64_t b = fresh_block_index_z(), h = opaque(kv_head);
        return stage(
            buffer1, staging_barriers + 8,
            static_cast<const char*>(p.k) + kBytes * (b * p.k_strides.outer + h * p.k_strides.head),
            p.k_strides.row, (tile_begin + tile) * kTileK, key_rows(tile), kBytes * p.head_dim_qk,
            p.k_end, (p.staged_packed & 2) != 0);
      };
      auto stage_v = [&](int tile) {
        const int64_t b = fresh_block_index_z(), h = opaque(kv_head);
        const int column0 = v_slice(p).column0;
        return stage(buffer0, staging_barriers,
                     static_cast<const char*>(p.v) +
                         kBytes * (b * p.v_strides.outer + h * p.v_strides.head + column0),
                     p.v_strides.row, (tile_begin + tile) * kTileK, key_rows(tile),
                     kBytes * (p.head_dim_v - column0), p.v_end, (p.staged_packed & 4) != 0);
      };
      const int q_staged =
          stage(buffer0, staging_barriers,
                static_cast<const char*>(p.q) +
                    kBytes * (batch * p.q_strides.batch + head * p.q_strides.head),
                p.q_strides.row, q0, max(0, min(kTileQ, static_cast<int>(sem.len_q) - q0)),
                kBytes * p.head_dim_qk, p.q_end, (p.staged_packed & 1) != 0);
      int k_staged = num_tiles > 0 ? stage_k(0) : 0;
      barrier_wait(staging_barriers, 0);
      unstage_row_swizzle128<kTileQ, kDqk>(
          shared_q,
          staged_row_of(buffer0, q_staged, kBytes * p.head_dim_qk, (p.staged_packed & 1) != 0),
          fresh_thread_index() % 128);
      barrier_arrive(q_barrier);
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int v_staged = stage_v(tile);
        const int t = fresh_thread_index() % 128;
        barrier_wait(staging_barriers + 8, static_cast<uint32_t>(tile) & 1u);
        const uint32_t k_full = k_ring.producer_acquire(tile);
        if (t < kTileK)
          unstage_row_swizzle128<kTileK, kDqk>(
              shared_k + Ring::stage(tile) * kKBytes,
              staged_row_of(buffer1, k_staged, kBytes * p.head_dim_qk, (p.staged_packed & 2) != 0),
              t);
        barrier_arrive(k_full);
        if (tile + 1 < num_tiles) k_staged = stage_k(tile + 1);
        barrier_wait(staging_barriers, static_cast<uint32_t>(tile + 1) & 1u);
        const uint32_t v_full = v_ring.producer_acquire(tile);
        if (t < kTileK)
          unstage_row_swizzle128<kTileK, kDv>(
              shared_v + Ring::stage(tile) * kVBytes,
              staged_row_of(buffer0, v_staged, kBytes * (p.head_dim_v - v_slice(p).column0),
                            (p.staged_packed & 4) != 0),
              t);
        barrier_arrive(v_full);
      }
    } else {
      // 8- or 4-byte pieces by all 128 threads, each arriving once per use.
      const MaskSemantics& sem = p.semantics;
      auto operand = [&](const void* base, int64_t batch_stride, int64_t head_stride,
                         int head_index) {
        return static_cast<const T*>(base) + batch * batch_stride + head_index * head_stride;
      };
      auto produce = [&](auto width) {
        constexpr int kWidth = decltype(width)::value;
        copy_tile_swizzle128_narrow<kTileQ, kDqk, kWidth>(
            shared_q, operand(p.q, p.q_strides.batch, p.q_strides.head, head), p.q_strides.row, q0,
            static_cast<int>(sem.len_q), p.head_dim_qk);
        cp_async_arrive(q_barrier);
        for (int tile = 0; tile < num_tiles; ++tile) {
          const int key0 = (tile_begin + tile) * kTileK;
          const uint32_t k_full = k_ring.producer_acquire(tile);
          copy_tile_swizzle128_narrow<kTileK, kDqk, kWidth>(
              shared_k + Ring::stage(tile) * kKBytes,
              operand(p.k, p.k_strides.outer, p.k_strides.head, kv_head), p.k_strides.row, key0,
              static_cast<int>(sem.len_k), p.head_dim_qk);
          cp_async_arrive(k_full);
          const uint32_t v_full = v_ring.producer_acquire(tile);
          copy_tile_swizzle128_narrow<kTileK, kDv, kWidth>(
              shared_v + Ring::stage(tile) * kVBytes,
              operand(p.v, p.v_strides.outer, p.v_strides.head, kv_head) + v_column0,
              p.v_strides.row, key0, static_cast<int>(sem.len_k), p.head_dim_v - v_column0);
          cp_async_arrive(v_full);
        }
      };
      if (p.copy_bytes == 8)
        produce(std::integral_constant<int, 8>{});
      else  // 4: the launch refuses any other width
        produce(std::integral_constant<int, 4>{});
    }
    return;
  }
  registers_increase<hopper_consumer_registers(kTiles)>();
  const PrefillBlock block = prefill_block(p, kTileQ, kTileK, p.v_slice_shift);
  const int head = block.head, batch = block.batch, q0 = block.q0;
  const int tile_begin = block.tile_begin, num_tiles = block.num_tiles;

  const int consumer = warpgroup - 1;
  const int role = 1 + consumer;                            // in the phase trace (trace.h)
  const int warp = static_cast<int>(threadIdx.x) / 32 - 4;  // among the consumers' 8
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int group = lane / 4;
  const int quad = lane % 4;
  const MaskSemantics& sem = p.semantics;
  const DeviceKeyRange first_range = block.first_range, last_range = block.last_range;

  // Row of this thread's accumulator half r (one 16-row tile per warp).
  auto row_of = [&](int, int r) { return q0 + warp * 16 + group + 8 * r; };

  // Turns: consumer c waits for barrier 1 + c and passes the turn on
  // barrier 2 - c. Consumer 0 goes first; each takes num_tiles + 1 turns, and
  // consumer 1's first pass (before it starts) and its passes after every
  // turn but its last make up consumer 0's num_tiles + 1.
  auto take_turn = [&] { named_barrier_sync(1 + consumer, kConsumerThreads); };
  auto pass_turn = [&] { named_barrier_arrive(2 - consumer, kConsumerThreads); };

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
  const uint64_t q_descriptor = swizzle128_descriptor(shared_q + consumer * 64 * 128, 16, 1024);
  const uint64_t k_descriptor = swizzle128_descriptor(shared_k, 16, 1024);
  const uint64_t v_descriptor = swizzle128_descriptor(shared_v, kTileK * 128, 1024);

  // S = Q K^T of `tile`, issued (not waited for).
  float s[1][kKeyTiles][4];
  auto issue_scores = [&](int tile) {
    const uint32_t stage = Ring::stage(tile) * kKBytes;
    const uint64_t q_base = opaque(q_descriptor), k_base = opaque(k_descriptor);
    k_ring.consumer_wait(tile);
    if (!tma) fence_async_shared();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      const uint32_t q_offset = (kk / 4) * kTileQ * 128 + (kk % 4) * 32;
      const uint32_t k_offset = stage + (kk / 4) * kTileK * 128 + (kk % 4) * 32;
      wgmma_ss<T, kTileK>(s[0], q_base + (q_offset >> 4), k_base + (k_offset >> 4), kk > 0);
    }
    wgmma_commit();
  };
  // O += P V of `tile`, issued.
  auto issue_output = [&](int tile) {
    const uint32_t stage = Ring::stage(tile) * kVBytes;
    const uint64_t v_base = opaque(v_descriptor);
    v_ring.consumer_wait(tile);
    if (!tma) fence_async_shared();
    pin_registers(pa);
    pin_registers(o[0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk)
      wgmma_rs<T, kDv>(o[0], pa[kk], v_base + ((stage + kk * 16 * 128) >> 4), 1);
    wgmma_commit();
  };
  // Softmax of the scores of `tile` (waited for); P into pa once O is free.
  // P V of the previous tile may still be running: O is rescaled only after
  // it completes.
  auto softmax_to_p = [&](int tile) {
    const int k0 = (tile_begin + tile) * kTileK;
    const bool need_mask = tile_needs_mask<kKeyTiles>(sem, k0, first_range, last_range);
    float correction[1][2];
    const bool rescale = softmax_tile<kSoftCap>(s, row_max, row_sum, correction, p, need_mask,
                                                row_of, k0, quad, batch, head);
    pin_registers(s[0]);  // the softmax is done before the wait below, not after
    trace_stamp(p, role, tile, kTraceSoftmax);
    wgmma_wait<0>();
    pin_registers(o[0]);
    if (rescale) rescale_output(o, correction);
    trace_stamp(p, role, tile, kTraceOutput);
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) p_fragment<T>(pa[kk], s[0], kk);
    trace_stamp(p, role, tile, kTraceP);
  };

  // Tile 0 (no P V to issue yet) apart from the loop: a branch between a
  // wgmma's issue and its wait makes ptxas serialize the wgmmas (C7514).
  barrier_wait(q_barrier, 0);
  if (num_tiles > 0) {
    trace_stamp(p, role, 0, kTraceTop);
    if (consumer == 1) pass_turn();
    take_turn();
    trace_stamp(p, role, 0, kTraceTurn);
    issue_scores(0);
    pass_turn();
    trace_stamp(p, role, 0, kTraceIssued);
    wgmma_wait<0>();
    pin_registers(s[0]);
    trace_stamp(p, role, 0, kTraceScores);
    k_ring.consumer_release(0);
    softmax_to_p(0);
  }
  for (int it = 1; it < num_tiles; ++it) {
    trace_stamp(p, role, it, kTraceTop);
    take_turn();
    trace_stamp(p, role, it, kTraceTurn);
    issue_scores(it);
    issue_output(it - 1);
    pass_turn();
    trace_stamp(p, role, it, kTraceIssued);
    wgmma_wait<1>();  // the scores; P V may still run
    pin_registers(s[0]);
    trace_stamp(p, role, it, kTraceScores);
    k_ring.consumer_release(it);
    softmax_to_p(it);
    v_ring.consumer_release(it - 1);
  }
  if (num_tiles > 0) {
    take_turn();
    issue_output(num_tiles - 1);
    if (consumer == 0) pass_turn();
    wgmma_wait<0>();
    pin_registers(o[0]);
    v_ring.consumer_release(num_tiles - 1);
  }

  store_rows<T>(o, row_max, row_sum, p, block, v_slice(p), row_of, quad);
#endif  // FSDPA_WGMMA_ARCH
}

// Checks the compiled limits, builds the tensor maps, then launches one
// (bucket, dtype) kernel.
template <int kDqk, int kDv, typename T>
void launch_prefill_hopper(const PrefillParams& params, cudaStream_t stream) {
  const HopperLoad load = hopper_load(params.copy_bytes, kDqk, kDv);
  if (load == HopperLoad::None)
    throw Error("fsdpa: internal: cuda_fused_prefill_hopper launched for " +
                std::to_string(params.copy_bytes) + "-byte rows of bucket " + std::to_string(kDqk) +
                "/" + std::to_string(kDv) + ", which no load stage copies");
  const int shared_bytes = hopper_shared_bytes(kDqk, kDv, load);
  const bool softcap = params.semantics.softcap > 0.0f;
  auto kernel_function = softcap ? &prefill_hopper_kernel<kDqk, kDv, T, true, false>
                                 : &prefill_hopper_kernel<kDqk, kDv, T, false, false>;
  // The staged instances exist for the pairs whose staging fits.
  if constexpr (hopper_shared_bytes(kDqk, kDv, HopperLoad::Staged) <= kSm90SharedBytes)
    if (load == HopperLoad::Staged)
      kernel_function = softcap ? &prefill_hopper_kernel<kDqk, kDv, T, true, true>
                                : &prefill_hopper_kernel<kDqk, kDv, T, false, true>;
  const void* kernel = reinterpret_cast<const void*>(kernel_function);
  prepare_launch(kernel, kHopperThreads, static_cast<size_t>(shared_bytes),
                 "cuda_fused_prefill_hopper");
  const MaskSemantics& sem = params.semantics;
  PrefillParams launched = params;
  launched.hopper_load = static_cast<int>(load);
  launched.staged_packed =
      (params.q_strides.row == params.head_dim_qk ? 1 : 0) |
      (params.k_strides.row == params.head_dim_qk ? 2 : 0) |
      (params.v_strides.row == params.head_dim_v && params.v_slice_shift == 0 ? 4 : 0);
  // Tensor maps only for the TMA stage; the others read the pointers and
  // strides of the parameters.
  PrefillMaps maps{};
  if (load == HopperLoad::Tma)
    maps = {
        make_swizzle128_map(params.q, params.batch, params.heads_q, sem.len_q, params.head_dim_qk,
                            {params.q_strides.batch, params.q_strides.head, params.q_strides.row},
                            kHopperTileQ),
        make_swizzle128_map(params.k, params.batch, params.heads_kv, sem.len_k, params.head_dim_qk,
                            {params.k_strides.outer, params.k_strides.head, params.k_strides.row},
                            hopper_tile_k(kDqk, kDv)),
        make_swizzle128_map(params.v, params.batch, params.heads_kv, sem.len_k, params.head_dim_v,
                            {params.v_strides.outer, params.v_strides.head, params.v_strides.row},
                            hopper_tile_k(kDqk, kDv))};
  const int64_t q_blocks = (sem.len_q + kHopperTileQ - 1) / kHopperTileQ;
  const dim3 grid(static_cast<unsigned>(q_blocks << params.v_slice_shift),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  kernel_function<<<grid, kHopperThreads, shared_bytes, stream>>>(launched, maps);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fsdpa::detail::cuda
