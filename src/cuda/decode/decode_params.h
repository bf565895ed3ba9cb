// What one decode launch needs, in plain values: built on the host by
// decode.cu from the plan and the tensors, read by the kernels.
#pragma once

#include <cstdint>

#include "core/kv_cache.h"

namespace fsdpa::detail::cuda {

// Mask storage kinds as the kernels see them (fsdpa::MaskKind + dtype).
enum class DecodeMask : int32_t { None = 0, AddF32 = 1, AddF16 = 2, AddBF16 = 3, Bool = 4 };

// Element strides of a rank-4 view in (batch, head, row, column) order.
struct Strides4 {
  int64_t batch = 0, head = 0, row = 0, col = 0;
};

struct DecodeParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;          // null when not asked for
  const void* mask = nullptr;    // null when mask == None
  const float* sinks = nullptr;  // null when there are none
  // Split partials (num_splits > 1): (max, sum) pairs [splits][rows][2], then
  // unnormalized outputs [splits][rows][dv_ws], rows = batch * heads_q * len_q.
  float* partial_out = nullptr;
  float* partial_max_sum = nullptr;

  Strides4 q_strides, out_strides, mask_strides;  // mask: broadcast = 0
  // k's and v's by role (core/kv_cache.h): `outer` steps the batch, or the
  // page of a paged cache.
  KvStrides k_strides, v_strides;
  // Where key j of sequence b is and how many keys sequence b has (dense or
  // paged, core/kv_cache.h); kv.len_k is the capacity len_k.
  KvIndex kv;
  Strides4 lse_strides;  // batch, head, row
  int64_t sinks_stride = 0;

  int32_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0;
  int32_t head_dim_qk = 0, head_dim_v = 0;
  int32_t kv_group_size = 0;     // heads_q / heads_kv
  int32_t rows_per_kv_head = 0;  // kv_group_size * len_q: the packed query rows of a tile
  int32_t row_chunks = 0;        // ceil(rows_per_kv_head / tile rows)
  float scale_log2 = 0.f;        // scale * log2(e): scores are kept in the exp2 domain
  float softcap_log2 = 0.f;      // Options::softcap * log2(e) (0: none)
  float inverse_softcap_log2 = 0.f;
  DecodeMask mask_kind = DecodeMask::None;
  int32_t causal = 0;
  int32_t has_window = 0;
  int64_t window_left = 0;
  int32_t causal_bottom_right = 1;  // CausalAlign::BottomRight, with each sequence's length
  int32_t v_aliases_k = 0;          // MLA: v is the first Dv columns of k: read them once
  // The widest access every row start of q, k, v and out allows
  // (Problem::row_alignment: 16, 8, 4 or 2 bytes); below 16 the split
  // kernels copy through copy_16_narrow and store element by element.
  int32_t copy_bytes = 16;
  // Below 16: k's and v's rows are dense and contiguous (row stride = head
  // dim), 4-byte aligned, in tensors whose base address is 16-byte aligned,
  // and v does not alias k: the tensor-core kernel copies each stage's rows
  // as one span (decode_mma_kernel.cuh: KvLoad::Packed).
  int32_t packed_kv = 0;
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
