// The split-K decode kernel on tensor cores (f16/bf16, sm_80+).
//
// One block serves one (batch, kv head, key split, chunk of 16 packed query
// rows): the heads of a kv group and the query positions form the M = 16 rows
// of m16n8k16 tiles, so each K/V byte of the split is read from device memory
// once per row chunk (once in total for groups of up to 16 rows). The warps
// are key streams: stream s of a stage takes its 16 keys, computes S = Q K^T
// (16 x 16) on tensor cores, runs its own online softmax in the exp2 domain
// and accumulates O += P V with P straight from the S registers. Groups of
// 2-8 warps may share a stream, each accumulating a part of Dv (fewer
// registers, so two blocks fit an SM); from 4 parts on they also split the
// Q.K k-steps and add their partial S through shared memory
// (decode_config.h says which tiling each bucket gets and why). All 8 warps
// share one cp.async ring of key stages; at the end the streams merge in
// shared memory (decode_common.cuh's epilogue), writing the final rows (one
// split) or the split's partial for the combine kernel; where a row chunk's
// 2-8 splits form a cluster (sm_90, small grids: merges_in_cluster) they
// merge there instead. The tensor cores do 16 rows of work per key whatever
// the group size, far below their rate at decode's bandwidth, so the kernel
// is bound by the K/V stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/device.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_launch.h"

