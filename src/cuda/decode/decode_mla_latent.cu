// The alternating-tile MLA kernel (sm_90a) and its selection-table row:
// DeepSeek's 576/512 latent cache (v the first 512 columns of k), dense or
// paged, as decode_mla.cu's kernel serves it, in another schedule. The
// prefill family's MLA row (query runs past the decode limit) runs it: there
// a block's key loop is long, and it measured faster; on decode's short
// loops (a few tiles a split) it measured slower, so decode keeps
// decode_mla.cu's kernel (bench/NOTES.md, session 48).
//
// One block owns 64 packed query rows and one key split. Keys come in tiles
// of 64 (all 9 panels of 64 columns) into two buffers: tile 2j into buffer
// 0, tile 2j + 1 into buffer 1 (pair j). Warpgroup w computes S = Q K^T of
// the tile in buffer w (m64n64k16, both operands in shared memory) and its
// softmax, so one warpgroup's softmax runs while the other's products keep
// the tensor cores busy. Both keep one running row max, agreed through
// shared memory once a pair: warpgroup 0 moves it with tile 2j, warpgroup
// 1 with tile 2j + 1 after it, and warpgroup 0 then takes P of its tile
// down to that max. Each warpgroup accumulates 256 of O's 512 columns over
// both tiles: P V of its own tile with P from registers, of the other
// tile with the other's P from shared memory, where it lies over the
// tile's last panel (K's columns 512..575, which V does not read).
//
// No producer warp: one mbarrier per panel of each buffer, and each
// warpgroup's first thread refills the panels its products finished with
// (its V columns of its own tile after its first P V; its V columns and
// the P panel of the other's tile after its second). S of a tile takes the
// panels its own warpgroup refilled first, so neither waits for the other
// before it has issued its own copies.
//
// The epilogue is the MLA kernels' (decode_mla_common.cuh): out and LSE, a
// split's partial, or split pairs merged in a two-block cluster.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/kv_cache.h"
#include "core/tensor.h"
#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_host.h"
#include "cuda/decode/decode_launch.h"
#include "cuda/decode/decode_mla_common.cuh"
#include "cuda/prefill/tile_softmax.cuh"

namespace fsdpa::detail::cuda {

namespace {

using namespace mla;

// The kernel's device code: for sm_90a, in a build of the 576/512 bucket
// (kMlaLatentBuilt; else no instance exists and these would be unused).
#if FSDPA_WGMMA_ARCH && defined(FSDPA_BUILT_DECODE_576x512)
#define FSDPA_ALTERNATING_MLA_CODE 1
#else
#define FSDPA_ALTERNATING_MLA_CODE 0
#endif

#if FSDPA_ALTERNATING_MLA_CODE
constexpr int kTileK = kMlaAlternatingTileK;
constexpr int kPanels = kMlaAlternatingPanels;
constexpr uint32_t kPanelBytes = kMlaAlternatingPanelBytes;
constexpr int kHalfDv = kMlaHeadDimV / 2;  // a warpgroup's columns of O
constexpr int kVPanels = kHalfDv / 64;     // its panels of a tile
constexpr int kOutTiles = kHalfDv / 8;
constexpr int kKeyTiles = kTileK / 8;  // 8-key tiles of S
constexpr int kKSteps = kTileK / 16;   // k-steps of P V
constexpr int kPPanel = kPanels - 1;   // where a tile's P lies: K's columns V does not read
static_assert(kPPanel == 2 * kVPanels, "V is the tile's first 8 panels, P over the 9th");

// P of the warpgroup's tile (its register A fragments) into the 128-byte
// swizzled panel at shared address `panel`, the layout of a K-major wgmma A
// operand: row r, 16-byte chunk c at r * 128 + (c ^ (r % 8)) * 16. Each
// store instruction's 32 lanes hit 32 distinct banks.
__device__ __forceinline__ void store_p_panel(const uint32_t (&pa)[kKSteps][4], uint32_t panel,
                                              int warp, int group, int quad) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t row = panel + (warp * 16 + group + 8 * h) * 128 + 4 * quad;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int chunk = 2 * kk + half;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(row + ((chunk ^ group) * 16)),
                     "r"(pa[kk][2 * half + h])
                     : "memory");
      }
  }
}
#endif  // FSDPA_ALTERNATING_MLA_CODE

