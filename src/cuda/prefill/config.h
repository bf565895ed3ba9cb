// Tile shapes of the mma.sync prefill kernel, by head-dim bucket. One row
// per size class; each row's reason is what the compiler's resource report
// (ptxas -v) and the H200 showed for it.
#pragma once

#include <cstdint>
#include <iterator>

#include "cuda/common/shared_budget.h"
#include "cuda/common/staged_copy.h"

namespace fsdpa::detail::cuda {

struct PrefillTile {
  int warps;       // each warp owns row_tiles * 16 query rows
  int row_tiles;   // 16-row mma tiles per warp: >1 reuses each K/V fragment
  int tile_k;      // keys per pipeline stage
  int stages;      // cp.async ring depth (K and V of one tile per stage)
  int min_blocks;  // __launch_bounds__ occupancy hint
};

constexpr int max_bucket(int head_dim_qk_bucket, int head_dim_v_bucket) {
  return head_dim_qk_bucket > head_dim_v_bucket ? head_dim_qk_bucket : head_dim_v_bucket;
}

// The most output columns one block holds (O in registers: Dv / 2 floats a
// thread at 256 in the 16-bit kernels, Dv / 4 in the f32 one); a larger Dv
// runs in column slices (PrefillParams::v_slice_shift), each computing Q K^T anew.
constexpr int kLargestVSlice = 256;

constexpr int64_t v_slices_of(int64_t head_dim_v) {
  return head_dim_v <= kLargestVSlice ? 1 : (head_dim_v + kLargestVSlice - 1) / kLargestVSlice;
}
// The columns one slice needs (the slices share Dv evenly).
constexpr int64_t v_slice_columns(int64_t head_dim_v) {
  return (head_dim_v + v_slices_of(head_dim_v) - 1) / v_slices_of(head_dim_v);
}
static_assert(v_slices_of(256) == 1 && v_slices_of(288) == 2 && v_slice_columns(288) == 144 &&
                  v_slices_of(512) == 2 && v_slice_columns(512) == 256,
              "Dv slices");
// The kernels take the slice count as a shift: up to Dv = 512, 1 or 2.
static_assert(v_slices_of(512) == 2, "a power-of-two slice count up to the largest Dv");

constexpr int prefill_tile_q(const PrefillTile& t) { return t.warps * t.row_tiles * 16; }

// Shared memory of one block: Q tile plus `stages` K and V tiles, each row
// padded by 16 bytes so ldmatrix's 8 row addresses fall in distinct banks.
constexpr int prefill_shared_bytes(const PrefillTile& t, int head_dim_qk_bucket,
                                   int head_dim_v_bucket, int element_bytes) {
  const int q = prefill_tile_q(t) * (head_dim_qk_bucket + 8);
  const int kv = t.stages * t.tile_k * (head_dim_qk_bucket + 8 + head_dim_v_bucket + 8);
  return (q + kv) * element_bytes;
}

// Measured on the H200 (bench/prefill_tune.cu, bf16 B=4 H=16 L=4096, TFLOP/s
// non-causal/causal; 2026-11-29): see bench/NOTES.md "CUDA prefill". The
// buckets up to 128 fit every budget (kSharedBudgets) with these
// tiles; above, each budget takes the first tile of its list that fits.
constexpr PrefillTile prefill_tile(int head_dim_qk_bucket, int head_dim_v_bucket,
                                   int shared_bytes = kSm90SharedBytes) {
  const int d = max_bucket(head_dim_qk_bucket, head_dim_v_bucket);
  // <= 64: 225/184, vs 183/166 with one row tile x 3 blocks/SM (244 registers).
  if (d <= 64) return {4, 2, 64, 3, 2};
  // <= 128: 250/209, vs 217/193 for 8 warps x 1 row tile x 64 keys and 180/165
  // for 4 x 1 x 64 at 2 blocks/SM; 64 keys with 2 row tiles spill (ptxas).
  if (d <= 128) return {4, 2, 32, 3, 1};
  // <= 256 on sm_90: 236/213, vs 173/167 for 4 warps x 32 keys at 2
  // blocks/SM; O alone is 128 registers at Dv=256, so one row tile per warp
  // (243 registers). Dqk > 256 (Dv a slice of <= 256 columns): the same
  // shape with the longest key tile whose 128-row Q tile and K/V stages fit
  // (Q alone is 74-146 KB at 288-576); not yet tuned.
  constexpr PrefillTile kSm90[] = {{8, 1, 64, 2, 1}, {8, 1, 32, 2, 1}, {8, 1, 16, 3, 1}};
  // Smaller budgets (untuned: the H200 runs them only under
  // FSDPA_SHARED_MEMORY_LIMIT): 32 keys before 128 query rows, as the Q tile
  // is read again for every key tile; then 16 keys, then 32 rows.
  constexpr PrefillTile kSmaller[] = {{8, 1, 64, 2, 1}, {8, 1, 32, 2, 1}, {4, 1, 32, 2, 1},
                                      {4, 1, 16, 3, 1}, {4, 1, 16, 2, 1}, {2, 1, 16, 3, 1},
                                      {2, 1, 16, 2, 1}};
  if (shared_bytes >= kSm90SharedBytes) {
    for (const PrefillTile& t : kSm90)
      if (prefill_shared_bytes(t, head_dim_qk_bucket, head_dim_v_bucket, 2) <= shared_bytes)
        return t;
  }
  for (const PrefillTile& t : kSmaller)
    if (prefill_shared_bytes(t, head_dim_qk_bucket, head_dim_v_bucket, 2) <= shared_bytes) return t;
  return kSmaller[std::size(kSmaller) - 1];  // the generated table asserts that it fits
}

// A tile as one int, for kernel template arguments (nvcc 13's host stubs
// cannot spell class-type template arguments of __global__ templates).
constexpr int encode_tile(const PrefillTile& t) {
  return t.warps | t.row_tiles << 6 | t.tile_k << 10 | t.stages << 20 | t.min_blocks << 26;
}
constexpr PrefillTile decode_tile(int code) {
  return {code & 63, code >> 6 & 15, code >> 10 & 1023, code >> 20 & 63, code >> 26 & 15};
}

constexpr int prefill_shared_bytes(int head_dim_qk_bucket, int head_dim_v_bucket, int element_bytes,
                                   int shared_class = 0) {
  return prefill_shared_bytes(
      prefill_tile(head_dim_qk_bucket, head_dim_v_bucket, kSharedBudgets[shared_class]),
      head_dim_qk_bucket, head_dim_v_bucket, element_bytes);
}

// The paired-slice kernel (pair_kernel.cuh): a Dv in two column slices
// computed by one block, so that Q K^T is computed once for both (the
// mma.sync kernel's slices, one block each, compute it twice: x1.5 the work
// at 512/512). Its 8 warps are 4 row tiles x 2 slices; the two warps of a
// row tile compute the scores of half the key tile each and trade their
// tile maxima and P through shared memory.
struct PairTile {
  int tile_k;  // keys per pipeline stage (each warp's scores: half of them)
  int stages;  // cp.async ring depth
};
inline constexpr int kPairRowTiles = 4;
inline constexpr int kPairWarps = 2 * kPairRowTiles;
inline constexpr int kPairTileQ = 16 * kPairRowTiles;

// Shared memory of one block: the Q tile, `stages` K tiles and V tiles of both
// slices' columns (rows padded by 16 bytes, as prefill_shared_bytes's), each
// warp's P (16 rows x tile_k / 2 keys, padded alike) and two floats a lane
// for the traded row statistics.
constexpr int pair_shared_bytes(const PairTile& t, int head_dim_qk_bucket, int head_dim_v_bucket) {
  const int q = kPairTileQ * (head_dim_qk_bucket + 8);
  const int kv = t.stages * t.tile_k * (head_dim_qk_bucket + 8 + 2 * head_dim_v_bucket + 8);
  const int p = kPairWarps * 16 * (t.tile_k / 2 + 8);
  return (q + kv + p) * 2 + kPairWarps * 32 * 2 * 4;
}

// The pair kernel's tile for a bucket pair whose Dv bucket may be a column
// slice (more than half of kLargestVSlice) in `shared_bytes`: the longest key
// tile of two stages that fits (each warp's share of the scores grows with
// it; untuned), or tile_k 0 where none fits or the bucket is never a slice,
// and then the mma.sync kernel runs the slices one block each.
constexpr PairTile prefill_pair_tile(int head_dim_qk_bucket, int head_dim_v_bucket,
                                     int shared_bytes = kSm90SharedBytes) {
  if (2 * head_dim_v_bucket <= kLargestVSlice) return {0, 0};
  constexpr PairTile kTiles[] = {{64, 2}, {32, 2}};
  for (const PairTile& t : kTiles)
    if (pair_shared_bytes(t, head_dim_qk_bucket, head_dim_v_bucket) <= shared_bytes) return t;
  return {0, 0};
}

// Whether the mma.sync row runs a call in `slices` column slices of a bucket
// pair on the pair kernel under `shared_bytes` (else a block a slice): the
// one rule that launch_prefill and the plan (prefill.cu) both read.
constexpr bool pair_kernel_serves(int head_dim_qk_bucket, int head_dim_v_bucket, int64_t slices,
                                  int shared_bytes) {
  return slices == 2 &&
         prefill_pair_tile(head_dim_qk_bucket, head_dim_v_bucket, shared_bytes).tile_k > 0;
}

static_assert(prefill_pair_tile(576, 256).tile_k == 32 &&
                  prefill_pair_tile(512, 256).tile_k == 32 &&
                  prefill_pair_tile(288, 144).tile_k == 64,
              "sm_90 pairs every large bucket");
static_assert(prefill_pair_tile(128, 128).tile_k == 0, "a 128 bucket is never a slice");

// The wgmma kernel (sm_90a, hopper_kernel.cuh): a producer warpgroup and 2
// consumer warpgroups of 64 query rows each per block; K and V tiles of
// hopper_tile_k keys, each in a ring of 2 stages.
constexpr int kHopperWarpgroups = 2;  // consumers
constexpr int kHopperThreads = (kHopperWarpgroups + 1) * 128;
constexpr int kHopperTileQ = kHopperWarpgroups * 64;
constexpr int kHopperStages = 2;
// The load stages (hopper_kernel.cuh's producer), chosen per launch by row
// alignment (PrefillParams::copy_bytes) and bucket: TMA boxes for 16-byte
// rows; below that bulk copies into a staging buffer (one a tile where the
// operand's rows are contiguous, else one a row) and a shift into the
// swizzle (cuda/common/staged_copy.cuh) where the bucket's tiles and the
// staging fit shared memory, else cp.async pieces of 8 or 4 bytes (nothing
// narrower).
// None: no stage copies such rows (2-byte rows of a bucket whose staging
// does not fit).
enum class HopperLoad : int { Tma, Staged, Pieces, None };
// Registers a thread of the producer and of the consumer warpgroups keep
// (setmaxnreg). The block launches with 168 a thread (65536 / 384); the
// producer gives back what the consumers take. Its TMA and cp.async pieces
// need 24; the staged stage moves rows through registers and keeps 40, so
// its consumers keep 232 and take shorter key tiles where 240 were needed
// (hopper_tile_k).
constexpr int hopper_producer_registers(HopperLoad load) {
  return load == HopperLoad::Staged ? 40 : 24;
}
constexpr int hopper_consumer_registers(HopperLoad load) {
  return load == HopperLoad::Staged ? 232 : 240;
}
static_assert(hopper_producer_registers(HopperLoad::Tma) * 128 +
                          hopper_consumer_registers(HopperLoad::Tma) * kHopperWarpgroups * 128 <=
                      65536 / kHopperThreads / 8 * 8 * kHopperThreads &&
                  hopper_producer_registers(HopperLoad::Staged) * 128 +
                          hopper_consumer_registers(HopperLoad::Staged) * kHopperWarpgroups * 128 <=
                      65536 / kHopperThreads / 8 * 8 * kHopperThreads,
              "the consumers take no more registers than the launch gave the block");

// Bytes of one operand tile as TMA writes it in the 128-byte swizzle: one
// panel of rows x 128 bytes per 64 columns (16-bit elements).
constexpr int swizzle128_bytes(int rows, int cols) { return (cols + 63) / 64 * rows * 128; }

// Shared memory of one wgmma block with key tiles of tile_k: Q, the K and V
// stages, the barriers (8 bytes each: Q's, and a full and an empty one per K
// and per V stage), and 1024 bytes to align the start to the swizzle's
// 1024-byte period.
constexpr int hopper_tile_bytes(int head_dim_qk_bucket, int head_dim_v_bucket, int tile_k) {
  return 1024 + swizzle128_bytes(kHopperTileQ, head_dim_qk_bucket) +
         kHopperStages * (swizzle128_bytes(tile_k, head_dim_qk_bucket) +
                          swizzle128_bytes(tile_k, head_dim_v_bucket)) +
         8 * (1 + 4 * kHopperStages);
}

// Keys per stage: the N of S = Q K^T, the K of O += P V. The longest key tile
// the consumers' registers and shared memory (227 KB) allow: fewer barrier
// waits and longer wgmma N per key. Registers per consumer thread: O is
// Dv / 2, S tile_k / 2 (f32), P of the previous tile tile_k / 4 (live while
// the softmax runs). ptxas -v (sm_90a): at 240 registers 128 keys spill from
// Dv = 112 on, 112 keys fit Dv = 128, 96 keys 176, 64 keys 256; at 232 (the
// staged stage) 128 keys spill at Dv = 96 and 112 keys at 128.
// Above 256 (Dv a column slice) the Q tile grows to 80-128 KB and the key
// tile shrinks to what fits: 64 at 288/320, 32 from 384 to 512 (not yet
// tuned); 576/256 fits no key tile (hopper_fits).
constexpr int hopper_tile_k(int head_dim_qk_bucket, int head_dim_v_bucket,
                            HopperLoad load = HopperLoad::Tma) {
  const bool staged = load == HopperLoad::Staged;
  const int preferred = head_dim_v_bucket <= (staged ? 80 : 96)     ? 128
                        : head_dim_v_bucket <= (staged ? 112 : 128) ? 112
                        : head_dim_v_bucket <= 176                  ? 96
                                                                    : 64;
  constexpr int kTileKs[] = {128, 112, 96, 64, 32};
  for (int tile_k : kTileKs)
    if (tile_k <= preferred &&
        hopper_tile_bytes(head_dim_qk_bucket, head_dim_v_bucket, tile_k) <= kSm90SharedBytes)
      return tile_k;
  return 32;
}

// The staged load stage's shared memory beyond the tiles: two staging
// buffers (a use each: Q, then the K and V tiles in turn) of 128 rows (Q's
// tile; key tiles are no longer) at staged_row_pitch of the wider bucket,
// their two barriers, and 16 bytes to align them after the others.
constexpr int hopper_staging_bytes(int head_dim_qk_bucket, int head_dim_v_bucket) {
  return 2 * kHopperTileQ * staged_row_pitch(max_bucket(head_dim_qk_bucket, head_dim_v_bucket)) +
         16 + 16;
}

constexpr int hopper_shared_bytes(int head_dim_qk_bucket, int head_dim_v_bucket,
                                  HopperLoad load = HopperLoad::Tma) {
  return hopper_tile_bytes(head_dim_qk_bucket, head_dim_v_bucket,
                           hopper_tile_k(head_dim_qk_bucket, head_dim_v_bucket, load)) +
         (load == HopperLoad::Staged ? hopper_staging_bytes(head_dim_qk_bucket, head_dim_v_bucket)
                                     : 0);
}

// The load stage of one launch: rows aligned to `copy_bytes` (16, 8, 4 or 2)
// of a bucket pair.
constexpr HopperLoad hopper_load(int copy_bytes, int head_dim_qk_bucket, int head_dim_v_bucket) {
  if (copy_bytes >= 16) return HopperLoad::Tma;
  if (copy_bytes >= 2 && hopper_shared_bytes(head_dim_qk_bucket, head_dim_v_bucket,
                                             HopperLoad::Staged) <= kSm90SharedBytes)
    return HopperLoad::Staged;
  if (copy_bytes >= 4) return HopperLoad::Pieces;
  return HopperLoad::None;
}

// Whether the wgmma kernel's tiles fit a pair (src/cuda/generate_instances.py builds
// it for exactly these pairs; the generated dispatch table asserts so).
constexpr bool hopper_fits(int head_dim_qk_bucket, int head_dim_v_bucket) {
  return hopper_shared_bytes(head_dim_qk_bucket, head_dim_v_bucket) <= kSm90SharedBytes;
}

static_assert(hopper_shared_bytes(256, 256) <= 227 * 1024, "256 wgmma bucket exceeds sm_90 smem");
static_assert(hopper_shared_bytes(128, 128) <= 227 * 1024, "128 wgmma bucket exceeds sm_90 smem");
static_assert(hopper_tile_k(64, 64) % 16 == 0 && hopper_tile_k(256, 256) % 16 == 0 &&
                  hopper_tile_k(256, 256) <= 256,
              "tile_k is a wgmma N (<= 256) and a multiple of the k step");
// The V descriptor's leading offset (one panel of tile_k rows) must fit 14 bits of 16 bytes.
static_assert(swizzle128_bytes(hopper_tile_k(128, 128), 64) < (1 << 18),
              "V panel too large for a wgmma descriptor");

static_assert(decode_tile(encode_tile(PrefillTile{8, 2, 128, 4, 3})).tile_k == 128 &&
                  decode_tile(encode_tile(PrefillTile{8, 2, 128, 4, 3})).min_blocks == 3,
              "tile code round trip");
static_assert(prefill_shared_bytes(256, 256, 2) <= 227 * 1024, "256 bucket exceeds sm_90 smem");
static_assert(prefill_shared_bytes(128, 128, 2) <= 227 * 1024, "128 bucket exceeds sm_90 smem");
static_assert(prefill_shared_bytes(576, 256, 2) <= kSm90SharedBytes &&
                  prefill_shared_bytes(512, 256, 2) <= kSm90SharedBytes,
              "the largest buckets (576/256, 512/256) exceed sm_90 smem");
static_assert(prefill_tile(256, 256, kSharedBudgets[2]).warps == 4 &&
                  prefill_tile(576, 256, kSharedBudgets[2]).warps == 2,
              "Gemma's 256 in 99 KB: 64 query rows; 576 in 99 KB: 32");
static_assert(prefill_tile(64, 64).tile_k % 16 == 0 && prefill_tile(256, 256).tile_k % 16 == 0,
              "tile_k must be a multiple of the mma k step");
static_assert(prefill_tile(64, 64).stages >= 2 && prefill_tile(128, 128).stages >= 2 &&
                  prefill_tile(256, 256).stages >= 2,
              "the pipeline needs at least 2 stages");

}  // namespace fsdpa::detail::cuda
