// The MLA kernel (sm_90a) and its selection-table rows: DeepSeek's 576/512
// heads with v the first 512 columns of k, many query heads on one latent
// head. With 128 packed rows a K row feeds 128 dot products of 576 and 128
// of 512, so the shape is compute-bound and wants warpgroup MMAs. The decode
// row runs it up to the decode limit; past it (a block's packed rows are
// then 64 query positions of a head) the alternating-tile kernel
// (decode_mla_latent.cu) runs, and this one only takes the page sizes that
// kernel does not; k dense or a page pool (kBoxes > 0: a tile's TMA boxes
// land page by page, kBoxes of them).
//
// One block owns 64 packed query rows (one wgmma M) and one key split of one
// (batch, kv head). Q stays in shared memory (in by TMA where a box of the
// tensor is the block's rows, else by cp.async); K tiles of 32 keys x 576
// columns arrive through TMA (128-byte swizzle, four stages, issued by one
// thread of warpgroup 1). Per tile:
//   warpgroup 0: S = Q K^T (36 k-steps, both operands in shared memory), the
//                masks and the online softmax, then P (register fragments)
//                and the rescale factors into shared memory, then
//                O[:, 0:256] += P V;
//   warpgroup 1: takes P and the factors, O[:, 256:512] += P V.
// V is the first 8 panels of the K tile, read N-major: each K byte leaves
// device memory once per block. Warpgroup 0 issues P V of tile j and S of
// tile j + 1 together, so the tensor cores run one while the other is
// waited for. Shared-memory barriers hand P over (P written, P read) and
// free a K stage (both warpgroups' P V of its tile completed) for the copy
// of the tile four ahead. The epilogue stores the final rows from the
// accumulators (one split), or the split's partial for the combine kernel
// (decode_combine.cu) through shared memory, as whole rows. With an even
// number of splits the blocks run as two-block clusters of adjacent splits
// of one row chunk, and each pair leaves one partial, merged through
// distributed shared memory.
//
// The same kernel serves the wide prefill row (cuda_fused_prefill_wide): Dv
// above 256 with V tiles of their own, landing beside each K tile in its
// stage on a barrier of their own (MlaShape::separate_v), in the shapes of
// kMlaShapes that have them, so that S is computed once for both halves of
// O's columns.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "core/kv_cache.h"
#include "core/tensor.h"
#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/device.h"
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

#if defined(FSDPA_WGMMA_KERNELS)
constexpr bool kWgmmaKernelsBuilt = true;
#else
constexpr bool kWgmmaKernelsBuilt = false;
#endif

// Where the staged rows start, from Q's first byte: at the stages where they
// hold the rows, else at Q (free too once every product completed).
constexpr size_t mla_staging_offset(MlaShape s) {
  const size_t rows = size_t{kMlaRows} * mla_staged_row(s.half_dv) * 4;
  return s.stages * mla_stage_bytes(s) >= rows ? mla_q_bytes(s) : 0;
}
constexpr bool mla_staging_fits(MlaShape s) {
  return mla_staging_offset(s) + size_t{kMlaRows} * mla_staged_row(s.half_dv) * 4 <=
         mla_q_bytes(s) + s.stages * mla_stage_bytes(s);
}
constexpr bool mla_staging_fits_all() {
  for (const MlaShape& s : kMlaShapes)
    if (!mla_staging_fits(s)) return false;
  return true;
}
static_assert(mla_staging_fits_all());

// The kernel's device code, compiled for sm_90a only: elsewhere the kernel
// body is empty and these would be unused (an error with FSDPA_WERROR).
#if FSDPA_WGMMA_ARCH
constexpr int kKPanelBytes = kMlaTileK * 128;  // of a K or V tile
constexpr int kKeyTiles = kMlaTileK / 8;       // 8-key tiles of S
constexpr int kKSteps = kMlaTileK / 16;        // k-steps of P V
#endif                                         // FSDPA_WGMMA_ARCH