// kBoxes: 0 where k is dense, else k is a page pool read through the block
// table, each panel of a tile in kBoxes boxes of 64 / kBoxes rows of one page
// (mla_alternating_tile_boxes). kList: the blocks are a list of splits over
// the batch's lengths (decode_block). kPairOut: split pairs of the only two
// splits, which write out themselves (store_pair_merged). Template
// parameters for the reasons decode_mla.cu's kernel has them.
template <typename T, int kBoxes, bool kList, bool kPairOut>
__global__ void __launch_bounds__(kMlaThreads, 1)
    alternating_mla_kernel(const DecodeParams p, const __grid_constant__ TileMap k_map,
                           const __grid_constant__ TileMap q_map, int q_by_tma) {
#if FSDPA_ALTERNATING_MLA_CODE
  using namespace decode_kernel;
  using prefill_impl::p_fragment;
  using prefill_impl::rescale_output;
  using prefill_impl::row_tile_max;
  using prefill_impl::ScaledScores;
  using prefill_impl::softmax_row;

  extern __shared__ unsigned char shared_raw[];
  const uint32_t raw_address = shared_address(shared_raw);
  const uint32_t shared_q = (raw_address + 1023u) & ~1023u;
  unsigned char* const q_ptr = shared_raw + (shared_q - raw_address);
  constexpr uint32_t kBufferBytes = kPanels * kPanelBytes;
  const uint32_t shared_k = shared_q + kBufferBytes;  // buffer u at shared_k + u * kBufferBytes
  // The running max after a pair's first tile (written by warpgroup 0) and
  // after its second (warpgroup 1): two slots, so that no thread writes a
  // value its warp's other lanes may still be reading.
  float* const max_a_s = reinterpret_cast<float*>(q_ptr + 3 * kBufferBytes);
  float* const max_b_s = max_a_s + kMlaRows;
  float2* const stats_s = reinterpret_cast<float2*>(max_b_s + kMlaRows);   // 2 x 64
  float* const sums_s = reinterpret_cast<float*>(stats_s + 2 * kMlaRows);  // warpgroup 1's
  const uint32_t barriers = shared_address(sums_s + kMlaRows);
  // Panel `panel` of buffer u is full: one arrival and the panel's bytes;
  // use j (pair j) is its (j % 2)-th phase.
  auto panel_full = [&](int buffer, int panel) {
    return barriers + 8u * static_cast<uint32_t>(buffer * kPanels + panel);
  };
  const uint32_t q_full = barriers + 8u * 2 * kPanels;
  // A pair's hand-offs between the warpgroups, each a phase a pair that all
  // 128 threads of one warpgroup complete: warpgroup 0's row max after tile
  // 2j written (max_a), warpgroup 1's after tile 2j + 1 (max_b); P of tile
  // 2j stored (p_a), of tile 2j + 1 (p_b). Neither side can run two pairs
  // ahead of the other's wait (each arrival follows a wait on the other).
  const StageBarriers<1> max_a(q_full + 8), max_b(q_full + 16), p_a(q_full + 24), p_b(q_full + 32);

  // Through a shuffle, so that ptxas knows the warpgroup is the same in every
  // lane of a warp (uniform branches, descriptors in uniform registers).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int thread = static_cast<int>(threadIdx.x) % 128;  // in the warpgroup
  const int warp = thread / 32, lane = thread % 32, group = lane / 4, quad = lane % 4;
  const bool copier = thread == 0;  // issues the warpgroup's refills

  const MlaBlock mla_blk = mla_block<kList>(p);
  if (!mla_blk.runs) return;
  const DecodeBlock& blk = mla_blk.blk;
  const BlockKeys keys = block_keys(p, blk);
  // Tiles start on multiples of 64 keys (the plan's split multiple): on a
  // paged cache a panel of a tile is then one box a page it spans. The keys
  // before keys.begin that the first tile takes are of no row's range. The
  // tiles come in pairs; the second tile of the last pair may lie past the
  // block's keys (masked as any key past them).
  constexpr bool paged = kBoxes > 0;
  constexpr int kTileBoxes = paged ? kBoxes : 1;
  constexpr int kBoxKeys = kTileK / kTileBoxes;
  static_assert(kTileK % kTileBoxes == 0 && kBoxKeys % 8 == 0);
  const int first_key = keys.begin - keys.begin % kTileK;
  const int num_tiles = keys.end > keys.begin ? (keys.end - first_key + kTileK - 1) / kTileK : 0;
  const int num_pairs = (num_tiles + 1) / 2;

  const uint32_t columns = paged ? table_columns(p) : 0;
  // Panels [first, first + count) of tile t into buffer t % 2 (keys past
  // the tensor's or page's end and columns past the head dim as zeros).
  auto load_panels = [&](int tile, int first, int count) {
    const int buffer = tile % 2;
    const TilePages<kTileBoxes> pages =
        paged ? tile_pages<kTileBoxes>(p, blk.batch, first_key + tile * kTileK, columns)
              : TilePages<kTileBoxes>{};
    for (int panel = first; panel < first + count; ++panel) {
      const uint32_t destination = shared_k + buffer * kBufferBytes + panel * kPanelBytes;
      const uint32_t full = panel_full(buffer, panel);
      barrier_expect_bytes(full, kPanelBytes);
      if constexpr (!paged) {
        tma_load_4d(destination, &k_map.map, full, panel * 64, first_key + tile * kTileK,
                    blk.kv_head * k_map.head_step, blk.batch * k_map.batch_step);
      } else {
#pragma unroll
        for (int box = 0; box < kTileBoxes; ++box)
          tma_load_4d(destination + box * kBoxKeys * 128, &k_map.map, full, panel * 64, pages.row,
                      blk.kv_head * k_map.head_step, pages.page[box]);
      }
    }
  };

  if (threadIdx.x == 0) {
    for (int buffer = 0; buffer < 2; ++buffer)
      for (int panel = 0; panel < kPanels; ++panel) barrier_init(panel_full(buffer, panel));
    barrier_init(q_full);
    max_a.init(128), max_b.init(128), p_a.init(128), p_b.init(128);
    barrier_init_fence();
    if (q_by_tma) barrier_expect_bytes(q_full, kPanels * kPanelBytes);
  }
  wait_for_previous_kernel();  // global memory from here on
  // Tile 0 and Q first, tile 1 once Q is in (decode_mla.cu: Q's reads are
  // not held back behind every block's first tiles).
  if (threadIdx.x == 0 && num_pairs > 0) load_panels(0, 0, kPanels);
  if (!q_by_tma) {
    load_q<T, kPanels>(p, blk, shared_q);
    cp_async_wait<0>();
    fence_async_shared();  // for wgmma's reads
  } else if (threadIdx.x == 0) {
    // The box of 64 / Lq heads x Lq query rows is the block's 64 packed rows.
    const int head = (blk.kv_head * p.kv_group_size + blk.row0 / p.len_q) * q_map.head_step;
    for (int panel = 0; panel < kPanels; ++panel)
      tma_load_4d(shared_q + panel * kPanelBytes, &q_map.map, q_full, panel * 64, 0, head,
                  blk.batch * q_map.batch_step);
  }
  __syncthreads();  // barriers initialized (and Q in place by cp.async)
  if (q_by_tma) barrier_wait(q_full, 0);
  if (threadIdx.x == 0 && num_pairs > 0) load_panels(1, 0, kPanels);

  // This warpgroup's tiles are in buffer `own`; the other's in `other`.
  const int own = warpgroup, other = 1 - warpgroup;
  const uint32_t own_buffer = shared_k + own * kBufferBytes;
  const uint32_t other_buffer = shared_k + other * kBufferBytes;
  // The panels of its own tile this warpgroup's products read for V (its
  // columns): the ones it refills itself, and S takes them first.
  const int own_first_panel = warpgroup * kVPanels;

  // Descriptors, made where they are used from opaque bases (else the 36
  // k-steps' descriptors of S, loop invariants, stay live across the key
  // loop). K-major Q, K and P: 8-row groups 1024 bytes apart, 32 bytes a
  // k-step in a panel. N-major V (this warpgroup's columns): panels
  // kPanelBytes apart, 8-key groups 1024 apart.
  const uint64_t q_descriptor = swizzle128_descriptor(shared_q, 0, 1024);
  const uint64_t own_descriptor = swizzle128_descriptor(own_buffer, 0, 1024);
  const uint64_t other_descriptor = swizzle128_descriptor(other_buffer, 0, 1024);
  const uint64_t own_v_descriptor =
      swizzle128_descriptor(own_buffer + own_first_panel * kPanelBytes, kPanelBytes, 1024);
  const uint64_t other_v_descriptor =
      swizzle128_descriptor(other_buffer + own_first_panel * kPanelBytes, kPanelBytes, 1024);
  // A descriptor `bytes` on from `descriptor`'s address.
  auto at = [](uint64_t descriptor, uint32_t bytes) { return opaque(descriptor) + (bytes >> 4); };

  float o[1][kOutTiles][4];  // the first P V overwrites them
  float s[1][kKeyTiles][4];
  uint32_t pa[kKSteps][4];
  float row_max[1][2] = {{kMinusInf, kMinusInf}};  // the agreed running max (reference)
  float row_sum[1][2] = {{0.f, 0.f}};              // this warpgroup's tiles' sums against row_max

  // S of this warpgroup's tile of pair j, panels [from, to) in its order:
  // its own refills first (panels own_first_panel.. + 4), then the other
  // four V panels, then the P panel. A fence and a commit group per panel,
  // after the panel's wait (one fence before the waits made ptxas serialize
  // the wgmma: C7520).
  auto issue_scores = [&](int pair, int from, int to) {
    for (int i = from; i < to; ++i) {
      const int panel = i < 2 * kVPanels ? (i + own_first_panel) % (2 * kVPanels) : kPPanel;
      barrier_wait(panel_full(own, panel), static_cast<uint32_t>(pair) & 1u);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_ss<T, kTileK>(s[0], at(q_descriptor, panel * kPanelBytes + kk * 32),
                            at(own_descriptor, panel * kPanelBytes + kk * 32), i > 0 || kk > 0);
      wgmma_commit();
    }
  };

  const bool has_mask = p.semantics.mask_kind != 0;
  const int row0 = warp * 16 + group;  // this thread's rows: row0 and row0 + 8
  if (num_pairs > 0) issue_scores(0, 0, kPanels);
  for (int pair = 0; pair < num_pairs; ++pair) {
    wgmma_wait<0>();  // S of this warpgroup's tile (and every P V before it)
    pin_registers(s[0]);
    pin_registers(o[0]);
    const int k0 = first_key + (2 * pair + own) * kTileK;
    // Into the exp2 domain; mask (and soft-cap) unless every row sees every
    // key of the tile and no cap applies.
    const bool full_tile = !has_mask && p.softcap_log2 == 0.f && k0 >= keys.common_begin &&
                           k0 + kTileK <= keys.common_end;
    if (!full_tile) {
      // The rows' ranges found here, not before the loop: registers are short.
      const int2 range[2] = {row_keys(p, blk, row0), row_keys(p, blk, row0 + 8)};
      const int64_t mask_row[2] = {has_mask ? row_mask_offset(p, blk, row0) : 0,
                                   has_mask ? row_mask_offset(p, blk, row0 + 8) : 0};
      mask_scores(p, s[0], k0, keys.end, range, mask_row, has_mask, quad);
    }
    const ScaledScores map{full_tile ? p.scale_log2 : 1.f};
    // O's factor this pair (from the max before it to the agreed one after it).
    float factor[1][2];
    bool moved = false;
    if (warpgroup == 0) {
      // Tile 2j moves the max first; then tile 2j + 1's (warpgroup 1) is the agreed one,
      // and P of 2j, its sum and O's factor come down to it.
#pragma unroll
      for (int h = 0; h < 2; ++h)
        softmax_row(s, 0, h, row_tile_max(s, 0, h, map), row_max, row_sum, factor, map, moved);
      if (quad == 0) max_a_s[row0] = row_max[0][0], max_a_s[row0 + 8] = row_max[0][1];
      max_a.arrive(pair);
      max_b.wait(pair);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float agreed = max_b_s[row0 + 8 * h];
        if (agreed != row_max[0][h]) {
          const float down = fast_exp2(row_max[0][h] - agreed);
#pragma unroll
          for (int n = 0; n < kKeyTiles; ++n) s[0][n][2 * h] *= down, s[0][n][2 * h + 1] *= down;
          row_sum[0][h] *= down;
          factor[0][h] *= down;
          row_max[0][h] = agreed;
          moved = true;
        }
      }
    } else {
      // The max after tile 2j is this tile's reference: this warpgroup's sum
      // comes to it first, then tile 2j + 1 moves it (softmax_row).
      max_a.wait(pair);
      float to_a[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float after_a = max_a_s[row0 + 8 * h];
        to_a[h] = after_a != row_max[0][h] ? fast_exp2(row_max[0][h] - after_a) : 1.f;
        row_sum[0][h] *= to_a[h];
        row_max[0][h] = after_a;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        softmax_row(s, 0, h, row_tile_max(s, 0, h, map), row_max, row_sum, factor, map, moved);
        factor[0][h] *= to_a[h];
        moved |= to_a[h] != 1.f;
      }
      if (quad == 0) max_b_s[row0] = row_max[0][0], max_b_s[row0 + 8] = row_max[0][1];
      max_b.arrive(pair);
    }
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) p_fragment<T>(pa[kk], s[0], kk);
    store_p_panel(pa, own_buffer + kPPanel * kPanelBytes, warp, group, quad);
    fence_async_shared();  // P's stores before the other warpgroup's wgmma reads them
    (warpgroup == 0 ? p_a : p_b).arrive(pair);
    if (pair > 0 && __any_sync(0xffffffffu, moved)) rescale_output(o, factor);

    // P V of this warpgroup's tile (P from registers), then of the other's
    // (P from shared memory once the other warpgroup stored it).
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      wgmma_rs<T, kHalfDv>(o[0], pa[kk], at(own_v_descriptor, kk * 16 * 128), pair > 0 || kk > 0);
    wgmma_commit();
    (warpgroup == 0 ? p_b : p_a).wait(pair);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      wgmma_ss_nmajor<T, kHalfDv>(o[0], at(other_descriptor, kPPanel * kPanelBytes + kk * 32),
                                  at(other_v_descriptor, kk * 16 * 128), 1);
    wgmma_commit();

    if (pair + 1 < num_pairs) {
      // This warpgroup's V panels of its own tile are free once its first P V
      // completed: refill them, then issue S of the next tile on them.
      wgmma_wait<1>();
      if (copier) load_panels(2 * (pair + 1) + own, own_first_panel, kVPanels);
      issue_scores(pair + 1, 0, kVPanels);
      // Its second P V (kVPanels S groups committed since): the other
      // tile's panels it read (its V columns, and the P panel) are free.
      wgmma_wait<kVPanels>();
      if (copier) {
        load_panels(2 * (pair + 1) + other, own_first_panel, kVPanels);
        load_panels(2 * (pair + 1) + other, kPPanel, 1);
      }
      issue_scores(pair + 1, kVPanels, kPanels);
    }
  }
  wgmma_wait<0>();
  pin_registers(o[0]);
  if (num_pairs == 0) {  // no key: zero rows, (max, sum) = (-inf, 0)
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][n][e] = 0.f;
  }

  // ---- epilogue: each row's (max, sum of both warpgroups' tiles) through
  // shared memory, then the MLA kernels' stores.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = quad_sum(row_sum[0][h]);
    if (quad == 0) {
      if (warpgroup == 0)
        stats_s[row0 + 8 * h] = make_float2(row_max[0][h], sum);
      else
        sums_s[row0 + 8 * h] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x < kMlaRows) stats_s[threadIdx.x].y += sums_s[threadIdx.x];
  __syncthreads();
  if (staged_partials(p)) {
    // Every wgmma and TMA use of the buffers is complete (waited above).
    fence_async_shared();
    float* const staging = reinterpret_cast<float*>(q_ptr + kBufferBytes);
    if (mla_blk.pairs)
      store_pair_merged<T, kPairOut, kHalfDv>(p, blk, o[0], stats_s, staging, stats_s + kMlaRows,
                                              warpgroup, warp, group, quad);
    else
      store_partial_staged<kHalfDv>(p, blk, o[0], stats_s, staging, warpgroup, warp, group, quad);
  } else {
    const bool bad = store_rows<T, kHalfDv>(p, blk, o[0], stats_s, warpgroup, warp, group, quad);
    if (p.num_splits == 1) decode_kernel::repair_block_rows<T>(p, blk, bad);
  }
