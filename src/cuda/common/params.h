// What every CUDA attention launch reads about its call, whatever its family
// (the prefill kernels, the decode and MLA kernels, the unfused path's
// softmax and repair kernels): the tensors and their strides by role, the
// shape, the score rule in the exp2 domain and the masking semantics. One
// host builder, make_attention_params, fills it from a plan and the
// tensors; a family's parameters extend it with what its schedule needs
// (PrefillParams, DecodeParams, the unfused kernels' own). Plain data:
// pointers to device memory, strides in elements.
#pragma once

#include <cstdint>

#include "core/kv_cache.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cuda {

// Element strides of a rank-4 view in (batch, head, row, column) order; an
// lse view (batch, head, row) leaves col 0.
struct Strides4 {
  int64_t batch = 0, head = 0, row = 0, col = 0;
};

// The masking semantics of a call (semantics.cuh applies them).
struct MaskSemantics {
  int64_t len_q = 0;
  int64_t len_k = 0;
  // The call's diagonal offset: Lk - Lq (bottom-right) or 0 (top-left).
  // Kernels over per-sequence lengths (decode) find each sequence's from
  // bottom_right and its length (visible_keys_of_sequence).
  int64_t diagonal_offset = 0;
  int64_t window_left = 0;
  bool causal = false;
  bool has_window = false;
  bool bottom_right = true;  // CausalAlign::BottomRight
  int mask_kind = 0;         // fsdpa::MaskKind
  int mask_dtype = 0;        // fsdpa::DType
  const void* mask = nullptr;
  int64_t mask_strides[4] = {};  // 0 where the mask broadcasts
  const float* sinks = nullptr;
  int64_t sink_stride = 0;
  // Options::softcap in natural units (0: none); kernels in the exp2 domain
  // scale it by log2(e).
  float softcap = 0.0f;
};

struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // null when not asked for
  Strides4 q_strides, out_strides, lse_strides;
  // k's and v's by role (core/kv_cache.h): `outer` steps the batch, or the
  // page of a paged cache.
  KvStrides k_strides, v_strides;
  // Where key j of sequence b is and how many keys sequence b has (dense or
  // paged, core/kv_cache.h); kv.len_k is the capacity len_k.
  KvIndex kv;
  int32_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0;
  int32_t head_dim_qk = 0, head_dim_v = 0;
  int32_t kv_group_size = 1;  // heads_q / heads_kv
  int32_t v_aliases_k = 0;    // MLA: v is the first Dv columns of k: read them once
  // The widest global access every row start of q, k, v and out allows
  // (Problem::row_alignment of these tensors: 16, 8, 4 or 2 bytes): the
  // kernels' copies and stores narrow to it.
  int32_t copy_bytes = 16;
  // The score rule in the exp2 domain: scores are products times
  // scale_log2 = scale * log2(e). The soft cap (0: none) in the forms the
  // kernels read (score.cuh): the cap in log2 units, its inverse, twice it,
  // and soft_cap_weight's factor of a raw product (2 scale log2(e) / cap),
  // worked out here so that no kernel derives them in registers (derived on
  // the device, they cost the 256/256 wgmma consumer a spill).
  float scale_log2 = 0.0f;
  float softcap_log2 = 0.0f, inverse_softcap_log2 = 0.0f, two_softcap_log2 = 0.0f,
        softcap_exponent = 0.0f;
  // Causal, window, the array mask, sinks.
  MaskSemantics semantics;
};

// The parameters of a validated call (plan(problem) made `plan`; `t` holds
// its tensors).
AttentionParams make_attention_params(const Plan& plan, const Tensors& t);

}  // namespace fsdpa::detail::cuda