namespace fsdpa::detail::cuda {

namespace decode_kernel {

// How a kernel reads the K and V rows of a stage (one kernel each, so the
// dense one keeps its registers: one kernel with both the dense and the
// paged loads spilled at 576/512):
// - Rows: dense rows a constant stride apart, each 16-byte chunk by a
//   cp.async (cp.async pieces where rows are not 16-byte aligned);
// - Paged: rows through the block table (a paged cache): a stream's 16 rows
//   of one page as a dense tile's after one lookup (page_groups), else each
//   row's address looked up. On sm_90, where DecodeParams::page_boxes is
//   set, a page group arrives as TMA boxes of 64 columns in the 128-byte
//   swizzle instead (the warps that compute then issue no copies: the
//   first warp of each stream looks its group up and issues its boxes; the
//   fragments are read through the swizzle);
// - Packed: dense rows not 16-byte aligned but contiguous (the row stride
//   is the head dim: a stage's rows are one span) in tensors whose base is
//   16-byte aligned: the span's 16-byte blocks (span_blocks) kept as they
//   are in shared memory (rows head dim x 2 bytes apart), and the fragments
//   read by 32-bit loads instead of ldmatrix, which needs 16-byte aligned
//   rows (V's split by byte permutes, its P V tiles' columns permuted).
//   Narrow pieces cost 4x the copy instructions, each a warp spreading 128
//   useful bytes over 16 sectors. On sm_90 one thread copies the blocks
//   wholly inside the span by one bulk copy per operand, completing on the
//   stage's barrier (kBulkSpans), so the warps that compute issue no
//   copies; before sm_90, all threads by cp.async.
// kList: the blocks are a list of splits over the batch's lengths
// (decode_block; a template flag too: compiled in, the list cost the dense
// calls without one 2-3%).
enum class KvLoad { Rows, Paged, Packed };

// The tensor maps of a paged cache's K and V pools in boxes of 16 page rows
// x 64 columns (make_swizzle128_map), read where DecodeParams::page_boxes is
// set; empty otherwise.
struct DecodeKvMaps {
  TileMap k, v;
};

#ifdef __CUDA_ARCH__
inline constexpr int kDecodeMmaArch = __CUDA_ARCH__;
#else
inline constexpr int kDecodeMmaArch = 900;  // the host pass: launch bounds unused
#endif

// kClass: the shared-memory class whose tiling the kernel takes
// (decode_mma_config; the launches of classes of one tiling share the kernel
// of the smallest: decode_mma_tiling_class).
template <typename T, int DQK, int DV, int kClass, KvLoad kLoad, bool kList>
__global__ void __launch_bounds__(kDecodeMmaWarps * 32,
                                  decode_mma_launch_blocks(DQK, DV, kClass, kDecodeMmaArch))
    decode_mma_kernel(const DecodeParams p, const __grid_constant__ DecodeKvMaps maps) {
  constexpr DecodeMmaConfig kConfig = decode_mma_config(DQK, DV, kClass);
  constexpr bool kPaged = kLoad == KvLoad::Paged, kPacked = kLoad == KvLoad::Packed;
  constexpr bool kBulkSpans = kPacked && kDecodeMmaArch >= 900;
  // The paged variant's layout where its bucket takes boxes (host and device
  // alike: decode_mma_smem_bytes), and whether this binary reads them.
  constexpr bool kBoxLayout = kPaged && kConfig.page_boxes;
  constexpr bool kPageBoxes = kBoxLayout && kDecodeMmaArch >= 900;
  // Stages that complete on the barriers of `full` (bulk or tensor copies).
  constexpr bool kStageBarriers = kBulkSpans || kPageBoxes;
  constexpr int kRows = kDecodeMmaRows;
  constexpr int kThreads = kDecodeMmaWarps * 32;
  constexpr int kKeys = kDecodeMmaKeysPerStream;  // per stream and stage
  constexpr int kStreams = kConfig.streams;
  constexpr int kStageKeys = kConfig.keys_per_stage;
  constexpr int kStages = kConfig.stages;
  constexpr int kDvPart = DV / kConfig.dv_parts;  // columns of O per warp
  constexpr int kParts = kConfig.dv_parts;
  // Warps of a stream that each take a share of the Q.K k-steps: all of them
  // (decode_mma_split_qk), or one, each warp computing the whole S.
  constexpr int kQkShares = kConfig.split_qk ? kParts : 1;
  constexpr int kKSteps = DQK / 16;
  constexpr int kKStepsPerShare = (kKSteps + kQkShares - 1) / kQkShares;
  constexpr int kRowK = decode_mma_row(DQK), kRowV = decode_mma_row(DV), kRowQ = kRowK;
  constexpr DecodeMmaSmem kSmem =
      decode_mma_smem(DQK, DV, kConfig, /*v_aliases_k=*/false, kBoxLayout);
  constexpr DecodeMmaSmem kAliasedSmem =
      decode_mma_smem(DQK, DV, kConfig, /*v_aliases_k=*/true, kBoxLayout);
  static_assert(DQK % 16 == 0 && kDvPart % 16 == 0 && kKeys == 16);
  static_assert(kStages >= 2 &&
                    decode_mma_smem(DQK, DV, kConfig, decode_mma_tiled_for_alias(DQK, DV)).total <=
                        size_t(kConfig.min_blocks == 2 ? shared_budget_two_blocks(kClass)
                                                       : kSharedBudgets[kClass]),
                "the tiling fits the shared memory its occupancy assumes");

  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  float2* stats_s = reinterpret_cast<float2*>(smem + kSmem.q);
  float* exchange_s = reinterpret_cast<float*>(smem + kSmem.q + kSmem.stats);  // [warps][32][8]
  T* ring_s = reinterpret_cast<T*>(smem + kSmem.ring);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = lane / 4, quad = lane % 4;
  const int stream = warp / kConfig.dv_parts, part = warp % kConfig.dv_parts;
  // The first stages' K and V rows of keys [begin, end) of (batch, kv head)
  // into L2 while the kernel before may still run (a prefetch reads nothing
  // into the block): -0.6 us a call at Lk=32768, D=128 (bench/NOTES.md,
  // session 7). With per-sequence lengths, which decode_block reads only
  // after that wait, a kernel prefetches for the block it guesses from
  // lengths read before it (guess_block: -3 us at B=1, session 36; a dense
  // cache's list, decode_list_block: -1.1 to -2.1 us, session 39; a paged
  // list, whose prefetch looks each row's page up, lost 2-3 us with it and
  // takes none). The reads before the wait (lengths, a paged cache's block
  // table) bypass L1 (IndexRead::BeforeWait); a stale value (a page id
  // clamped into the pool by page_of) costs a useless prefetch, never a
  // wrong read.
  auto prefetch_first_stages = [&](int batch, int kv_head, int begin, int end) {
    const int ahead = min(end - begin, (kStages - 1) * kStageKeys);
    if constexpr (kPacked) {  // the spans' whole 16-byte blocks
      if (tid < 2) {
        const T* rows = static_cast<const T*>(tid == 0 ? p.k : p.v) +
                        row_offset(tid == 0 ? p.k_strides : p.v_strides, batch, kv_head, 0);
        const int row_bytes = (tid == 0 ? p.head_dim_qk : p.head_dim_v) * int{sizeof(T)};
        const uintptr_t first_byte = reinterpret_cast<uintptr_t>(rows) + int64_t{begin} * row_bytes;
        const uintptr_t first = (first_byte + 15) & ~uintptr_t{15};
        const uintptr_t last = (first_byte + int64_t{ahead} * row_bytes) & ~uintptr_t{15};
        if (last > first)
          prefetch_l2(reinterpret_cast<const void*>(first), static_cast<uint32_t>(last - first));
      }
    } else if (p.copy_bytes >= 16) {  // the bulk prefetch takes 16-byte aligned rows
      for (int i = tid; i < 2 * ahead; i += kThreads) {
        const bool is_v = i >= ahead;
        if (is_v && p.v_aliases_k != 0) break;
        const int key = begin + (is_v ? i - ahead : i);
        const KvStrides& strides = is_v ? p.v_strides : p.k_strides;
        const int64_t row =
            kPaged ? key_row_offset<IndexRead::BeforeWait>(p.kv, strides, batch, kv_head, key)
                   : row_offset(strides, batch, kv_head, key);
        prefetch_l2(static_cast<const T*>(is_v ? p.v : p.k) + row,
                    uint32_t(is_v ? p.head_dim_v : p.head_dim_qk) * uint32_t{sizeof(T)});
      }
    }
  };
  auto prefetch_for = [&](const DecodeBlock& guess) {
    const BlockKeys keys = block_keys(p, guess);
    prefetch_first_stages(guess.batch, guess.kv_head, keys.begin, keys.end);
  };
  DecodeBlock blk;
  if constexpr (kList && kPaged) {
    blk = decode_block</*kList=*/true>(p, kRows);
  } else if constexpr (kList) {
    blk = decode_list_block(p, kRows, prefetch_for);
  } else {
    const DecodeBlock guess = guess_block(p, kRows);
    if (guess.valid) prefetch_for(guess);
    blk = decode_block</*kList=*/false>(p, kRows);
  }
  allow_next_launch();
  if (!blk.valid) return;  // nothing to do (decode_block)

  const BlockKeys keys = block_keys(p, blk);
  const int key_begin = keys.begin, key_end = keys.end;
  // A paged stage's streams each take 16 rows of one page where pages hold a
  // multiple of 16 keys and the block's first key is a multiple of 16 (the
  // splits are: decode_split_keys_multiple; a window's first block need not
  // be), rows 16-byte aligned. On sm_90 they arrive as boxes where the
  // launch set page_boxes and the ring starts on a 1024-byte boundary.
  const bool page_groups =
      kPaged && decode_mma_page_groups(p.kv.page_size, p.copy_bytes) && key_begin % kKeys == 0;
  const bool boxes =
      kPageBoxes && page_groups && p.page_boxes != 0 && (shared_address(ring_s) & 1023u) == 0;
  const int num_tiles =
      key_end > key_begin ? (key_end - key_begin + kStageKeys - 1) / kStageKeys : 0;
  const bool has_mask = p.semantics.mask_kind != 0;
  // This thread's two accumulator rows: group and group + 8.
  const int2 range[2] = {row_keys(p, blk, group), row_keys(p, blk, group + 8)};
  const int64_t mask_row[2] = {row_mask_offset(p, blk, group), row_mask_offset(p, blk, group + 8)};

  const bool v_aliases_k = p.v_aliases_k != 0;
  const int stage_elems =
      static_cast<int>((v_aliases_k ? kAliasedSmem.stage : kSmem.stage) / sizeof(T));
  const int row_v = v_aliases_k ? kRowK : kRowV;
  const T* k_rows =
      static_cast<const T*>(p.k) + blk.batch * p.k_strides.outer + blk.kv_head * p.k_strides.head;
  const T* v_rows =
      static_cast<const T*>(p.v) + blk.batch * p.v_strides.outer + blk.kv_head * p.v_strides.head;
  // Columns past the real head dims are never copied: the K tail is zeroed
  // once here (Q's tail is zero, but 0 x NaN from stale shared memory is not),
  // and the V tail only feeds O columns that are never stored. Copies of
  // head-dim tails cost as much as full ones (72 in the 128 bucket ran as
  // slowly as 128: bench/NOTES.md, decode round 6). Packed stages have no
  // tail columns: their K fragments zero the columns past Dqk instead; boxes
  // bring them as zeros (past the map's columns).
  for (int idx = tid; !kPacked && !boxes && idx < kStages * kStageKeys * (DQK / 8);
       idx += kThreads) {
    const int row = idx / (DQK / 8), col = idx % (DQK / 8) * 8;
    if (col >= p.head_dim_qk)
      *reinterpret_cast<uint4*>(ring_s + row / kStageKeys * stage_elems + row % kStageKeys * kRowK +
                                col) = make_uint4(0, 0, 0, 0);
  }
  const uint32_t ring = shared_address(ring_s);
  // kStageBarriers: a stage's bulk or tensor copies complete on its barrier
  // of `full`, in the stream stats' memory (used only after the key loop).
  const StageBarriers<kStages> full(shared_address(stats_s));
  static_assert(!kStageBarriers || kSmem.stats >= StageBarriers<kStages>::kBytes);
  if constexpr (kStageBarriers) {
    // One arrival a stage: thread 0's (bulk spans), or each stream's
    // issuer's (boxes).
    if (tid == 0) {
      full.init(kPageBoxes ? kStreams : 1);
      barrier_init_fence();  // the others wait on them after the key loop's first block barrier
    }
    // Thread 0 arms them in the prologue: ordered after the inits in its own
    // program, but ptxas issues the inits for the whole warp, which
    // racecheck then counts as another lane's writes. Other warps issue
    // boxes: they need the block barrier.
    if (boxes)
      __syncthreads();
    else
      __syncwarp();
  }
  // A packed stage: the span of its keys' K (V) rows lands at the start of
  // the stage's K (V) region plus the span's offset in its 16-byte block
  // (packed_offset), rows row_bytes apart. Rows of keys at or past key_end
  // arrive as zeros: P is 0 there, but 0 x NaN from stale shared memory is
  // not.
  const int k_row_bytes = p.head_dim_qk * int{sizeof(T)},
            v_row_bytes = p.head_dim_v * int{sizeof(T)};
  auto packed_offset = [&](const T* rows, int key0, int row_bytes) {
    return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(rows) + int64_t{key0} * row_bytes) &
                                 15);
  };
  // Boxes: a stage holds one box per 64-column panel of each stream's K rows
  // and V rows, each 16 rows x 128 bytes in the 128-byte swizzle (chunk c of
  // row r at r * 128 + ((c ^ r) mod 8) * 16): the streams' K panels, stream
  // after stream, then their V panels. Lane j of each stream's first warp
  // issues the stream's panel j, K's first.
  constexpr int kKPanels = DQK / 64, kVPanels = DV / 64;
  constexpr uint32_t kPanelBytes = kKeys * 128;
  auto box_panel = [&](bool k_panel, int panel) {
    return static_cast<uint32_t>(k_panel ? stream * kKPanels + panel
                                         : kStreams * kKPanels + stream * kVPanels + panel);
  };
  auto load_stage = [&](int tile, int stage) {
    const uint32_t k_dst = ring + stage * stage_elems * uint32_t{sizeof(T)};
    const int key0 = key_begin + tile * kStageKeys;
    if constexpr (kPacked) {
      const int keys = max(0, min(kStageKeys, key_end - key0));
      const uint32_t v_dst = k_dst + kStageKeys * kRowK * sizeof(T);
      const SpanBlocks k = span_blocks(k_rows + static_cast<int64_t>(key0) * p.head_dim_qk,
                                       keys * k_row_bytes, kStageKeys * k_row_bytes);
      const SpanBlocks v = span_blocks(v_rows + static_cast<int64_t>(key0) * p.head_dim_v,
                                       keys * v_row_bytes, kStageKeys * v_row_bytes);
      if constexpr (kBulkSpans) {
        if (tid == 0) {
          const uint32_t barrier = full.at(tile);
          fence_async_shared();  // after the reads of the stage's last use (the loop's barrier)
          barrier_expect_bytes(barrier, 16 * uint32_t(k.whole + v.whole));
          if (k.whole > 0) bulk_copy_global_to_shared(k_dst, k.first, 16 * k.whole, barrier);
          if (v.whole > 0) bulk_copy_global_to_shared(v_dst, v.first, 16 * v.whole, barrier);
        }
        cp_async_span_blocks<kThreads>(k_dst, k, k.whole);
        cp_async_span_blocks<kThreads>(v_dst, v, v.whole);
      } else {
        cp_async_span_blocks<kThreads>(k_dst, k, 0);
        cp_async_span_blocks<kThreads>(v_dst, v, 0);
      }
      return;
    }
    if constexpr (kPaged) {  // each key's row through the block table
      if constexpr (kPageBoxes) {
        if (boxes) {
          // The stream's panel `lane` of its K rows, then of its V rows (the
          // stage's layout: box_panels), from the page of its first key; a
          // stream past the block's keys takes a row past the page's (its
          // boxes land as zeros, reading nothing).
          if (part == 0 && lane < kKPanels + (v_aliases_k ? 0 : kVPanels)) {
            const int key = key0 + stream * kKeys;
            int page = 0, row = static_cast<int>(p.kv.page_size);
            if (key < key_end) {
              const PageSlot slot = page_slot(p.kv, key);
              page = static_cast<int>(page_of(p.kv, blk.batch, slot.column));
              row = static_cast<int>(slot.row);
            }
            const uint32_t barrier = full.at(tile);
            fence_async_shared();  // after the reads of the stage's last use (the loop's barrier)
            if (lane == 0)
              barrier_expect_bytes(barrier,
                                   kPanelBytes * (kKPanels + (v_aliases_k ? 0 : kVPanels)));
            const bool k_panel = lane < kKPanels;
            const int panel = k_panel ? lane : lane - kKPanels;
            // The fields by value (a reference to either map's struct put
            // both in a stack frame: bench/NOTES.md, session 27).
            const int head_step = k_panel ? maps.k.head_step : maps.v.head_step;
            const int page_step = k_panel ? maps.k.batch_step : maps.v.batch_step;
            tma_load_4d(k_dst + box_panel(k_panel, panel) * kPanelBytes,
                        k_panel ? &maps.k.map : &maps.v.map, barrier, panel * 64, row,
                        blk.kv_head * head_step, page * page_step);
          }
          return;
        }
      }
      const T* k = static_cast<const T*>(p.k);
      const T* v = static_cast<const T*>(p.v);
      if (page_groups) {  // one lookup per stream's 16 keys: lane g of every warp, keys 16g..
        const T* k_first = k;
        const T* v_first = v;
        const int g = fresh_thread_index() % 32, key = key0 + kKeys * g;
        if (g < kStreams && key < key_end) {
          const PageSlot slot = page_slot(p.kv, key);
          const int64_t page = page_of(p.kv, blk.batch, slot.column);
          k_first = k + row_offset(p.k_strides, page, blk.kv_head, slot.row);
          v_first = v + row_offset(p.v_strides, page, blk.kv_head, slot.row);
        }
        cp_async_tile_row_groups<kStageKeys, DQK, kRowK, kThreads>(
            k_dst, k_first, k, p.k_strides.row, key0, key_end, p.head_dim_qk);
        if (!v_aliases_k)
          cp_async_tile_row_groups<kStageKeys, DV, kRowV, kThreads>(
              k_dst + kStageKeys * kRowK * sizeof(T), v_first, v, p.v_strides.row, key0, key_end,
              p.head_dim_v);
        return;
      }
      copy_tile_rows_gather<kStageKeys, DQK, kRowK, kThreads>(
          k_dst,
          [&](int j) { return k + key_row_offset(p.kv, p.k_strides, blk.batch, blk.kv_head, j); },
          k, key0, key_end, p.head_dim_qk, p.copy_bytes);
      if (!v_aliases_k)
        copy_tile_rows_gather<kStageKeys, DV, kRowV, kThreads>(
            k_dst + kStageKeys * kRowK * sizeof(T),
            [&](int j) { return v + key_row_offset(p.kv, p.v_strides, blk.batch, blk.kv_head, j); },
            v, key0, key_end, p.head_dim_v, p.copy_bytes);
      return;
    }
    if (p.copy_bytes < 16) {  // rows not 16-byte aligned: narrow copies
      copy_tile_rows_narrow<kStageKeys, DQK, kRowK, kThreads>(k_dst, k_rows, p.k_strides.row, key0,
                                                              key_end, p.head_dim_qk, p.copy_bytes);
      if (!v_aliases_k)
        copy_tile_rows_narrow<kStageKeys, DV, kRowV, kThreads>(
            k_dst + kStageKeys * kRowK * sizeof(T), v_rows, p.v_strides.row, key0, key_end,
            p.head_dim_v, p.copy_bytes);
      return;
    }
    cp_async_tile_rows<kStageKeys, DQK, kRowK, kThreads>(k_dst, k_rows, p.k_strides.row, key0,
                                                         key_end, p.head_dim_qk);
    if (!v_aliases_k)
      cp_async_tile_rows<kStageKeys, DV, kRowV, kThreads>(k_dst + kStageKeys * kRowK * sizeof(T),
                                                          v_rows, p.v_strides.row, key0, key_end,
                                                          p.head_dim_v);
  };
  wait_for_previous_kernel();  // global memory from here on

