// What one fused prefill launch needs, shared by the host dispatch and the
// kernels: the call's AttentionParams and the prefill schedule's facts.
#pragma once

#include <cstdint>

#include "cuda/common/params.h"

namespace fsdpa::detail::cuda {

struct PrefillParams : AttentionParams {
  // Dv in 2^v_slice_shift column slices, one block each (a Dv above what one
  // block's registers hold): slice s covers columns
  // [s * v_slice_width, min((s + 1) * v_slice_width, head_dim_v)), and
  // v_slice_width is at most the kernel's Dv bucket. 1 slice for Dv <= 256.
  // A power of two: the kernels split blockIdx.x by a shift (a division by
  // a runtime count cost the wgmma kernel registers and speed: bench/NOTES.md,
  // session 11).
  int v_slice_shift = 0;
  int v_slice_width = 0;
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
#if defined(FSDPA_PREFILL_TRACE)
  uint32_t* trace = nullptr;  // the phase trace's buffer (trace.h), or null
#endif
};

}  // namespace fsdpa::detail::cuda