// kShapeIndex: the shape in kMlaShapes (the head dims' panels, O's columns a
// warpgroup, V in the K tile or apart; an index, since nvcc's host stubs do
// not take a class as a template argument). kBoxes: 0 where k is dense, else k is a page pool read
// through the block table, a tile in kBoxes boxes of 32 / kBoxes rows of one page each (pages of 8
// or 16 rows: 4 or 2; of a multiple of 32: 1; mla_tile_boxes). kList: the blocks are a list of
// splits over the batch's lengths (decode_block). kPairOut: split pairs of the only two splits,
// which write out themselves (store_pair_merged). Template parameters, so that the dense kernel
// without a list keeps its code, and a paged kernel holds the copies of its own page size only
// (with the box count a run-time value, the copies of four boxes unrolled in the fill and the
// refill made the kernel 2.2k instructions longer than the dense one, and its loops missed the
// instruction cache: bench/NOTES.md, session 32).
template <typename T, int kShapeIndex, int kBoxes, bool kList, bool kPairOut>
__global__ void __launch_bounds__(kMlaThreads, 1)
    decode_mla_kernel(const DecodeParams p, const __grid_constant__ TileMap k_map,
                      const __grid_constant__ TileMap v_map, const __grid_constant__ TileMap q_map,
                      int q_by_tma) {
#if FSDPA_WGMMA_ARCH
  using namespace decode_kernel;
  constexpr MlaShape kShape = kMlaShapes[kShapeIndex];
  // (Scalars: lambdas may read these without capturing them.)
  constexpr int kPanels = kShape.qk_panels;  // of a Q or K tile
  constexpr int kVPanels = kShape.half_dv / 32;
  constexpr int kHalfDv = kShape.half_dv;
  constexpr int kOutTiles = kHalfDv / 8;
  constexpr int kStages = kShape.stages;
  constexpr bool kSeparateV = kShape.separate_v;
  constexpr size_t kQBytes = mla_q_bytes(kShape), kKTileBytes = mla_k_tile_bytes(kShape),
                   kStageBytes = mla_stage_bytes(kShape);
  static_assert(!kSeparateV || kBoxes == 0, "V tiles of their own: dense k and v");
  using prefill_impl::p_fragment;
  using prefill_impl::rescale_output;
  using prefill_impl::ScaledScores;
  using prefill_impl::softmax_scores;

  extern __shared__ unsigned char shared_raw[];
  const uint32_t raw_address = shared_address(shared_raw);
  const uint32_t shared_q = (raw_address + 1023u) & ~1023u;
  unsigned char* const q_ptr = shared_raw + (shared_q - raw_address);
  const uint32_t shared_k = shared_q + kQBytes;  // stage s: K tile, then V's where apart
  constexpr size_t kPOffset = kQBytes + kStages * kStageBytes;
  uint32_t* const p_s = reinterpret_cast<uint32_t*>(q_ptr + kPOffset);
  float2* const correction_s = reinterpret_cast<float2*>(q_ptr + kPOffset + kMlaPBytes);
  // Barriers: K stage full (one arrival + the K tile's bytes), K stage free
  // (all 256 threads, once their P V of the stage's tile completed), P
  // written (warpgroup 0's 128 threads), P read (warpgroup 1's), Q in (one
  // arrival + Q's bytes, when Q comes by TMA); where V is apart, V's tile
  // full (`full` then holds K's alone, whose slot is refilled once S of its
  // tile completed; `stage_free` frees V's slot). Tile t is use t of each
  // ring (the stage rings' stage t % stages; the P barriers' t-th phase).
  using StageRing = StageBarriers<kStages>;
  const uint32_t barriers = shared_address(correction_s + 128);
  const StageRing full(barriers), stage_free(barriers + StageRing::kBytes);
  const StageBarriers<1> p_written(barriers + 2 * StageRing::kBytes),
      p_read(barriers + 2 * StageRing::kBytes + 8);
  const uint32_t q_full = barriers + 2 * StageRing::kBytes + 16;
  const StageRing v_full(barriers + 2 * StageRing::kBytes + 24);

  // Through a shuffle, so that ptxas knows the warpgroup is the same in every
  // lane of a warp: branches on it are then uniform, and the wgmma
  // descriptors can be computed in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int thread = static_cast<int>(threadIdx.x) % 128;  // in the warpgroup
  const int warp = thread / 32, lane = thread % 32, group = lane / 4, quad = lane % 4;
  const bool issuer = threadIdx.x == 128;

  const MlaBlock mla_blk = mla_block<kList>(p);
  if (!mla_blk.runs) return;
  const DecodeBlock& blk = mla_blk.blk;
  const bool pairs = mla_blk.pairs;
  const BlockKeys keys = block_keys(p, blk);
  // Tiles start on multiples of 32 keys: on a paged cache (pages of 8 or 16
  // rows, or of a multiple of 32: see decode_mla_supports) a tile is then one
  // box a page it spans, and dense k is tiled alike (a paged call and its
  // dense twin sum in the same order). The splits start on such a multiple
  // (make_decode_params), so the keys before keys.begin that the first tile
  // takes are of no row's range: masked as any other.
  constexpr bool paged = kBoxes > 0;
  constexpr int kTileBoxes = paged ? kBoxes : 1;
  constexpr int kBoxKeys = kMlaTileK / kTileBoxes;
  static_assert(kMlaTileK % kTileBoxes == 0 && kBoxKeys % 8 == 0);
  const int first_key = keys.begin - keys.begin % kMlaTileK;
  const int num_tiles =
      keys.end > keys.begin ? (keys.end - first_key + kMlaTileK - 1) / kMlaTileK : 0;

  using Pages = TilePages<kTileBoxes>;
  const uint32_t columns = paged ? table_columns(p) : 0;
  auto tile_pages = [&](int tile) {
    return mla::tile_pages<kTileBoxes>(p, blk.batch, first_key + tile * kMlaTileK, columns);
  };

  // Tile t: keys [first_key + 32 t, +32) into stage t % stages, all of K's
  // panels; keys past the tensor's (or page's) end and columns past the head
  // dim arrive as zeros. Where V is apart, load_v brings V's panels beside
  // them (on v_full).
  auto load_v = [&](int tile) {
    const uint32_t stage = shared_k + tile % kStages * kStageBytes;
    barrier_expect_bytes(v_full.at(tile), kStageBytes - kKTileBytes);
#pragma unroll
    for (int panel = 0; panel < kVPanels; ++panel)
      tma_load_4d(stage + kKTileBytes + panel * kKPanelBytes, &v_map.map, v_full.at(tile),
                  panel * 64, first_key + tile * kMlaTileK, blk.kv_head * v_map.head_step,
                  blk.batch * v_map.batch_step);
  };
  auto load_tile = [&](int tile, const Pages& pages) {
    const uint32_t stage = shared_k + tile % kStages * kStageBytes;
    barrier_expect_bytes(full.at(tile), kKTileBytes);
    if constexpr (!paged) {
      const int key = first_key + tile * kMlaTileK;
#pragma unroll
      for (int panel = 0; panel < kPanels; ++panel)
        tma_load_4d(stage + panel * kKPanelBytes, &k_map.map, full.at(tile), panel * 64, key,
                    blk.kv_head * k_map.head_step, blk.batch * k_map.batch_step);
    } else {
#pragma unroll
      for (int box = 0; box < kTileBoxes; ++box) {
#pragma unroll
        for (int panel = 0; panel < kPanels; ++panel)
          tma_load_4d(stage + panel * kKPanelBytes + box * kBoxKeys * 128, &k_map.map,
                      full.at(tile), panel * 64, pages.row, blk.kv_head * k_map.head_step,
                      pages.page[box]);
      }
    }
  };
  auto load_tile_now = [&](int tile) {
    load_tile(tile, paged ? tile_pages(tile) : Pages{});
    if constexpr (kSeparateV) load_v(tile);
  };
  if (issuer) {
    full.init(1);
    if constexpr (kSeparateV) v_full.init(1);
    stage_free.init(kMlaThreads);
    p_written.init(128);
    p_read.init(128);
    barrier_init(q_full);
    barrier_init_fence();
    if (q_by_tma) barrier_expect_bytes(q_full, kQBytes);
  }
  wait_for_previous_kernel();  // global memory from here on
  // Tile 0 and Q first, the other tiles once Q is in: issued together, the
  // first tiles of all blocks (18.9 MB) held Q's reads back (Q in 4.2 ->
  // 3.0 us after the block's start: bench/NOTES.md, session 7). Q by TMA
  // instead of cp.async took 1 us off a call (MLA 31.1 -> 30.1 us, session 10).
  if (issuer && num_tiles > 0) load_tile_now(0);
  if (!q_by_tma) {
    load_q<T, kPanels>(p, blk, shared_q);
    cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // for wgmma's reads
  } else if (issuer) {
    // The box of 64 / Lq heads x Lq query rows is the block's 64 packed rows
    // (rows past them: other heads' rows or zeros, never stored).
    const int head = (blk.kv_head * p.kv_group_size + blk.row0 / p.len_q) * q_map.head_step;
    for (int panel = 0; panel < kPanels; ++panel)
      tma_load_4d(shared_q + panel * kQPanelBytes, &q_map.map, q_full, panel * 64, 0, head,
                  blk.batch * q_map.batch_step);
  }
  __syncthreads();  // barriers initialized (and Q in place by cp.async)
  if (q_by_tma) barrier_wait(q_full, 0);
  if (issuer)
    for (int tile = 1; tile < kStages && tile < num_tiles; ++tile) load_tile_now(tile);

  // Descriptors: Q and K K-major (8-row groups 1024 bytes apart, panel kk / 4,
  // 32 bytes a k-step); V N-major from this warpgroup's panels of the K tile
  // or of the V tile beside it (panels kKPanelBytes apart, 8-key groups 1024
  // bytes apart).
  const uint64_t q_descriptor = swizzle128_descriptor(shared_q, 16, 1024);
  const uint64_t k_descriptor = swizzle128_descriptor(shared_k, 16, 1024);
  const uint64_t v_descriptor = swizzle128_descriptor(
      shared_k + (kSeparateV ? kKTileBytes : 0) + warpgroup * (kHalfDv / 64) * kKPanelBytes,
      kKPanelBytes, 1024);

  // This warpgroup's kHalfDv columns of the 64 rows. The first P V overwrites
  // them (zeroing them up front put the zeros inside the wgmma pipeline and
  // ptxas serialized every wgmma, warning C7515).
  float o[1][kOutTiles][4];
  uint32_t pa[kKSteps][4];  // P of the current tile as wgmma A fragments
  float row_max[1][2] = {{kMinusInf, kMinusInf}};
  float row_sum[1][2] = {{0.f, 0.f}};  // warpgroup 0; per thread, quad-reduced at the end

  auto issue_output = [&](int tile) {
    const uint32_t stage = tile % kStages * kStageBytes;
    if constexpr (kSeparateV) v_full.wait(tile);  // (else the tile's S waited for the stage)
    pin_registers(pa);
    pin_registers(o[0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      wgmma_rs<T, kHalfDv>(o[0], pa[kk], v_descriptor + ((stage + kk * 16 * 128) >> 4),
                           tile > 0 || kk > 0);
    wgmma_commit();
  };

  if (warpgroup == 0) {
    float s[1][kKeyTiles][4];
    // K descriptors change only in the address field of the low word: one
    // 32-bit add a product, against a 64-bit add and two register moves to
    // the uniform file (the SASS had ~13 instructions between products).
    const uint32_t k_descriptor_low = static_cast<uint32_t>(k_descriptor);
    const uint64_t k_descriptor_high = k_descriptor & 0xFFFFFFFF00000000ull;
    auto issue_scores = [&](int tile) {
      const uint32_t stage_low = k_descriptor_low + (tile % kStages * kStageBytes >> 4);
      full.wait(tile);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kPanels * 4; ++kk) {
        const uint32_t q_offset = (kk / 4) * kQPanelBytes + (kk % 4) * 32;
        const uint32_t k_offset = (kk / 4) * kKPanelBytes + (kk % 4) * 32;
        wgmma_ss<T, kMlaTileK>(s[0], q_descriptor + (q_offset >> 4),
                               k_descriptor_high | (stage_low + (k_offset >> 4)), kk > 0);
      }
      wgmma_commit();
    };
    // This thread's rows (halves 0 and 1: group and group + 8 of its warp's 16).
    const int row0 = warp * 16 + group;
    const int2 range[2] = {row_keys(p, blk, row0), row_keys(p, blk, row0 + 8)};
    const int64_t mask_row[2] = {row_mask_offset(p, blk, row0), row_mask_offset(p, blk, row0 + 8)};
    const bool has_mask = p.semantics.mask_kind != 0;

    if (num_tiles > 0) issue_scores(0);
    for (int it = 0; it < num_tiles; ++it) {
      if (it > 0) {
        wgmma_wait<1>();  // P V of tile it - 1 (committed before S of tile it)
        stage_free.arrive(it - 1);
      }
      wgmma_wait<0>();
      pin_registers(s[0]);
      const int k0 = first_key + it * kMlaTileK;
      // Into the exp2 domain; mask (and soft-cap) unless every row sees every
      // key of the tile and no cap applies.
      const bool full_tile = !has_mask && p.softcap_log2 == 0.f && k0 >= keys.common_begin &&
                             k0 + kMlaTileK <= keys.common_end;
      if (!full_tile) mask_scores(p, s[0], k0, keys.end, range, mask_row, has_mask, quad);
      float correction[1][2];
      const bool rescale = softmax_scores(s, row_max, row_sum, correction,
                                          ScaledScores{full_tile ? p.scale_log2 : 1.f});
      if (rescale && it > 0) rescale_output(o, correction);
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) p_fragment<T>(pa[kk], s[0], kk);
      if (it > 0) p_read.wait(it - 1);  // warpgroup 1 holds P of it - 1
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) p_s[(kk * 4 + e) * 128 + thread] = pa[kk][e];
      correction_s[thread] = make_float2(correction[0][0], correction[0][1]);
      p_written.arrive(it);
      issue_output(it);
      if (it + 1 < num_tiles) issue_scores(it + 1);
    }
  } else {
    for (int it = 0; it < num_tiles; ++it) {
      // The refill's page lookups first: their loads overlap the waits below.
      const bool refill = issuer && it + kStages < num_tiles;
      const Pages ahead = paged && refill ? tile_pages(it + kStages) : Pages{};
      p_written.wait(it);
      // V apart: S of tile it completed before P was written, so K's slot
      // takes its refill now, a P V earlier than V's.
      if constexpr (kSeparateV)
        if (refill) load_tile(it + kStages, ahead);
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) pa[kk][e] = p_s[(kk * 4 + e) * 128 + thread];
      const float2 factor = correction_s[thread];
      p_read.arrive(it);
      if (it > 0 && (factor.x != 1.f || factor.y != 1.f)) {
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n) {
          o[0][n][0] *= factor.x;
          o[0][n][1] *= factor.x;
          o[0][n][2] *= factor.y;
          o[0][n][3] *= factor.y;
        }
      }
      if constexpr (!kSeparateV) full.wait(it);  // the copy's bytes, seen by this warpgroup too
      issue_output(it);
      wgmma_wait<0>();
      pin_registers(o[0]);
      stage_free.arrive(it);
      if (refill) {
        stage_free.wait(it);  // warpgroup 0's P V of tile it completed too
        if constexpr (kSeparateV)
          load_v(it + kStages);
        else
          load_tile(it + kStages, ahead);
      }
    }
  }
  wgmma_wait<0>();
  pin_registers(o[0]);
  if (num_tiles == 0) {  // no key: zero rows, (max, sum) = (-inf, 0)
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][n][e] = 0.f;
  }

  // ---- epilogue: warpgroup 0's (max, sum) per row through shared memory
  // (the P buffer is free: every P V completed), then both store from registers.
  __syncthreads();
  float2* const stats_s = reinterpret_cast<float2*>(p_s);
  if (warpgroup == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(row_sum[0][h]);
      if (quad == 0) stats_s[warp * 16 + group + 8 * h] = make_float2(row_max[0][h], sum);
    }
  }
  __syncthreads();
  if (staged_partials(p)) {
    // Every wgmma and TMA use of the K stages is complete (waited above).
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    float* const staging = reinterpret_cast<float*>(q_ptr + mla_staging_offset(kShape));
    if (pairs)
      store_pair_merged<T, kPairOut, kHalfDv>(p, blk, o[0], stats_s, staging, stats_s + kMlaRows,
                                              warpgroup, warp, group, quad);
    else
      store_partial_staged<kHalfDv>(p, blk, o[0], stats_s, staging, warpgroup, warp, group, quad);
  } else {
    const bool bad = store_rows<T, kHalfDv>(p, blk, o[0], stats_s, warpgroup, warp, group, quad);
    if (p.num_splits == 1) decode_kernel::repair_block_rows<T>(p, blk, bad);
  }
