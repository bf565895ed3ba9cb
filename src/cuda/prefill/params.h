// What one fused prefill launch needs, shared by the host dispatch and the
// kernels. Plain data: strides in elements, pointers to device memory.
#pragma once

#include <cstdint>

#include "cuda/common/semantics.cuh"

namespace fsdpa::detail::cuda {

struct PrefillParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // null when not requested
  // [batch, head, row] strides; the last dimension has stride 1.
  int64_t q_strides[3] = {};
  int64_t k_strides[3] = {};
  int64_t v_strides[3] = {};
  int64_t out_strides[3] = {};
  int64_t lse_strides[3] = {};
  int batch = 0;
  int heads_q = 0;
  int kv_group_size = 1;  // heads_q / heads_kv
  int head_dim_qk = 0;
  int head_dim_v = 0;
  // Dv in 2^v_slice_shift column slices, one block each (a Dv above what one
  // block's registers hold): slice s covers columns
  // [s * v_slice_width, min((s + 1) * v_slice_width, head_dim_v)), and
  // v_slice_width is at most the kernel's Dv bucket. 1 slice for Dv <= 256.
  // A power of two: the kernels split blockIdx.x by a shift (a division by
  // a runtime count cost the wgmma kernel registers and speed: bench/NOTES.md,
  // session 11).
  int v_slice_shift = 0;
  int v_slice_width = 0;
  // The widest global access every row start of q, k, v and out allows
  // (Problem::row_alignment of these tensors: 16, 8, 4 or 2 bytes): the
  // mma.sync kernel's copies and stores narrow to it.
  int copy_bytes = 16;
  // The first byte past each of q, k and v (their last element's end): the
  // wgmma kernel's staged load stage copies the 16-byte blocks that cover a
  // row and reads no block past these.
  const char* q_end = nullptr;
  const char* k_end = nullptr;
  const char* v_end = nullptr;
  // The wgmma kernel's load stage (HopperLoad, config.h), set by its launch,
  // and for the staged one which operands' rows are contiguous (each tile
  // one bulk copy): bit 0 q, 1 k, 2 v.
  int hopper_load = 0;
  int staged_packed = 0;
  float scale_log2 = 0.0f;  // scale * log2(e): scores live in the exp2 domain
  // The soft cap (semantics.softcap > 0) as CappedScores reads it: the cap
  // in log2 units, twice that, and soft_cap_weight's factor of a raw
  // product (scale_log2 * 2 log2(e) / cap = 2 scale log2(e) / softcap).
  // Worked out on the host so that the kernels read them as parameters:
  // derived on the device from semantics.softcap they held registers, and
  // the 256/256 wgmma consumer spilled.
  float softcap_log2 = 0.0f, two_softcap_log2 = 0.0f, softcap_exponent = 0.0f;
  MaskSemantics semantics;
#if defined(FSDPA_PREFILL_TRACE)
  uint32_t* trace = nullptr;  // the phase trace's buffer (trace.h), or null
#endif
};

}  // namespace fsdpa::detail::cuda