  // ---- q rows (zeros past the real rows and Dqk), in stage 0's cp.async
  // group: the key loop's first wait and barrier publish them. A row's 16
  // threads find its source once (packed_row divides) and copy every 16th
  // 16-byte chunk (an element-wise loop with packed_row per element took
  // ~50 instructions an element: 32 elements a thread at Dqk = 512).
  {
    constexpr int kThreadsPerRow = kThreads / kRows;
    static_assert(kThreads % kRows == 0);
    const int r = tid / kThreadsPerRow;
    const QRow<T> source = q_row<T>(p, blk, r);
    const uint32_t row = shared_address(q_s + r * kRowQ);
    for (int c = tid % kThreadsPerRow; c < DQK / 8; c += kThreadsPerRow) {
      const int bytes = 2 * max(0, min(8, source.columns - c * 8));
      copy_16(row + c * 16, bytes > 0 ? source.source + c * 8 : source.source, bytes, p.copy_bytes);
    }
  }
  const CpAsyncRing<kStages> copy_ring{num_tiles};
  copy_ring.start(load_stage);

  float o[kDvPart / 8][4];
#pragma unroll
  for (int n = 0; n < kDvPart / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  float row_max[2] = {kMinusInf, kMinusInf};
  float row_sum[2] = {0.f, 0.f};  // this lane's columns; quad-reduced at the end

  // ldmatrix row addresses (prefill kernel's fragment mapping): Q as the A
  // operand, K rows as the B operand of S, V rows transposed for P.V.
  const uint32_t q_frag = shared_address(q_s + (lane % 16) * kRowQ + (lane / 16) * 8);
  const int k_frag_elem = ((lane % 8) + (lane / 16) * 8) * kRowK + ((lane / 8) % 2) * 8;
  const int v_frag_elem = (lane % 16) * row_v + (lane / 16) * 8 + part * kDvPart;

  for (int it = 0; it < num_tiles; ++it) {
    copy_ring.acquire(it, load_stage);  // stage `it` landed for all; stage it-1 is free for reuse
    // kBulkSpans: stage `it`'s bulk copies, waited on after the next
    // stage's are issued (so that kStages stages are in flight, not
    // kStages - 1), and after the block barrier, which also publishes
    // thread 0's barrier_init to the others before their first wait.
    if (kBulkSpans || boxes) full.wait(it);
    const T* stage_k = ring_s + (it % kStages) * stage_elems + stream * kKeys * kRowK;
    const T* stage_v = v_aliases_k ? stage_k
                                   : ring_s + (it % kStages) * stage_elems + kStageKeys * kRowK +
                                         stream * kKeys * kRowV;
    const int stage_key0 = key_begin + it * kStageKeys;
    const int key0 = stage_key0 + stream * kKeys;
    // Packed stages: this thread's first word of the stream's K rows (row
    // group, bytes 4 quad on) and of its V rows (rows 2 quad, columns
    // 2 group and 2 group + 1 of its part).
    uint32_t k_packed = 0, v_packed = 0;
    // Boxes: this lane's ldmatrix row of the K (V) fragment in the stream's
    // panels, with the part of its chunk that does not change over the
    // k-steps (n2 steps) folded in: k_line (v_line) XOR 16 x the step's
    // chunk, plus its panel, is the row's address. v_line starts at the
    // panel of the warp's first column of Dv, v_step0 (0..3) is that
    // column's 16-column step in the panel (0 where warps take whole panels).
    uint32_t k_line = 0, v_line = 0;
    int v_step0 = 0;
    if (boxes) {
      const uint32_t stage = ring + (it % kStages) * stage_elems * uint32_t{sizeof(T)};
      const int r = lane % 8;
      k_line = stage + box_panel(true, 0) * kPanelBytes + ((lane % 8) + (lane / 16) * 8) * 128 +
               ((((lane / 8) % 2) ^ r) << 4);
      v_line = stage + (v_aliases_k ? box_panel(true, 0) : box_panel(false, 0)) * kPanelBytes +
               part * kDvPart / 64 * kPanelBytes + (lane % 16) * 128 + (((lane / 16) ^ r) << 4);
      if constexpr (kDvPart % 64 != 0) v_step0 = part * kDvPart % 64 / 16;
    }
    if constexpr (kPacked) {
      const uint32_t stage = ring + (it % kStages) * stage_elems * uint32_t{sizeof(T)};
      k_packed = stage + packed_offset(k_rows, stage_key0, k_row_bytes) +
                 (stream * kKeys + group) * k_row_bytes + 4 * quad;
      v_packed = stage + kStageKeys * kRowK * uint32_t{sizeof(T)} +
                 packed_offset(v_rows, stage_key0, v_row_bytes) +
                 (stream * kKeys + 2 * quad) * v_row_bytes +
                 (part * kDvPart + 2 * group) * sizeof(T);
    }

    // S = Q K^T: 16 rows x this stream's 16 keys. With kQkShares > 1 the
    // warps of a stream (its Dv parts) each take a share of the k-steps, then
    // add the partial scores through shared memory in the same order, so all
    // hold the same S.
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
    const uint32_t k_frag = shared_address(stage_k + k_frag_elem);
#pragma unroll
    for (int j = 0; j < kKStepsPerShare; ++j) {
      const int kk = (kQkShares > 1 ? part : 0) * kKStepsPerShare + j;
      if (kKSteps % kQkShares != 0 && kk >= kKSteps) break;
      uint32_t a[4], b[4];
      if constexpr (kPacked) {
        // What ldmatrix gives: keys group and group + 8, columns 2 quad and
        // 2 quad + 8 of the k-step (Dqk is even), with the columns past Dqk
        // zero (there the words hold the next row's elements, and Q's zeros
        // times a NaN are not zero).
        if (kk * 16 >= p.head_dim_qk) break;
        const int column = kk * 16 + 2 * quad;
        const uint32_t at = k_packed + kk * 16 * sizeof(T);
        const uint32_t group8 = 8 * k_row_bytes;
        b[0] = column < p.head_dim_qk ? load_shared_4(at) : 0u;
        b[1] = column + 8 < p.head_dim_qk ? load_shared_4(at + 16) : 0u;
        b[2] = column < p.head_dim_qk ? load_shared_4(at + group8) : 0u;
        b[3] = column + 8 < p.head_dim_qk ? load_shared_4(at + group8 + 16) : 0u;
      } else {
        if (boxes)  // chunk 2 kk + (lane / 8) % 2 of the row
          ldmatrix_x4(b, (k_line + (kk / 4) * kPanelBytes) ^ ((2 * (kk % 4)) << 4));
        else
          ldmatrix_x4(b, k_frag + kk * 16 * sizeof(T));
      }
      ldmatrix_x4(a, q_frag + kk * 16 * sizeof(T));
      mma_16x8x16<T>(s[0], a, b[0], b[1]);
      mma_16x8x16<T>(s[1], a, b[2], b[3]);
    }
    if constexpr (kQkShares > 1) {
      float4* mine = reinterpret_cast<float4*>(exchange_s + (warp * 32 + lane) * 8);
      mine[0] = make_float4(s[0][0], s[0][1], s[0][2], s[0][3]);
      mine[1] = make_float4(s[1][0], s[1][1], s[1][2], s[1][3]);
      // Named barrier 1 + stream over the stream's warps (0 is __syncthreads).
      named_barrier_sync(1 + stream, kParts * 32);
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
      for (int q = 0; q < kParts; ++q) {
        const float4* theirs =
            reinterpret_cast<const float4*>(exchange_s + ((stream * kParts + q) * 32 + lane) * 8);
        const float4 lo = theirs[0], hi = theirs[1];
        s[0][0] += lo.x, s[0][1] += lo.y, s[0][2] += lo.z, s[0][3] += lo.w;
        s[1][0] += hi.x, s[1][1] += hi.y, s[1][2] += hi.z, s[1][3] += hi.w;
      }
    }

    // Into the exp2 domain; mask (and soft-cap) unless the whole stage is
    // visible to every row and no cap applies.
    const bool full_stage = !has_mask && p.softcap_log2 == 0.f && stage_key0 >= keys.common_begin &&
                            stage_key0 + kStageKeys <= keys.common_end;
    if (full_stage) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= p.scale_log2;
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2, key = key0 + n * 8 + 2 * quad + (e % 2);
          float x = kMinusInf;
          if (key < key_end && key >= range[r].x && key < range[r].y) {
            x = capped_score(p, s[n][e] * p.scale_log2);
            if (has_mask) x += mask_term(p, mask_row[r], key);
          }
          s[n][e] = x;
        }
    }