#endif  // FSDPA_ALTERNATING_MLA_CODE
}

// The staged rows (64 x (2 x 256 + 8) floats) fit the two buffers.
static_assert(size_t{kMlaRows} * mla_staged_row(kMlaHeadDimV / 2) * 4 <=
              2 * kMlaAlternatingPanels * kMlaAlternatingPanelBytes);

using AlternatingKernel = void (*)(DecodeParams, TileMap, TileMap, int);

template <typename T, int kBoxes>
AlternatingKernel alternating_kernel(bool list, bool pair_out) {
  if (list) return alternating_mla_kernel<T, kBoxes, true, false>;
  return pair_out ? alternating_mla_kernel<T, kBoxes, false, true>
                  : alternating_mla_kernel<T, kBoxes, false, false>;
}

// The kernel for a panel's box count (0: dense), with or without a list.
template <typename T>
AlternatingKernel alternating_kernel(int boxes, bool list, bool pair_out) {
  return latent_instance<AlternatingKernel, 0, 1, 2, 4, 8>(
      "the alternating MLA kernel", boxes,
      [&]<int kBoxes>() { return alternating_kernel<T, kBoxes>(list, pair_out); });
}

template <typename T>
void launch_alternating(const DecodeParams& p, cudaStream_t stream) {
  const bool paged = p.kv.block_table != nullptr;
  const TileMap k_map = mla_k_map(p, kMlaAlternatingTileK);
  const MlaLaunch launch = mla_launch(p);
  const int boxes = paged ? mla_alternating_tile_boxes(p.kv.page_size) : 0;
  if (paged && boxes == 0)
    throw Error("fsdpa: internal: the alternating MLA kernel takes no pages of " +
                std::to_string(p.kv.page_size) + " rows");
  launch_programmatic_clusters(alternating_kernel<T>(boxes, launch.list, launch.pair_out),
                               dim3(static_cast<unsigned>(decode_grid_blocks(p))),
                               launch.pairs ? 2 : 1, kMlaThreads, kMlaAlternatingSharedBytes,
                               stream, "alternating_mla_kernel", p, k_map, launch.q_map,
                               launch.q_by_tma ? 1 : 0);
  launch_mla_combine<T>(p, launch, stream);
}

}  // namespace

