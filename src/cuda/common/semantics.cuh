// docs/design.md's (Semantics) masking rules as every CUDA kernel sees them:
// core/key_range.h's visible-key rule, plus the array mask and sinks.
#pragma once

#include <cstdint>

#include "core/key_range.h"
#include "cuda/common/params.h"
#include "cuda/common/score.cuh"

namespace fsdpa::detail::cuda {

struct DeviceKeyRange {
  int begin;
  int end;  // empty when end <= begin
};

// Keys [begin, end) that causal masking and the window leave to `row`
// (core/key_range.h's rule).
__host__ __device__ inline DeviceKeyRange visible_key_range(const MaskSemantics& s, int64_t row) {
  const KeyRange range = detail::visible_key_range(row + s.diagonal_offset, s.len_k, s.causal,
                                                   s.has_window, s.window_left);
  return {static_cast<int>(range.begin), static_cast<int>(range.end)};
}

// Keys [begin, end) query position `row` of a sequence of `len_k` keys
// sees (per-sequence lengths: the diagonal offset is that sequence's).
__host__ __device__ inline DeviceKeyRange visible_keys_of_sequence(const MaskSemantics& s,
                                                                   int64_t len_k, int64_t row) {
  const KeyRange range =
      detail::visible_key_range(row + diagonal_offset(s.bottom_right, s.len_q, len_k), len_k,
                                s.causal, s.has_window, s.window_left);
  return {static_cast<int>(range.begin), static_cast<int>(range.end)};
}

// The array mask's element offset of query row `row` of (batch, head), key 0.
__host__ __device__ inline int64_t mask_row_offset(const MaskSemantics& s, int64_t batch,
                                                   int64_t head, int64_t row) {
  return batch * s.mask_strides[0] + head * s.mask_strides[1] + row * s.mask_strides[2];
}

// The array mask's term of key `key` of the row at `row_offset`
// (mask_row_offset) in the exp2 domain: the additive value times log2(e),
// or 0 / -inf for a boolean one. Callers check mask_kind != 0 first.
__device__ __forceinline__ float mask_term_log2(const MaskSemantics& s, int64_t row_offset,
                                                int64_t key) {
  return load_mask_value(s.mask, s.mask_dtype, row_offset + key * s.mask_strides[3]) * kLog2e;
}

}  // namespace fsdpa::detail::cuda