    // Online softmax per row (a row's 16 scores sit in the 4 lanes of a quad).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float tile_max =
          quad_max(fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1])));
      const float new_max = fmaxf(row_max[r], tile_max);
      // A row that has seen no key keeps max -inf: subtract 0, so exp2 gives 0, not NaN.
      const float base = new_max == kMinusInf ? 0.f : new_max;
      const float correction = fast_exp2(row_max[r] - base);
      row_max[r] = new_max;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][2 * r] = fast_exp2(s[n][2 * r] - base);
        s[n][2 * r + 1] = fast_exp2(s[n][2 * r + 1] - base);
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * correction + sum;
#pragma unroll
      for (int n = 0; n < kDvPart / 8; ++n) {
        o[n][2 * r] *= correction;
        o[n][2 * r + 1] *= correction;
      }
    }

    // O += P V: the S accumulators are the A fragment of the 16-key k-step.
    uint32_t a[4];
    a[0] = pack_pair<T>(s[0][0], s[0][1]);
    a[1] = pack_pair<T>(s[0][2], s[0][3]);
    a[2] = pack_pair<T>(s[1][0], s[1][1]);
    a[3] = pack_pair<T>(s[1][2], s[1][3]);
    const uint32_t v_frag = shared_address(stage_v + v_frag_elem);
    // Boxes: the rows of keys at or past key_end hold whatever their page
    // holds there (the other loads zero them). P is 0 there, but 0 x NaN is
    // not: those keys' halves of the V fragments are masked off (the
    // fragments' keys 2 quad, + 1 and 2 quad + 8, + 9).
    uint32_t v_keep[2] = {~0u, ~0u};
    if (boxes && key0 + kKeys > key_end) {
      auto keep = [&](int key) {
        return (key < key_end ? 0x0000ffffu : 0u) | (key + 1 < key_end ? 0xffff0000u : 0u);
      };
      v_keep[0] = keep(key0 + 2 * quad);
      v_keep[1] = keep(key0 + 8 + 2 * quad);
    }