// ------------------------------------------------------------ the table row

namespace {

const MlaKernelFacts kAlternatingFacts{"the alternating MLA kernel", mla_alternating_tile_boxes,
                                       "8, 16, 32 or a multiple of 64", kMlaAlternatingSharedBytes};

}  // namespace

Verdict prefill_mla_alternating_supports(const Problem& p, const Options& options) {
  if (Verdict limit = past_decode_limit(p); !limit.ok) return limit;
  return mla_latent_supports(p, options, kAlternatingFacts);
}

void prefill_mla_alternating_configure(const Problem& p, Plan& plan) {
  // One block per multiprocessor (its shared memory); splits of whole pairs'
  // tiles from multiples of 64 keys.
  configure_decode_plan(p, plan,
                        DecodeGrid{.head_dim_qk_bucket = kMlaHeadDimQk,
                                   .head_dim_v_bucket = kMlaHeadDimV,
                                   .rows = kMlaRows,
                                   .keys = kMlaAlternatingTileK,
                                   .blocks_per_sm = 1,
                                   .split_keys_multiple = kMlaAlternatingTileK,
                                   .cluster_merge = false});
  plan.loads = "TMA boxes";
}

void prefill_mla_alternating_launch(const Plan& plan, const Tensors& t, void* workspace,
                                    void* stream) {
  // Splits of whole 64-key tiles from a multiple of 64: a paged tile then
  // starts on a page or 64-key boundary, and dense runs the same splits.
  const DecodeParams params =
      make_decode_params(plan, t, workspace, kMlaRows, kMlaAlternatingTileK);
  if (params.rows_per_kv_head == 0 || params.head_dim_v == 0) return;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  switch (plan.problem.dtype) {
    case DType::BF16:
      launch_alternating<__nv_bfloat16>(params, cuda_stream);
      return;
    case DType::F16:
      launch_alternating<__half>(params, cuda_stream);
      return;
    case DType::F32:
    case DType::Bool:
    case DType::I32:
      break;
  }
  throw Error(std::string("fsdpa: internal: the alternating MLA kernel has no ") +
              to_string(plan.problem.dtype) + " instance");
}

}  // namespace fsdpa::detail::cuda