#endif  // FSDPA_WGMMA_ARCH
}

using MlaKernel = void (*)(DecodeParams, TileMap, TileMap, TileMap, int);

template <typename T, int kBoxes>
MlaKernel mla_kernel(bool list, bool pair_out) {
  if (list) return decode_mla_kernel<T, kMlaLatent, kBoxes, true, false>;
  return pair_out ? decode_mla_kernel<T, kMlaLatent, kBoxes, false, true>
                  : decode_mla_kernel<T, kMlaLatent, kBoxes, false, false>;
}

// The latent cache's kernel for a page size (0: dense), with or without a list.
template <typename T>
MlaKernel latent_kernel(int boxes, bool list, bool pair_out) {
  return latent_instance<MlaKernel, 0, 1, 2, 4>(
      "the MLA kernel", boxes, [&]<int kBoxes>() { return mla_kernel<T, kBoxes>(list, pair_out); });
}

template <typename T, int kShapeIndex>
void launch_mla(const DecodeParams& p, cudaStream_t stream) {
  constexpr MlaShape kShape = kMlaShapes[kShapeIndex];
  const bool paged = p.kv.block_table != nullptr;
  const TileMap k_map = mla_k_map(p, kMlaTileK);
  TileMap v_map{};
  if constexpr (kShape.separate_v) {
    const int64_t v_strides[3] = {p.v_strides.outer, p.v_strides.head, p.v_strides.row};
    v_map =
        make_swizzle128_map(p.v, p.batch, p.heads_kv, p.len_k, p.head_dim_v, v_strides, kMlaTileK);
  }
  const int64_t blocks = decode_grid_blocks(p);
  const MlaLaunch launch = mla_launch(p);
  // A paged pool's page size is one mla_tile_boxes takes (decode_mla_supports).
  const int boxes = paged ? mla_tile_boxes(p.kv.page_size) : 0;
  if (paged && boxes == 0)
    throw Error("fsdpa: internal: the MLA kernel takes no pages of " +
                std::to_string(p.kv.page_size) + " rows");
  MlaKernel kernel = nullptr;
  if constexpr (kShape.separate_v) {
    // The wide row: dense k and v, no list (prefill_wide_configure).
    if (paged || launch.list)
      throw Error("fsdpa: internal: the wide prefill kernel takes neither pages nor a list");
    kernel = launch.pair_out ? decode_mla_kernel<T, kShapeIndex, 0, false, true>
                             : decode_mla_kernel<T, kShapeIndex, 0, false, false>;
  } else {
    kernel = latent_kernel<T>(boxes, launch.list, launch.pair_out);
  }
  launch_programmatic_clusters(kernel, dim3(static_cast<unsigned>(blocks)), launch.pairs ? 2 : 1,
                               kMlaThreads, mla_shared_bytes(kShape), stream, "decode_mla_kernel",
                               p, k_map, v_map, launch.q_map, launch.q_by_tma ? 1 : 0);
  launch_mla_combine<T>(p, launch, stream);
}

}  // namespace