#pragma unroll
    for (int n2 = 0; n2 < kDvPart / 16; ++n2) {
      uint32_t b[4];
      if constexpr (kPacked) {
        // Tile 2 n2 takes the 16 columns' even ones and tile 2 n2 + 1 the
        // odd ones (column j of either: 16 n2 + 2 j, + 1), so that this
        // thread's keys 2 quad, + 1 (and + 8, + 9) of its column pair
        // 2 group, + 1 are one 32-bit word each, split between the tiles by
        // byte permutes (ldmatrix.trans's fragments of the two tiles: 8
        // 16-bit loads). The epilogue puts the columns back. Columns past
        // Dv are never stored, whatever they hold.
        if (part * kDvPart + n2 * 16 >= p.head_dim_v) break;
        const uint32_t at = v_packed + n2 * 16 * sizeof(T);
        const uint32_t row = v_row_bytes, group8 = 8 * v_row_bytes;
        const uint32_t w0 = load_shared_4(at), w1 = load_shared_4(at + row);
        const uint32_t w8 = load_shared_4(at + group8), w9 = load_shared_4(at + group8 + row);
        b[0] = __byte_perm(w0, w1, 0x5410);  // the low halves: the even column
        b[1] = __byte_perm(w8, w9, 0x5410);
        b[2] = __byte_perm(w0, w1, 0x7632);  // the high halves: the odd one
        b[3] = __byte_perm(w8, w9, 0x7632);
      } else {
        if (boxes) {  // chunk (part kDvPart + 16 n2) / 8 + lane / 16 of the row
          const int step = v_step0 + n2;
          ldmatrix_x4_trans(b, (v_line + (step / 4) * kPanelBytes) ^ ((2 * (step % 4)) << 4));
          b[0] &= v_keep[0], b[1] &= v_keep[1], b[2] &= v_keep[0], b[3] &= v_keep[1];
        } else {
          ldmatrix_x4_trans(b, v_frag + n2 * 16 * sizeof(T));
        }
      }
      mma_16x8x16<T>(o[2 * n2], a, b[0], b[1]);
      mma_16x8x16<T>(o[2 * n2 + 1], a, b[2], b[3]);
    }
  }
  copy_ring.drain();

  // ---- the streams' (max, sum) and O into shared memory, then the epilogue
  __syncthreads();  // every warp is done with the ring: the merge reuses it
  // kStageBarriers: every thread's last wait on the barriers is done;
  // retired, their memory is the stats' again.
  if constexpr (kStageBarriers) {
    if (tid == 0) full.invalidate();
    __syncthreads();
  }
  float* merge_s = reinterpret_cast<float*>(ring_s);  // [streams][16][DV]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(row_sum[r]);
    const int row = group + 8 * r;
    if (part == 0 && quad == 0) stats_s[stream * kRows + row] = make_float2(row_max[r], sum);
    float* dst = merge_s + (stream * kRows + row) * DV + part * kDvPart;
    if constexpr (kPacked) {  // tiles 2 n2 and 2 n2 + 1: the even and odd columns of 16
#pragma unroll
      for (int n2 = 0; n2 < kDvPart / 16; ++n2)
        *reinterpret_cast<float4*>(dst + n2 * 16 + 4 * quad) = make_float4(
            o[2 * n2][2 * r], o[2 * n2 + 1][2 * r], o[2 * n2][2 * r + 1], o[2 * n2 + 1][2 * r + 1]);
    } else {
#pragma unroll
      for (int n = 0; n < kDvPart / 8; ++n)
        *reinterpret_cast<float2*>(dst + n * 8 + 2 * quad) =
            make_float2(o[n][2 * r], o[n][2 * r + 1]);
    }
  }
  __syncthreads();
  if (p.cluster_merge != 0)  // q_s is free: it holds the block's row totals
    store_cluster_rows<T, kStreams, kRows, DV>(p, blk, stats_s, merge_s,
                                               reinterpret_cast<float2*>(q_s));
  else
    store_block_rows<T, kStreams, kRows, DV>(p, blk, stats_s, merge_s);
}

