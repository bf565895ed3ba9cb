// docs/design.md's causal and sliding-window rule, once, for the host and the
// device: every path (the CPU reference and fused path, the CUDA prefill and
// decode kernels) finds the keys a query row sees through these two
// functions. Array masks come on top.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FSDPA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FSDPA_HOST_DEVICE inline
#endif

namespace fsdpa::detail {

// Keys [begin, end) of one query row; empty when end <= begin.
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// What query row i adds to get its diagonal key: Lk - Lq bottom-right
// aligned (query i sees j <= i + Lk - Lq), 0 top-left. len_k is the row's
// sequence's key count.
FSDPA_HOST_DEVICE int64_t diagonal_offset(bool bottom_right, int64_t len_q, int64_t len_k) {
  return bottom_right ? len_k - len_q : 0;
}

// The keys of [0, len_k) that causal masking (j <= diagonal) and the window
// (j >= diagonal - window_left) leave to the row whose diagonal key is
// `diagonal`.
FSDPA_HOST_DEVICE KeyRange visible_key_range(int64_t diagonal, int64_t len_k, bool causal,
                                             bool has_window, int64_t window_left) {
  auto clamp = [len_k](int64_t x) { return x < 0 ? int64_t{0} : (x > len_k ? len_k : x); };
  KeyRange range{0, len_k};
  if (causal) range.end = clamp(diagonal + 1);
  if (has_window) range.begin = clamp(diagonal - window_left);
  return range;
}

}  // namespace fsdpa::detail
