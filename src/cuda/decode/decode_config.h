// The decode family's tuning, as constexpr data shared by the host (plan,
// workspace, shared-memory size) and the kernels. No CUDA header here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdpa::detail::cuda {

// Few-query shapes only: every packed query row costs CUDA-core FMAs on each
// K/V element, and past ~16 rows per kv head the prefill family's tensor-core
// tiles win (the decode limit of DESIGN.md's selection table).
inline constexpr int64_t kDecodeMaxLenQ = 16;
// The largest head dims the compiled buckets cover (576/512: DeepSeek MLA).
inline constexpr int64_t kDecodeMaxHeadDimQk = 576;
inline constexpr int64_t kDecodeMaxHeadDimV = 512;
// Upper bound on key splits (the combine kernel keeps one weight per split in
// shared memory), also the cap of FSDPA_DECODE_SPLITS.
inline constexpr int kDecodeMaxSplits = 4096;
// A split reads at least this many keys: below it the fixed cost of a block
// (q load, merge, partial write) and of the combine outweigh more parallelism.
inline constexpr int kDecodeMinKeysPerSplit = 256;

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
// A warp stages at most one key per lane. 32 (not 16) lets D=64 bf16 carry
// 32 keys per step, halving the per-step softmax work (shuffles, exp2) per key.
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

static_assert(decode_tile_config(2, 64, 64).keys_per_warp == 32);
static_assert(decode_tile_config(2, 128, 128).keys_per_warp == 16);
static_assert(decode_kernel_rows(8, 1) == 1 && decode_kernel_rows(8, 3) == 4);
static_assert(decode_kernel_rows(8, 4) == 4 && decode_kernel_rows(8, 32) == 8);
static_assert(decode_kernel_rows(5, 5) == 5 && decode_kernel_rows(5, 3) == 4);
static_assert(decode_tile_config(2, 576, 512).keys_per_warp == 4);
static_assert(decode_tile_config(2, 128, 128).rows == 8);
static_assert(decode_tile_config(2, 512, 512).rows == 4);
static_assert(decode_tile_config(4, 576, 512).rows == 4);
// P.V needs at least one key per lane group: 32 / value lanes <= keys per warp.
static_assert(32 / decode_value_lanes(2, 64) <= decode_tile_config(2, 64, 64).keys_per_warp);
static_assert(32 / decode_value_lanes(4, 64) <= decode_tile_config(4, 64, 64).keys_per_warp);
// The largest instance fits the H100/H200 227 KB opt-in limit.
static_assert(decode_smem_layout(4, 576, 512, false).total <= 227 * 1024);

}  // namespace fsdpa::detail::cuda
