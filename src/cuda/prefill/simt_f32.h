// The exact f32 fused prefill path: the same tiled online softmax on FP32
// CUDA cores (no TF32), for every Dqk <= 576, Dv <= 512 with runtime head
// dims (Dv above 256 in column slices) and any alignment.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "cuda/common/shared_budget.h"
#include "cuda/prefill/config.h"
#include "cuda/prefill/params.h"
#include "select/table.h"

namespace fsdpa::detail::cuda {

// A block's tile: query rows (simt_f32_lanes lanes each) and keys per K/V tile.
struct SimtF32Tile {
  int rows, keys;
};
// Largest first; a plan takes the first whose shared memory fits the device's
// block: 227 KB (sm_90) holds 32 x 32 up to 576/256; 163 KB (sm_80) needs 16
// keys from Dqk 497 with 256-column slices; 99 KB (sm_86/89) 16 keys from
// 241 and 16 rows from 425.
inline constexpr SimtF32Tile kSimtF32Tiles[] = {{32, 32}, {32, 16}, {16, 16}};

// Floats of a row of Q or K in shared memory: whole float4s, an odd count
// of them, so that the float4s of 8 rows (or keys) that a warp reads at once
// fall in distinct banks; the pad is zeros.
constexpr int simt_f32_qk_stride(int64_t head_dim_qk) {
  return static_cast<int>((head_dim_qk + 7) / 8 * 8 + 4);
}
// The columns of a Dv slice (PrefillParams::v_slice_width): v_slice_columns
// rounded up to whole float4s, so that the second slice's first column
// keeps the rows' 16-byte alignment and its copies their 16-byte chunks (at
// 150 columns a slice, Dv=300, it sat 8 bytes off: cp.async read the wrong
// columns without a fault).
constexpr int64_t simt_f32_v_slice_width(int64_t head_dim_v) {
  return (v_slice_columns(head_dim_v) + 3) / 4 * 4;
}
static_assert(simt_f32_v_slice_width(300) == 152 && simt_f32_v_slice_width(512) == 256,
              "whole float4s, no wider than the largest slice");

// Floats of a row of V: whole float4s (a row's lanes read consecutive ones).
constexpr int simt_f32_v_stride(int64_t v_slice_width) {
  return static_cast<int>((v_slice_width + 3) / 4 * 4);
}

// Q and K rows, V rows, and the P tile (rows padded by one float).
constexpr size_t simt_f32_shared_bytes(SimtF32Tile tile, int64_t head_dim_qk,
                                       int64_t v_slice_width) {
  return sizeof(float) *
         (static_cast<size_t>(tile.rows + tile.keys) * simt_f32_qk_stride(head_dim_qk) +
          static_cast<size_t>(tile.keys) * simt_f32_v_stride(v_slice_width) +
          static_cast<size_t>(tile.rows) * (tile.keys + 1));
}

static_assert(simt_f32_shared_bytes(kSimtF32Tiles[0], 576, 256) <= kSm90SharedBytes,
              "sm_90 takes the largest tile at every head dim");
static_assert(simt_f32_shared_bytes(kSimtF32Tiles[std::size(kSimtF32Tiles) - 1], 576, 256) <=
                  kSharedBudgets[kSharedClasses - 1],
              "the smallest budget holds the smallest tile at every head dim");

// Lanes a query row for a block of `tile_bytes` of shared memory: 8 where the
// block holds its SM alone (two do not fit `shared_bytes_per_block`, about
// an SM's shared memory), so that one block still has two warps a scheduler;
// else 4, where blocks share the SM: eight lanes were faster where one block
// holds the SM, slower where two share it (bench/NOTES.md, sessions 44-45).
constexpr int simt_f32_lanes(size_t tile_bytes, size_t shared_bytes_per_block) {
  return 2 * tile_bytes > shared_bytes_per_block ? 8 : 4;
}

static_assert(
    simt_f32_lanes(simt_f32_shared_bytes(kSimtF32Tiles[0], 576, 256), kSm90SharedBytes) == 8 &&
        simt_f32_lanes(simt_f32_shared_bytes(kSimtF32Tiles[0], 300, 152), kSm90SharedBytes) == 4 &&
        simt_f32_lanes(simt_f32_shared_bytes(kSimtF32Tiles[0], 128, 128), kSm90SharedBytes) == 4,
    "eight lanes at 576/512 on sm_90 (one block an SM), four at 300 and 128");

// The index in kSimtF32Tiles of the tile a problem of these head dims takes
// with `shared_bytes_per_block`, or -1 where none fits.
int simt_f32_tile(int64_t head_dim_qk, int64_t head_dim_v, size_t shared_bytes_per_block);

Verdict simt_f32_supports(const Problem& problem, const Options& options);
// The plan carries the tile's launch.
void simt_f32_configure(const Problem& problem, Plan& plan);
void simt_f32_launch(const Plan& plan, const PrefillParams& params, cudaStream_t stream);

}  // namespace fsdpa::detail::cuda
