// The decode family's tuning, as constexpr data shared by the host (plan,
// workspace, shared-memory size) and the kernels. No CUDA header here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/shared_budget.h"

namespace fsdpa::detail::cuda {

// The decode limit of the selection table (docs/design.md), chosen by measurement
// (bench/route_bench.cpp, results in bench/results/h200-route.md: both
// families timed on the same tensors at Lq 1..128, bf16, seven shapes; the
// prefill side is the wgmma row on the H200). Decode was faster at every
// Lq <= 16 in every shape; the smallest crossover is between 16 and 24, in
// the three shapes with 256+ query rows per kv head (B=8 Hq=32 Hkv=8
// Lk=8192 D=128: 238 vs 251 us at 16, 396 vs 252 at 24; GQA-8 at B=1 and
// B=4 alike). At B=1 Hq=32 decode stays faster up to Lq=32-128, because the
// prefill grid has B * Hq * ceil(Lq / 128) blocks and no key split; the
// limit is the smallest crossover. (With the mma.sync prefill it was 32.)
inline constexpr int64_t kDecodeMaxLenQ = 16;
// The largest head dims the compiled buckets cover (576/512: DeepSeek MLA).
inline constexpr int64_t kDecodeMaxHeadDimQk = 576;
inline constexpr int64_t kDecodeMaxHeadDimV = 512;
// Upper bound on key splits (the combine kernel keeps one weight per split in
// shared memory), also the cap of FSDPA_DECODE_SPLITS.
inline constexpr int kDecodeMaxSplits = 4096;
// A split reads at least this many keys, and a key range shorter than
// kDecodeMinKeysToSplit is not split: the combine kernel costs a few
// microseconds of GPU time (and a launch), which a range that short does not
// win back (bench/NOTES.md, session 17: graph-replayed small decodes).
inline constexpr int kDecodeMinKeysPerSplit = 64;
inline constexpr int kDecodeMinKeysToSplit = 512;
// The most key splits of a row chunk that merge in one thread-block cluster
// (the tensor-core split kernel on sm_90: no combine kernel); 8 is the
// largest cluster every sm_90 GPU schedules. Key ranges of 256-512 keys,
// where splits merged in a cluster beat both one split and the combine
// kernel's count (bench/NOTES.md, session 17), split into as many of them as
// fit; longer ranges keep the wave rule above.
inline constexpr int kDecodeMaxClusterSplits = 8;
inline constexpr int kDecodeMinKeysToMergeInCluster = 256;
inline constexpr int kDecodeMaxKeysToMergeInCluster = 512;

// The most splits of a row chunk that merge in one cluster when each split
// has `base_blocks` blocks (batch x kv heads x row chunks) on
// `multiprocessors` SMs: at most kDecodeMaxClusterSplits, and a grid of at
// most one block per two SMs (in larger grids a cluster's blocks wait for
// room in one GPC together, and the merge lost to the combine kernel:
// bench/NOTES.md, session 17). The launch's gate and the planner both ask it.
constexpr int64_t decode_cluster_splits_limit(int64_t base_blocks, int multiprocessors) {
  const int64_t fit = base_blocks > 0 ? multiprocessors / (2 * base_blocks) : 0;
  return fit < kDecodeMaxClusterSplits ? fit : kDecodeMaxClusterSplits;
}

// Whether the tensor-core split kernel, where its binary is an sm_90 one,
// merges `splits` splits of each row chunk in one cluster: 2 to
// decode_cluster_splits_limit of them, one row chunk per kv head (its splits
// are then adjacent blocks) and every split a block (no per-sequence
// lengths, whose splits past a sequence's end return at once). The launch's
// gate, and the planner, which then needs no workspace for partials.
constexpr bool decode_merges_in_cluster(int64_t splits, int64_t row_chunks,
                                        bool per_sequence_lengths, int64_t batch, int64_t heads_kv,
                                        int multiprocessors) {
  return splits > 1 && row_chunks == 1 && !per_sequence_lengths &&
         splits <= decode_cluster_splits_limit(batch * heads_kv * row_chunks, multiprocessors);
}

// ------------------------------------------------------------ CUDA cores
// The split kernel for f32 (decode_kernel.cuh): warps are key streams with
// their own cp.async buffers; lanes split a key's dot product and Dv.
struct DecodeTileConfig {
  int keys_per_warp;  // keys one warp stages per pipeline step
  int rows;           // packed query rows (heads of a kv group x query positions) per block
  int warps;          // independent key streams per block
  int stages;         // cp.async buffers per warp
};

// One warp keeps one ~9 KB stage in flight while it computes on the other:
// 4 warps x 2-3 blocks per SM put 70-110 KB in flight per SM, above the
// ~32 KB that 4.1 TB/s x ~1 us of latency / 132 SMs needs.
inline constexpr int kDecodeStageBytesPerWarp = 9216;
// A warp stages at most one key per lane (32: fewer shuffles and exp2 per
// key where the stage budget allows; it did for D=64 bf16 when this kernel
// still served 16-bit types).
inline constexpr int kDecodeMaxKeysPerWarp = 32;
// Accumulator floats per lane per query row are (Dv / vector) / lanes x vector;
// 64 accumulator registers per lane leave room for the rest below 128.
inline constexpr int kDecodeAccumulatorsPerLane = 64;
// +16 bytes per staged row: lanes reading one column of consecutive rows hit
// different banks (row stride / 16 is odd for every bucket).
inline constexpr int kDecodeRowPadBytes = 16;

constexpr int decode_vector_elems(int elem_bytes) { return 16 / elem_bytes; }
constexpr int decode_pow2_floor(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}
constexpr int decode_pow2_ceil(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}
// Lanes that split one key's Dv columns in the P.V step (the rest split keys).
constexpr int decode_value_lanes(int elem_bytes, int dv) {
  const int chunks = dv / decode_vector_elems(elem_bytes);
  return decode_pow2_ceil(chunks) < 32 ? decode_pow2_ceil(chunks) : 32;
}
constexpr int decode_value_chunks_per_lane(int elem_bytes, int dv) {
  const int chunks = dv / decode_vector_elems(elem_bytes);
  const int lanes = decode_value_lanes(elem_bytes, dv);
  return (chunks + lanes - 1) / lanes;
}
constexpr int decode_row_elems(int elem_bytes, int dim) {
  return dim + kDecodeRowPadBytes / elem_bytes;
}

constexpr DecodeTileConfig decode_tile_config(int elem_bytes, int dqk, int dv) {
  const int key_bytes =
      (decode_row_elems(elem_bytes, dqk) + decode_row_elems(elem_bytes, dv)) * elem_bytes;
  int keys = decode_pow2_floor(kDecodeStageBytesPerWarp / key_bytes);
  keys = keys < 4 ? 4 : (keys > kDecodeMaxKeysPerWarp ? kDecodeMaxKeysPerWarp : keys);
  const int per_row =
      decode_value_chunks_per_lane(elem_bytes, dv) * decode_vector_elems(elem_bytes);
  int rows = kDecodeAccumulatorsPerLane / per_row;
  rows = rows < 1 ? 1 : (rows > 8 ? 8 : rows);
  return {keys, rows, 4, 2};
}

// The split kernel is compiled for 1, 2 and 4 packed rows besides the bucket's
// maximum, and a launch runs the smallest that holds the kv group's rows: MHA
// (1 row) and GQA 4 (4 rows) then skip the FMAs and shared loads of the
// unused rows (with 8 rows compiled, GQA 4 spent half of its Q.K and P.V work
// on zero rows, MHA seven eighths).
constexpr int decode_kernel_rows(int max_rows, int rows) {
  int r = 1;
  while (r < rows && r < max_rows) r *= 2;
  return r < max_rows ? r : max_rows;
}

// Dynamic shared memory of the split kernel: q (f32), per-warp probabilities,
// per-row key ranges and mask offsets, per-warp (max, sum), then the stage
// buffers, which the cross-warp merge reuses at the end.
struct DecodeSmemLayout {
  size_t q, probs, row_info, warp_stats, stages, total;
};
constexpr DecodeSmemLayout decode_smem_layout(int elem_bytes, int dqk, int dv, bool v_aliases_k) {
  const DecodeTileConfig c = decode_tile_config(elem_bytes, dqk, dv);
  DecodeSmemLayout l{};
  l.q = size_t(c.rows) * dqk * 4;
  l.probs = size_t(c.warps) * c.rows * c.keys_per_warp * 4;
  l.row_info = size_t(c.rows) * 16;  // begin, end (int32) and mask offset (int64)
  l.warp_stats = size_t(c.warps) * c.rows * 8;
  const size_t row_elems = size_t(decode_row_elems(elem_bytes, dqk)) +
                           (v_aliases_k ? 0 : size_t(decode_row_elems(elem_bytes, dv)));
  const size_t stages = size_t(c.warps) * c.stages * c.keys_per_warp * row_elems * elem_bytes;
  const size_t merge = size_t(c.warps) * c.rows * dv * 4;
  l.stages = stages > merge ? stages : merge;
  l.total = l.q + l.probs + l.row_info + l.warp_stats + l.stages;
  return l;
}

// ------------------------------------------------------------ tensor cores
// The split kernel for f16/bf16 (decode_mma_kernel.cuh). One block computes
// one m16 row tile: 16 packed rows (heads of the kv group x query positions;
// a group with more rows takes more blocks). Its 8 warps are key streams,
// each with its own online softmax, or groups of 2-8 warps share a stream
// and split Dv (a 16 x Dv accumulator tile costs Dv / 2 registers per lane,
// and fewer streams mean smaller stages, so two blocks share an SM). All
// warps share one cp.async ring whose stages hold 16 keys per stream.
inline constexpr int kDecodeMmaRows = 16;
inline constexpr int kDecodeMmaWarps = 8;
inline constexpr int kDecodeMmaKeysPerStream = 16;  // one k-step of P.V
inline constexpr int kDecodeMmaMaxDvPerWarp = 128;
inline constexpr int kDecodeMmaMaxStages = 4;

struct DecodeMmaConfig {
  int dv_parts;        // warps that share a stream, each with Dv / dv_parts columns
  int streams;         // independent key streams per block
  int keys_per_stage;  // streams x kDecodeMmaKeysPerStream
  int stages;          // cp.async ring depth (0: no tiling fits the budget)
  int min_blocks;      // resident blocks per SM the shared memory allows (launch bounds)
  bool split_qk;       // the warps of a stream split its Q.K k-steps (decode_mma_split_qk)
  bool page_boxes;     // the paged variant may read stages as TMA boxes (decode_mma_page_boxes)
};

// Shared-memory rows are padded by 16 bytes (8 elements): ldmatrix rows of
// consecutive keys then start in different banks.
constexpr int decode_mma_row(int dim) { return dim + 8; }

// Whether the warps of a stream split its Q.K k-steps and exchange partial
// scores (4 or more Dv parts), or each computes the whole S (2 parts). A/B on
// the H200 (bench/NOTES.md, decode round 7): splitting won where the repeated
// work dominates (D=512, 8 parts: 57 -> 66% of the copy ceiling at
// Lk=131072; D=256, 4 parts: 79 -> 84%; MLA, 4 parts: 51 -> 64 TFLOP/s), while
// at D=128 the exchange's 8 KB of shared memory cost the 2-part, 3-stage
// tiling (87 -> 58% with the 4-part tiling it forced). A tiling whose
// exchange does not fit the budget goes without it (decode_mma_config).
constexpr bool decode_mma_split_qk(int streams) { return kDecodeMmaWarps / streams >= 4; }

struct DecodeMmaSmem {
  size_t q, stats, exchange, ring, stage, stages, total;
};

// Layout: q [16][Dqk+8] (16-bit), stream stats [streams][16] float2, the
// partial-score exchange of warps that share a stream ([warps][32 lanes][8]
// f32, when they split Q.K), then the stage ring, which the cross-stream merge
// [streams][16][Dv] f32 reuses at the end. With v aliasing k (MLA) a stage
// holds the K rows only. `boxes` (the paged kernel of a bucket whose stages
// may arrive as TMA boxes: decode_mma_page_boxes): the ring and every stage
// start on a multiple of 1024 bytes, the 128-byte swizzle's period
// (`ring` is the ring's offset; dynamic shared memory starts on one).
constexpr DecodeMmaSmem decode_mma_smem(int dqk, int dv, const DecodeMmaConfig& c, bool v_aliases_k,
                                        bool boxes = false) {
  auto pad = [boxes](size_t bytes) { return boxes ? (bytes + 1023) / 1024 * 1024 : bytes; };
  DecodeMmaSmem l{};
  l.q = size_t(kDecodeMmaRows) * decode_mma_row(dqk) * 2;
  l.stats = size_t(c.streams) * kDecodeMmaRows * 8;
  l.exchange = c.split_qk ? size_t(kDecodeMmaWarps) * 32 * 8 * 4 : 0;
  l.ring = pad(l.q + l.stats + l.exchange);
  l.stage = pad(size_t(c.streams) * kDecodeMmaKeysPerStream *
                (decode_mma_row(dqk) + (v_aliases_k ? 0 : decode_mma_row(dv))) * 2);
  const size_t ring = l.stage * c.stages;
  const size_t merge = size_t(c.streams) * kDecodeMmaRows * dv * 4;
  l.stages = ring > merge ? ring : merge;
  l.total = l.ring + l.stages;
  return l;
}

// Whether the tensor-core split kernel takes its blocks from a list of
// splits over the batch's lengths (DecodeParams::split_slots): all but the
// 576/512 one, whose dense kernel is at its 128 registers: the list's block
// index and split keys, which cannot be recomputed from blockIdx, spilled
// 4-12 bytes in every arrangement tried. The planner plans no list for it
// (each sequence then takes the splits of the longest), paged or dense, so
// that a paged cache and its dense twin split alike (MLA's aliased cache
// runs the MLA kernel, which takes a list).
constexpr bool decode_mma_split_list(int dqk, int dv) { return !(dqk == 576 && dv == 512); }

// The 576/512 bucket exists for MLA's absorbed decode, where v is a view of
// k: its tiling is chosen for that layout (an unaliased 576/512 problem still
// fits, at one block per SM).
constexpr bool decode_mma_tiled_for_alias(int dqk, int dv) { return dqk == 576 && dv == 512; }

// A tiling of `parts` Dv parts with `stages` stages (the stage count and the
// boxes still to be chosen).
constexpr DecodeMmaConfig decode_mma_tiling(int parts, int stages, int blocks, bool split_qk) {
  const int streams = kDecodeMmaWarps / parts;
  return {parts, streams, streams * kDecodeMmaKeysPerStream, stages, blocks, split_qk, false};
}

// Stages of a tiling whose layout fits `budget` bytes of shared memory and
// whose unaliased layout fits one block of class `shared_class` (at most 4).
constexpr int decode_mma_stages_within(int dqk, int dv, int parts, bool split_qk, size_t budget,
                                       int shared_class) {
  auto fit = [&](bool v_aliases_k, size_t bytes) {
    const DecodeMmaSmem one =
        decode_mma_smem(dqk, dv, decode_mma_tiling(parts, 1, 1, split_qk), v_aliases_k);
    const size_t fixed = one.q + one.stats + one.exchange;
    return bytes > fixed ? int((bytes - fixed) / one.stage) : 0;
  };
  const int tiled = fit(decode_mma_tiled_for_alias(dqk, dv), budget);
  const int unaliased = fit(false, size_t(kSharedBudgets[shared_class]));
  const int n = tiled < unaliased ? tiled : unaliased;
  return n > kDecodeMmaMaxStages ? kDecodeMmaMaxStages : n;
}

// Whether a paged cache's stages may arrive as TMA boxes of 16 page rows (on
// sm_90, where DecodeParams::page_boxes is set): buckets of whole 64-column
// panels (the boxes' 128-byte swizzle), at most one box per lane of the warp
// that issues a stream's, and the 1024-byte aligned layout within the
// shared memory the tiling's occupancy assumes (so that it does not change).
// A warp's columns of Dv may start inside a panel (320: 80 columns a warp);
// its 16-column steps never straddle one.
constexpr bool decode_mma_boxes_fit(int dqk, int dv, const DecodeMmaConfig& c, size_t budget) {
  return dqk % 64 == 0 && dv % 64 == 0 && dqk / 64 + dv / 64 <= 32 &&
         decode_mma_smem(dqk, dv, c, decode_mma_tiled_for_alias(dqk, dv), true).total <= budget;
}

// The tiling of a bucket for the shared-memory class `shared_class`
// (shared_budget.h). Measured on the H200 (bench/NOTES.md, decode rounds 4-6
// and session 6; B=1 Hq=32 Hkv=8 Lk=131072, share of the copy ceiling): one
// block of 4 warps per SM streamed worse than two (D=256: 59% against 70%),
// and so did one block of 8 warps with a 4-6 stage ring (D=128: 77% against
// 87%, 512: 45% against 66%); one key stream of 16 keys per stage worse than
// two (288: 50% against 68%), and 8 warps per block better than 4 (D=128:
// 86% against 82%, same machine). So: two blocks per SM with at least two
// streams (3 stages, else 2), the fewest Dv parts first; else two blocks
// with one stream; else the same order for one block per SM; and only where
// none of those fits, the same without the Q.K exchange (the 320 bucket in
// 99 KB). Every problem of the bucket fits one block, the unaliased 576/512
// one included. The smaller budgets' tilings follow the rule untuned (no such
// GPU measured).
constexpr DecodeMmaConfig decode_mma_config(int dqk, int dv, int shared_class) {
  const size_t budgets[2] = {size_t(shared_budget_two_blocks(shared_class)),
                             size_t(kSharedBudgets[shared_class])};
  int min_parts = 1;
  while (dv > min_parts * kDecodeMmaMaxDvPerWarp) min_parts *= 2;
  for (int exchange = 1; exchange >= 0; --exchange)
    for (int blocks = 2; blocks >= 1; --blocks)
      for (int max_parts = kDecodeMmaWarps / 2; max_parts <= kDecodeMmaWarps; max_parts *= 2)
        for (int want = 3; want >= 2; --want)
          for (int p = min_parts; p <= max_parts; p *= 2) {
            const bool split_qk = decode_mma_split_qk(kDecodeMmaWarps / p);
            if (dv % (16 * p) != 0 || (exchange == 0 && !split_qk)) continue;
            const bool split = split_qk && exchange == 1;
            const size_t budget = budgets[2 - blocks];
            const int n = decode_mma_stages_within(dqk, dv, p, split, budget, shared_class);
            if (n < want) continue;
            DecodeMmaConfig c = decode_mma_tiling(p, n, blocks, split);
            c.page_boxes = decode_mma_boxes_fit(dqk, dv, c, budget);
            return c;
          }
  return decode_mma_tiling(min_parts, 0, 1, false);
}

// The smallest shared-memory class whose tiling equals class `shared_class`'s:
// the classes of equal tilings share one kernel.
constexpr int decode_mma_tiling_class(int dqk, int dv, int shared_class) {
  const DecodeMmaConfig c = decode_mma_config(dqk, dv, shared_class);
  for (int k = 0; k < shared_class; ++k) {
    const DecodeMmaConfig o = decode_mma_config(dqk, dv, k);
    if (o.dv_parts == c.dv_parts && o.stages == c.stages && o.min_blocks == c.min_blocks &&
        o.split_qk == c.split_qk && o.page_boxes == c.page_boxes)
      return k;
  }
  return shared_class;
}

// Whether a paged cache (page_size > 0) reaches the tensor-core kernel in
// page groups: each stream's 16 keys of a stage are 16 rows of one page (one
// block-table lookup for them) where pages hold a multiple of 16 rows and
// rows are 16-byte aligned; the kernel also needs its block's first key to
// be a multiple of 16 (decode_mma_kernel.cuh: page_groups). The plan's text
// and the launch's boxes (page_boxes_fit) follow it.
constexpr bool decode_mma_page_groups(int64_t page_size, int row_alignment) {
  return page_size % kDecodeMmaKeysPerStream == 0 && row_alignment >= 16;
}

// Whether the paged variant of the class's tiling may read page groups as
// TMA boxes (decode_mma_boxes_fit).
constexpr bool decode_mma_page_boxes(int dqk, int dv, int shared_class) {
  return decode_mma_config(dqk, dv, shared_class).page_boxes;
}

// `paged`: the paged variant, whose layout is the boxes' where the tiling
// takes them.
constexpr size_t decode_mma_smem_bytes(int dqk, int dv, int shared_class, bool v_aliases_k,
                                       bool paged = false) {
  const DecodeMmaConfig c = decode_mma_config(dqk, dv, shared_class);
  return decode_mma_smem(dqk, dv, c, v_aliases_k, paged && c.page_boxes).total;
}

// The resident blocks per SM the kernel's launch bounds promise ptxas for
// compute capability `arch` (__CUDA_ARCH__): the tiling's own count on sm_90,
// and before it no more than the largest pre-Hopper SM's shared memory holds
// (the A100's 164 KB): two blocks of sm_90's tiling for 113 KB each never
// fit there, and promising them capped the registers at 128 for nothing (the
// 576/512 instance spilled on sm_80).
inline constexpr size_t kDecodeMmaPreHopperSmBytes = 164 * 1024;
constexpr int decode_mma_launch_blocks(int dqk, int dv, int shared_class, int arch) {
  const int blocks = decode_mma_config(dqk, dv, shared_class).min_blocks;
  if (arch >= 900) return blocks;
  const int fit =
      int(kDecodeMmaPreHopperSmBytes / decode_mma_smem_bytes(dqk, dv, shared_class, false));
  return fit < 1 ? 1 : (fit < blocks ? fit : blocks);
}

// What the plan reports and the launch grid uses, for either split kernel:
// packed rows per block and keys per pipeline step of a block.
struct DecodeBlockShape {
  int rows, keys;
};
constexpr DecodeBlockShape decode_block_shape(int elem_bytes, int dqk, int dv, int shared_class) {
  if (elem_bytes == 2)
    return {kDecodeMmaRows, decode_mma_config(dqk, dv, shared_class).keys_per_stage};
  const DecodeTileConfig t = decode_tile_config(elem_bytes, dqk, dv);
  return {t.rows, t.keys_per_warp * t.warps};
}

// ------------------------------------------------------------ MLA on wgmma (sm_90a)
// The MLA kernel (decode_mla.cu) serves the 576/512 bucket when v is the
// first Dv columns of k. A block owns 64 packed query rows (one wgmma M) and
// one key split; two warpgroups share every K tile: warpgroup 0 computes
// S = Q K^T over all 576 columns and the softmax, then both accumulate
// O += P V, each for 256 of the 512 output columns (64 x 256 f32 is 128
// registers a thread; 64 x 512 would not fit one warpgroup). The same
// kernel with V tiles of their own serves the wide prefill row: Dv above
// 256, S computed once for both column halves where the column-slice
// kernels compute it once a slice.
inline constexpr int kMlaHeadDimQk = 576;
inline constexpr int kMlaHeadDimV = 512;
inline constexpr int kMlaRows = 64;      // packed query rows per block
inline constexpr int kMlaTileK = 32;     // keys per K (and V) tile
inline constexpr int kMlaThreads = 256;  // two warpgroups
// An instance's shape: Q and K rows in qk_panels 64-column panels of 128
// bytes a row; each warpgroup accumulates half_dv of O's columns (a multiple
// of 64, so that each starts on a panel); V is the K tile's first 2 half_dv
// columns, or (separate_v) a tile of its own beside it in the stage; stages
// of K (and V) tiles in flight.
struct MlaShape {
  int qk_panels, half_dv;
  bool separate_v;
  int stages;
};
// The compiled shapes (the kernel's template argument is an index here).
// First the latent cache's: 4 stages of 32 keys measured faster than 2 x 64
// (bench/NOTES.md, "Decode: the MLA kernel on wgmma"): the copy of a tile
// is issued three tiles ahead instead of one. Then the wide prefill row's
// (decode_mla.cu: wide_shape), as many stages as fit beside Q: 384/384,
// 512/512 and 576/512, V in rings of its own. None for Dqk 288 and 320: there
// the wgmma kernel's column slices measured faster (bench/NOTES.md, sessions
// 44-45).
inline constexpr MlaShape kMlaShapes[] = {{kMlaHeadDimQk / 64, kMlaHeadDimV / 2, false, 4},
                                          {6, 192, true, 3},
                                          {8, 256, true, 2},
                                          {9, 256, true, 2}};
inline constexpr int kMlaLatent = 0;  // the shapes' indices
inline constexpr int kMlaWide384 = 1;
inline constexpr int kMlaWide512 = 2;
inline constexpr int kMlaWide576 = 3;
// The wide shapes in ascending order, so that the first that covers a
// problem is the smallest (wide_shape).
constexpr bool mla_wide_shapes_ascend() {
  int panels = 0;
  for (const MlaShape& s : kMlaShapes) {
    if (!s.separate_v) continue;
    if (s.qk_panels <= panels) return false;
    panels = s.qk_panels;
  }
  return true;
}
static_assert(mla_wide_shapes_ascend(), "kMlaShapes' wide shapes ascend");
// The TMA boxes, of one page's rows each, in which a K tile arrives from a
// page pool of `page_size` rows: 4 (pages of 8), 2 (16), 1 (a multiple of
// kMlaTileK); 0 for other page sizes, which the kernel does not take (a tile
// would straddle a box's page).
constexpr int mla_tile_boxes(int64_t page_size) {
  if (page_size == 8 || page_size == 16) return static_cast<int>(kMlaTileK / page_size);
  return page_size > 0 && page_size % kMlaTileK == 0 ? 1 : 0;
}
// Shared memory: Q (64 rows) and the stages (32 K rows each, and 32 V rows
// where V is apart), in 64-column panels of 128-byte rows; P of a tile as
// warpgroup 0's register fragments (k-steps x 4 registers x 128 threads),
// its rescale factors (one float2 a thread), mbarriers (per stage: full,
// free, and V full where V is apart; P written, P read; Q in); plus 1 KB to
// align the panels to 1024 bytes.
constexpr size_t mla_q_bytes(MlaShape s) { return size_t{kMlaRows} * s.qk_panels * 128; }
constexpr size_t mla_k_tile_bytes(MlaShape s) { return size_t{kMlaTileK} * s.qk_panels * 128; }
constexpr size_t mla_stage_bytes(MlaShape s) {
  return mla_k_tile_bytes(s) + (s.separate_v ? size_t{kMlaTileK} * (s.half_dv / 32) * 128 : 0);
}
inline constexpr size_t kMlaPBytes = size_t{kMlaTileK / 16} * 4 * 128 * 4;
inline constexpr size_t kMlaCorrectionBytes = size_t{128} * 8;
constexpr size_t mla_shared_bytes(MlaShape s) {
  return 1024 + mla_q_bytes(s) + s.stages * mla_stage_bytes(s) + kMlaPBytes + kMlaCorrectionBytes +
         ((s.separate_v ? 3 : 2) * size_t(s.stages) + 3) * 8;
}
constexpr bool mla_shapes_fit() {
  for (const MlaShape& s : kMlaShapes)
    if (mla_shared_bytes(s) > 227 * 1024 || s.half_dv % 64 != 0 || s.stages < 2) return false;
  return !kMlaShapes[kMlaLatent].separate_v && kMlaShapes[kMlaWide384].separate_v &&
         kMlaShapes[kMlaWide512].separate_v && kMlaShapes[kMlaWide576].separate_v;
}
static_assert(mla_shapes_fit(), "every shape fits the H100/H200 opt-in limit, whole panels");
static_assert(mla_tile_boxes(8) == 4 && mla_tile_boxes(16) == 2 && mla_tile_boxes(64) == 1 &&
              mla_tile_boxes(24) == 0 && mla_tile_boxes(0) == 0);

// The alternating-tile MLA kernel (decode_mla_latent.cu), for the latent
// cache: 64-key tiles in two buffers of kMlaHeadDimQk / 64 panels; warpgroup
// w computes S = Q K^T (m64n64) and the softmax of the tiles in buffer w,
// so one warpgroup's softmax overlaps the other's products, and each takes
// P V of both tiles for its 256 of O's columns. Splits and tiles start on
// multiples of kMlaAlternatingTileK keys.
inline constexpr int kMlaAlternatingTileK = 64;
inline constexpr int kMlaAlternatingPanels = kMlaHeadDimQk / 64;
// A panel of Q (64 rows) or of a K tile (64 keys): 64 rows of 128 bytes.
inline constexpr size_t kMlaAlternatingPanelBytes = size_t{64} * 128;
// The TMA boxes, of one page's rows each, in which a panel of a K tile
// arrives from a page pool of `page_size` rows: 8, 4, 2 (pages of 8, 16,
// 32), 1 (a multiple of 64); 0 for other sizes, which the kernel does not
// take (the MLA kernel of 32-key tiles serves other multiples of 32).
constexpr int mla_alternating_tile_boxes(int64_t page_size) {
  if (page_size == 8 || page_size == 16 || page_size == 32)
    return static_cast<int>(kMlaAlternatingTileK / page_size);
  return page_size > 0 && page_size % kMlaAlternatingTileK == 0 ? 1 : 0;
}
static_assert(mla_alternating_tile_boxes(8) == 8 && mla_alternating_tile_boxes(32) == 2 &&
              mla_alternating_tile_boxes(128) == 1 && mla_alternating_tile_boxes(96) == 0 &&
              mla_alternating_tile_boxes(0) == 0);
// Shared memory: Q and the two tile buffers (panels of 8 KB); the running
// row max after each tile of a pair (2 x 64 floats); the row statistics and the split pairs'
// weights (128 float2); the second warpgroup's row sums (64 floats); one mbarrier per panel of each
// buffer, Q's and a pair's four hand-offs; plus 1 KB to align the panels to 1024 bytes.
inline constexpr size_t kMlaAlternatingSharedBytes =
    1024 + size_t{3} * kMlaAlternatingPanels * kMlaAlternatingPanelBytes + 128 * 4 + 128 * 8 +
    64 * 4 + (2 * size_t{kMlaAlternatingPanels} + 5) * 8;
static_assert(kMlaAlternatingSharedBytes <= 227 * 1024, "fits the H100/H200 opt-in limit");

// Every bucket has a tiling of at least two stages in every class.
constexpr bool decode_mma_tiled_in_every_class(int dqk, int dv) {
  for (int c = 0; c < kSharedClasses; ++c)
    if (decode_mma_config(dqk, dv, c).stages < 2) return false;
  return true;
}
static_assert(decode_mma_tiled_in_every_class(64, 64) &&
              decode_mma_tiled_in_every_class(128, 128) &&
              decode_mma_tiled_in_every_class(192, 128) &&
              decode_mma_tiled_in_every_class(256, 256) &&
              decode_mma_tiled_in_every_class(320, 320) &&
              decode_mma_tiled_in_every_class(512, 512) &&
              decode_mma_tiled_in_every_class(576, 512));
// sm_90's tilings (bench/NOTES.md's measurements), and the smaller budgets'
// for 64 and 128 (two blocks per SM, four and two stages of 2 streams).
static_assert(decode_mma_config(128, 128, 0).dv_parts == 2 &&
              decode_mma_config(128, 128, 0).stages == 3 &&
              decode_mma_config(512, 512, 0).dv_parts == 8 &&
              decode_mma_config(576, 512, 0).min_blocks == 2);
static_assert(decode_mma_config(64, 64, 2).min_blocks == 2 &&
              decode_mma_config(128, 128, 2).min_blocks == 2 &&
              decode_mma_config(128, 128, 2).stages == 2);
// 320 in 99 KB: one block, without the Q.K exchange.
static_assert(!decode_mma_config(320, 320, 2).split_qk &&
              decode_mma_config(320, 320, 2).stages == 2);

static_assert(decode_tile_config(4, 64, 64).keys_per_warp == 16);
static_assert(decode_tile_config(4, 128, 128).keys_per_warp == 8);
static_assert(decode_kernel_rows(8, 1) == 1 && decode_kernel_rows(8, 3) == 4);
static_assert(decode_kernel_rows(8, 4) == 4 && decode_kernel_rows(8, 32) == 8);
static_assert(decode_kernel_rows(5, 5) == 5 && decode_kernel_rows(5, 3) == 4);
static_assert(decode_tile_config(4, 576, 512).keys_per_warp == 4);
static_assert(decode_tile_config(4, 128, 128).rows == 8);
static_assert(decode_tile_config(4, 576, 512).rows == 4);
// P.V needs at least one key per lane group: 32 / value lanes <= keys per warp.
static_assert(32 / decode_value_lanes(4, 64) <= decode_tile_config(4, 64, 64).keys_per_warp);
// The largest instance fits the H100/H200 227 KB opt-in limit.
static_assert(decode_smem_layout(4, 576, 512, false).total <= 227 * 1024);

}  // namespace fsdpa::detail::cuda