// ------------------------------------------------------------ the table row

namespace {

// What a kernel of the MLA family needs of the rows and the device: TMA's
// 16-byte rows (of `operands`), a 90a build and device, `shared_bytes`.
Verdict mla_device_supports(const Problem& p, const char* kernel, const char* operands,
                            size_t shared_bytes) {
  if (p.row_alignment < 16)
    return Verdict::no("rows are " + std::to_string(p.row_alignment) + "-byte aligned; " + kernel +
                       "'s TMA loads need 16 (" + operands + ")");
  if (!kWgmmaKernelsBuilt)
    return Verdict::no("the wgmma kernels are not built: FSDPA_CUDA_ARCHS has no 90a");
  if (const std::string why = wgmma_device_mismatch(p.device.index); !why.empty())
    return Verdict::no(why);
  if (const DeviceInfo* device = planning_device(p.device.index))
    return fits_shared_memory(kernel, shared_bytes, block_shared_memory(*device), p);
  return Verdict::yes();
}

const MlaKernelFacts kMlaKernelFacts{"the MLA kernel", mla_tile_boxes, "8, 16 or a multiple of 32",
                                     mla_shared_bytes(kMlaShapes[kMlaLatent])};

// The wide shape (its index in kMlaShapes) that serves the head dims, or -1:
// above Dqk 320 the smallest that covers them (384/384, 512/512, 576/512).
// At Dqk 288 and 320 the wgmma kernel's column slices measured faster in
// their own buckets, above 320 the wide kernel (bench/NOTES.md, sessions
// 44-45).
int wide_shape(int64_t head_dim_qk, int64_t head_dim_v) {
  if (head_dim_qk <= 320) return -1;
  for (int shape = 0; shape < static_cast<int>(std::size(kMlaShapes)); ++shape)
    if (kMlaShapes[shape].separate_v && head_dim_qk <= kMlaShapes[shape].qk_panels * 64 &&
        head_dim_v <= 2 * kMlaShapes[shape].half_dv)
      return shape;
  return -1;
}

// The launch of a wide shape's instance for a dtype.
using WideLaunch = void (*)(const DecodeParams&, cudaStream_t);
WideLaunch wide_launch(DType dtype, int shape) {
  const bool bf16 = dtype == DType::BF16;
  if (!bf16 && dtype != DType::F16)
    throw Error(std::string("fsdpa: internal: the wide prefill kernel has no ") + to_string(dtype) +
                " instance");
  switch (shape) {
    case kMlaWide384:
      return bf16 ? launch_mla<__nv_bfloat16, kMlaWide384> : launch_mla<__half, kMlaWide384>;
    case kMlaWide512:
      return bf16 ? launch_mla<__nv_bfloat16, kMlaWide512> : launch_mla<__half, kMlaWide512>;
    case kMlaWide576:
      return bf16 ? launch_mla<__nv_bfloat16, kMlaWide576> : launch_mla<__half, kMlaWide576>;
    default:
      throw Error("fsdpa: internal: no wide prefill shape " + std::to_string(shape));
  }
}

}  // namespace

