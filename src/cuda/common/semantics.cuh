// docs/design.md's (Semantics) masking rules as the CUDA prefill kernels see
// them: core/key_range.h's visible-key rule, plus the array mask and sinks.
#pragma once

#include <cstdint>

#include "core/key_range.h"
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

// Keys [begin, end) that causal masking and the window leave to `row`
// (core/key_range.h's rule).
__host__ __device__ inline DeviceKeyRange visible_key_range(const MaskSemantics& s, int64_t row) {
  const KeyRange range = detail::visible_key_range(row + s.diagonal_offset, s.len_k, s.causal,
                                                   s.has_window, s.window_left);
  return {static_cast<int>(range.begin), static_cast<int>(range.end)};
}

// Host side: the semantics of a validated call.
inline MaskSemantics make_mask_semantics(const Problem& p, const Options& options,
                                         const Tensors& t) {
  MaskSemantics s;
  s.len_q = p.len_q;
  s.len_k = p.len_k;
  s.diagonal_offset =
      diagonal_offset(options.causal_align == CausalAlign::BottomRight, p.len_q, p.len_k);
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
