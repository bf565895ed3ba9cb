// What one decode launch needs: the call's AttentionParams and the split
// schedule's facts, built on the host by decode.cu from the plan and the
// tensors, read by the kernels.
#pragma once

#include <cstdint>

#include "cuda/common/params.h"

namespace fsdpa::detail::cuda {

// A decode launch: the call (params.h) and the split schedule's facts.
struct DecodeParams : AttentionParams {
  // Split partials (num_splits > 1): (max, sum) pairs [splits][rows][2], then
  // unnormalized outputs [splits][rows][dv_ws], rows = batch * heads_q * len_q.
  float* partial_out = nullptr;
  float* partial_max_sum = nullptr;
  int32_t rows_per_kv_head = 0;  // kv_group_size * len_q: the packed query rows of a tile
  int32_t row_chunks = 0;        // ceil(rows_per_kv_head / tile rows)
  // With copy_bytes below 16: k's and v's rows are dense and contiguous
  // (row stride = head dim), 4-byte aligned, in tensors whose base address
  // is 16-byte aligned, and v does not alias k: the tensor-core kernel
  // copies each stage's rows as one span (decode_mma_kernel.cuh:
  // KvLoad::Packed).
  int32_t packed_kv = 0;
  // Set by the launch of the tensor-core kernel on a paged cache: each
  // stream's 16 keys of a stage arrive as TMA boxes of their page's rows
  // (decode_mma_kernel.cuh: KvLoad::Paged), where the bucket allows it
  // (decode_mma_page_boxes), pages hold a multiple of 16 rows, and k's and
  // v's bases and strides are 16-byte aligned (page_boxes_fit).
  int32_t page_boxes = 0;
  // Keys [key_begin, key_end) hold every key any row can see (all of
  // [0, len_k) with per-sequence lengths); split s covers
  // [key_begin + s * split keys, ...) of it. The split keys are
  // keys_per_split, a multiple of split_keys_multiple; in a list of splits
  // (split_slots > 0), at least the batch's mean length over split_slots
  // (decode_common.cuh: batch_split_keys).
  int32_t key_begin = 0, key_end = 0, keys_per_split = 0, split_keys_multiple = 1;
  // The most splits of one sequence: the partials' slots, and (without a
  // list of splits) the grid's splits.
  int32_t num_splits = 1;
  // Where the grid is a list of splits over the batch's lengths
  // (decode_common.cuh: decode_block): the splits a sequence of the batch's
  // mean length takes (Plan::kv_split_slots); 0: every sequence's num_splits
  // splits (one sequence, one split, or a kernel without a list:
  // decode_mma_split_list).
  int32_t split_slots = 0;
  int32_t dv_ws = 0;  // row stride of partial_out (Dv)
  // The splits of each row chunk run as one cluster and merge there
  // (store_cluster_rows): no partials in the workspace, no combine kernel.
  int32_t cluster_merge = 0;
};

// The split kernels' grid. A list holds at most batch x (split_slots + 1) x
// kv heads x row chunks blocks: split keys of at least (sum of lengths) /
// (batch x split_slots) give sum(ceil(L_b / keys)) <= batch x split_slots +
// batch.
inline int64_t decode_grid_blocks(const DecodeParams& p) {
  const int64_t per_split = int64_t(p.batch) * p.heads_kv * p.row_chunks;
  if (p.split_slots == 0) return per_split * p.num_splits;
  const int64_t splits = int64_t(p.split_slots) + 1;
  return per_split * (splits < p.num_splits ? splits : p.num_splits);
}

}  // namespace fsdpa::detail::cuda