Verdict mla_latent_supports(const Problem& p, const Options& options,
                            const MlaKernelFacts& kernel) {
  if (Verdict common = decode_kernel_supports(p, options); !common.ok) return common;
  if (p.dtype != DType::BF16 && p.dtype != DType::F16)
    return Verdict::other_row(std::string("dtype ") + to_string(p.dtype) +
                              " is not one of f16, bf16");
  if (!p.v_aliases_k)
    return Verdict::other_row(
        "v is not a view of the first head_dim_v columns of k (MLA aliasing)");
  if (p.head_dim_qk <= 512)
    return Verdict::other_row("head_dim_qk=" + std::to_string(p.head_dim_qk) + ": " + kernel.name +
                              " serves 512 < head_dim_qk <= 576");
  if (p.page_size > 0 && kernel.tile_boxes(p.page_size) == 0)
    return Verdict::other_row("page_size=" + std::to_string(p.page_size) + ": " + kernel.name +
                              "'s TMA boxes take pages of " + kernel.pages +
                              " rows; cuda_fused_decode serves others");
  return mla_device_supports(p, kernel.name, "q, k, out", kernel.shared_bytes);
}

Verdict decode_mla_supports(const Problem& p, const Options& options) {
  if (Verdict limit = decode_supports(p, options); !limit.ok) return limit;
  return mla_latent_supports(p, options, kMlaKernelFacts);
}