// Whether the splits of each row chunk merge in one cluster: an sm_90 binary
// and decode_merges_in_cluster.
inline bool merges_in_cluster(const DecodeParams& p, int binary_version, int multiprocessors) {
  return binary_version >= 90 &&
         decode_merges_in_cluster(p.num_splits, p.row_chunks, p.kv.seq_lens_k != nullptr, p.batch,
                                  p.heads_kv, multiprocessors);
}

// The architecture of the binary the current device runs for the split
// kernel.
template <typename T, int DQK, int DV>
int mma_binary_version() {
  return prepare_launch(
      reinterpret_cast<const void*>(decode_mma_kernel<T, DQK, DV, 0, KvLoad::Rows, false>),
      kDecodeMmaWarps * 32, 0, "decode_mma_kernel");
}

// The split kernel for a call: its loads (KvLoad), with a list of splits or
// without (decode_mma_split_list: the planner plans none at 576/512).
template <typename T, int DQK, int DV, int kClass, bool kList>
void (*mma_kernel_for(KvLoad load))(DecodeParams, DecodeKvMaps) {
  switch (load) {
    case KvLoad::Rows:
      return decode_mma_kernel<T, DQK, DV, kClass, KvLoad::Rows, kList>;
    case KvLoad::Paged:
      return decode_mma_kernel<T, DQK, DV, kClass, KvLoad::Paged, kList>;
    case KvLoad::Packed:
      return decode_mma_kernel<T, DQK, DV, kClass, KvLoad::Packed, kList>;
  }
  throw Error("fsdpa: internal: decode kernel loads " + std::to_string(static_cast<int>(load)));
}
template <typename T, int DQK, int DV, int kClass>
void (*mma_kernel_for(const DecodeParams& p))(DecodeParams, DecodeKvMaps) {
  const KvLoad load = p.kv.block_table != nullptr ? KvLoad::Paged
                      : p.packed_kv != 0          ? KvLoad::Packed
                                                  : KvLoad::Rows;
  if constexpr (decode_mma_split_list(DQK, DV)) {
    if (p.split_slots != 0) return mma_kernel_for<T, DQK, DV, kClass, true>(load);
  } else if (p.split_slots != 0) {
    throw Error("fsdpa: internal: a decode plan with a list of splits for the " +
                std::to_string(DQK) + "/" + std::to_string(DV) +
                " tensor-core kernel, which takes none");
  }
  return mma_kernel_for<T, DQK, DV, kClass, false>(load);
}

