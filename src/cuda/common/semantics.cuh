// docs/design.md's (Semantics) masking rules as the CUDA kernels see them: the same
// visible-key rule as src/core/semantics.h, plus the array mask and sinks.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "cuda/common/score.cuh"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cuda {

struct MaskSemantics {
  int64_t len_q = 0;
  int64_t len_k = 0;
  int64_t diagonal_offset = 0;  // Lk - Lq (bottom-right) or 0 (top-left)
  int64_t window_left = 0;
  bool causal = false;
  bool has_window = false;
  int mask_kind = 0;   // fsdpa::MaskKind
  int mask_dtype = 0;  // fsdpa::DType
  const void* mask = nullptr;
  int64_t mask_strides[4] = {};  // 0 where the mask broadcasts
  const float* sinks = nullptr;
  int64_t sink_stride = 0;
  // Options::softcap in natural units (0: none); kernels in the exp2 domain
  // scale it by log2(e).
  float softcap = 0.0f;
};

struct DeviceKeyRange {
  int begin;
  int end;  // empty when end <= begin
};

__host__ __device__ inline int64_t clamp_key(int64_t x, int64_t len_k) {
  return x < 0 ? 0 : (x > len_k ? len_k : x);
}

// Keys [begin, end) that causal masking and the window leave to `row`.
__host__ __device__ inline DeviceKeyRange visible_key_range(const MaskSemantics& s, int64_t row) {
  const int64_t diagonal = row + s.diagonal_offset;
  DeviceKeyRange range{0, static_cast<int>(s.len_k)};
  if (s.causal) range.end = static_cast<int>(clamp_key(diagonal + 1, s.len_k));
  if (s.has_window && s.window_left <= diagonal)  // else the window reaches key 0
    range.begin = static_cast<int>(clamp_key(diagonal - s.window_left, s.len_k));
  return range;
}

// Host side: the semantics of a validated call.
inline MaskSemantics make_mask_semantics(const Problem& p, const Options& options,
                                         const Tensors& t) {
  MaskSemantics s;
  s.len_q = p.len_q;
  s.len_k = p.len_k;
  s.diagonal_offset = options.causal_align == CausalAlign::BottomRight ? p.len_k - p.len_q : 0;
  s.causal = options.causal;
  s.has_window = options.window_left.has_value();
  s.window_left = options.window_left.value_or(0);
  s.mask_kind = static_cast<int>(p.mask);
  s.softcap = static_cast<float>(options.softcap);
  if (t.mask) {
    const TensorView m = broadcast_strides(*t.mask);
    s.mask = m.data;
    s.mask_dtype = static_cast<int>(m.dtype);
    for (int d = 0; d < 4; ++d) s.mask_strides[d] = m.strides[d];
  }
  if (t.sinks) {
    s.sinks = static_cast<const float*>(t.sinks->data);
    s.sink_stride = t.sinks->strides[0];
  }
  return s;
}

}  // namespace fsdpa::detail::cuda