Verdict past_decode_limit(const Problem& p) {
  if (p.len_q <= kDecodeMaxLenQ)
    return Verdict::other_row("len_q=" + std::to_string(p.len_q) + " is within the decode limit " +
                              std::to_string(kDecodeMaxLenQ) + " (decode family)");
  return Verdict::yes();
}

// Past the decode limit a block's 64 packed rows are 64 query positions of
// one head (or of several, where 64 is not a multiple of len_q); the key
// loop, the masks and the epilogue are the decode kernel's, and the split
// count comes out 1 once the row chunks fill the GPU.
Verdict prefill_mla_supports(const Problem& p, const Options& options) {
  if (Verdict limit = past_decode_limit(p); !limit.ok) return limit;
  return mla_latent_supports(p, options, kMlaKernelFacts);
}

// Dv above 256: S once for O's two column halves, where the column-slice
// kernels compute it once a slice. The MLA kernel's loop with V tiles of
// their own, on dense k and v.
Verdict prefill_wide_supports(const Problem& p, const Options&) {
  if (Verdict limit = past_decode_limit(p); !limit.ok) return limit;
  if (p.dtype != DType::BF16 && p.dtype != DType::F16)
    return Verdict::other_row(std::string("dtype ") + to_string(p.dtype) +
                              " is not one of f16, bf16");
  if (p.head_dim_v <= 256)
    return Verdict::other_row("head_dim_v=" + std::to_string(p.head_dim_v) +
                              " is one column slice: the slice kernels compute Q K^T once");
  if (wide_shape(p.head_dim_qk, p.head_dim_v) < 0)
    return Verdict::other_row(
        "head_dim_qk=" + std::to_string(p.head_dim_qk) +
        ", head_dim_v=" + std::to_string(p.head_dim_v) +
        ": the wide kernel serves Dqk above 320 (up to 576, Dv up to 512); at 288 and 320 the "
        "wgmma kernel's column slices measured faster");
  if (Verdict dense = dense_kv_only(p); !dense.ok) return dense;
  if (Verdict indices = decode_index_limits(p); !indices.ok) return indices;
  return mla_device_supports(p, "the wide kernel", "q, k, v, out",
                             mla_shared_bytes(kMlaShapes[wide_shape(p.head_dim_qk, p.head_dim_v)]));
}