// Whether a paged cache's K and V pools can be read in TMA boxes of 16 page
// rows (DecodeParams::page_boxes, for a tiling that takes them:
// decode_mma_page_boxes): page groups, whose 16-byte rows (copy_bytes: row_alignment) mean
// 16-byte aligned bases and every stride of an extent past one a multiple of
// 16 bytes, as the tensor maps need.
inline bool page_boxes_fit(const DecodeParams& p) {
  return p.kv.block_table != nullptr && p.kv.num_pages >= 1 &&
         decode_mma_page_groups(p.kv.page_size, p.copy_bytes);
}

template <typename T, int DQK, int DV, int kClass>
void launch_mma_split(const DecodeParams& p, cudaStream_t stream) {
  const auto kernel = mma_kernel_for<T, DQK, DV, kClass>(p);
  const size_t smem =
      decode_mma_smem_bytes(DQK, DV, kClass, p.v_aliases_k != 0, p.kv.block_table != nullptr);
  const int64_t blocks = decode_grid_blocks(p);
  const int binary = prepare_launch(reinterpret_cast<const void*>(kernel), kDecodeMmaWarps * 32,
                                    smem, "decode_mma_kernel");
  DecodeParams params = p;
  DecodeKvMaps maps{};
  if constexpr (decode_mma_page_boxes(DQK, DV, kClass)) {
    if (binary >= 90 && page_boxes_fit(p)) {
      params.page_boxes = 1;
      auto map = [&](const void* base, const KvStrides& s, int head_dim) {
        const int64_t strides[3] = {s.outer, s.head, s.row};
        return make_swizzle128_map(base, p.kv.num_pages, p.heads_kv, p.kv.page_size, head_dim,
                                   strides, kDecodeMmaKeysPerStream);
      };
      maps.k = map(p.k, p.k_strides, p.head_dim_qk);
      if (p.v_aliases_k == 0) maps.v = map(p.v, p.v_strides, p.head_dim_v);
    }
  }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (merges_in_cluster(p, binary, device_info(device).multiprocessors)) {
    params.cluster_merge = 1;
    launch_programmatic_clusters(kernel, dim3(static_cast<unsigned>(blocks)), p.num_splits,
                                 kDecodeMmaWarps * 32, smem, stream, "decode_mma_kernel", params,
                                 maps);
    return;
  }
  // A plan whose splits merge in a cluster on its device has no workspace;
  // on another current device (other SM count, an sm_80 binary) they might not.
  if (p.num_splits > 1 && p.partial_max_sum == nullptr)
    throw Error("fsdpa: a decode plan of " + std::to_string(p.num_splits) +
                " splits merged in a cluster on its device ran where they do not merge (is the "
                "current device the tensors' one?)");
  launch_programmatic(kernel, static_cast<unsigned>(blocks), kDecodeMmaWarps * 32, smem, stream,
                      "decode_mma_kernel", params, maps);
  if (p.num_splits > 1) launch_decode_combine<T>(p, stream);
}

template <typename T, int DQK, int DV, int kClass>
int mma_blocks_per_sm(int /*rows_per_kv_head*/, bool v_aliases_k) {
  // The others: the same tiling.
  const auto kernel = decode_mma_kernel<T, DQK, DV, kClass, KvLoad::Rows, false>;
  const size_t smem = decode_mma_smem_bytes(DQK, DV, kClass, v_aliases_k);
  prepare_launch(reinterpret_cast<const void*>(kernel), kDecodeMmaWarps * 32, smem,
                 "decode_mma_kernel");
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kDecodeMmaWarps * 32, smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

}  // namespace decode_kernel

}  // namespace fsdpa::detail::cuda