void prefill_wide_configure(const Problem& p, Plan& plan) {
  const int shape = wide_shape(p.head_dim_qk, p.head_dim_v);
  if (shape < 0) throw Error("fsdpa: internal: prefill_wide_configure without a wide shape");
  // One block per multiprocessor; splits of whole tiles; no list of splits
  // (the launch has no instance for one).
  configure_decode_plan(p, plan,
                        DecodeGrid{.head_dim_qk_bucket = kMlaShapes[shape].qk_panels * 64,
                                   .head_dim_v_bucket = 2 * kMlaShapes[shape].half_dv,
                                   .rows = kMlaRows,
                                   .keys = kMlaTileK,
                                   .blocks_per_sm = 1,
                                   .split_keys_multiple = kMlaTileK,
                                   .cluster_merge = false,
                                   .split_list = false});
  plan.loads = "TMA boxes";
  plan.instance = reinterpret_cast<void (*)()>(wide_launch(p.dtype, shape));
}

void prefill_wide_launch(const Plan& plan, const Tensors& t, void* workspace, void* stream) {
  const auto launch = reinterpret_cast<WideLaunch>(plan.instance);
  if (launch == nullptr) throw Error("fsdpa: internal: a wide prefill plan without its instance");
  const DecodeParams params = make_decode_params(plan, t, workspace, kMlaRows, kMlaTileK);
  if (params.rows_per_kv_head == 0 || params.head_dim_v == 0) return;
  launch(params, static_cast<cudaStream_t>(stream));
}

void decode_mla_configure(const Problem& p, Plan& plan) {
  // One block per multiprocessor (its shared memory); splits of whole K tiles.
  configure_decode_plan(
      p, plan, DecodeGrid{kMlaHeadDimQk, kMlaHeadDimV, kMlaRows, kMlaTileK, 1, kMlaTileK, false});
  plan.loads = "TMA boxes";
}

void decode_mla_launch(const Plan& plan, const Tensors& t, void* workspace, void* stream) {
  // Splits of whole 32-key tiles from a multiple of 32 (the plan's
  // split_keys_multiple): a paged tile then starts on a page or 32-key
  // boundary inside its split, and dense runs the same splits, so a paged
  // call and its dense twin sum alike.
  const DecodeParams params = make_decode_params(plan, t, workspace, kMlaRows, kMlaTileK);
  if (params.rows_per_kv_head == 0 || params.head_dim_v == 0) return;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  switch (plan.problem.dtype) {
    case DType::BF16:
      launch_mla<__nv_bfloat16, kMlaLatent>(params, cuda_stream);
      return;
    case DType::F16:
      launch_mla<__half, kMlaLatent>(params, cuda_stream);
      return;
    case DType::F32:
    case DType::Bool:
    case DType::I32:
      break;
  }
  throw Error(std::string("fsdpa: internal: the MLA decode kernel has no ") +
              to_string(plan.problem.dtype) + " instance");
}

}  // namespace fsdpa::detail::cuda
