// The score rules of docs/design.md (Semantics) that need no tensor: the soft cap and the
// masking that depends only on positions, in one place for every CPU path
// (the reference and the fused path) to share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/key_range.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

// Kernels keep scores in the exp2 domain (2^(x log2 e) = e^x): a quantity in
// natural units (the score scale, the soft cap) times log2(e), as the float
// the kernels take. kLog2eDouble is the constant in host arithmetic, kLog2e
// the float the kernels (CUDA and the CPU fused path) compute with.
inline constexpr double kLog2eDouble = 1.4426950408889634;
inline constexpr float kLog2e = static_cast<float>(kLog2eDouble);
inline float in_exp2_domain(double natural) { return static_cast<float>(natural * kLog2eDouble); }

// The soft cap (Options::softcap): c * tanh(x / c) for c > 0, x unchanged for
// c = 0. Scores in the exp2 domain (x * log2 e) take the same form with the
// cap c * log2 e, which is how the kernels that fold log2 e into the scale
// apply it.
inline double soft_cap(double score, double cap) {
  return cap > 0.0 ? cap * std::tanh(score / cap) : score;
}

// Keys [begin, end) that causal masking and the sliding window leave visible
// to query row `row` of a sequence of len_k keys (array masks come on top).
inline KeyRange visible_keys(const Options& options, int64_t len_q, int64_t len_k, int64_t row) {
  const bool bottom_right = options.causal_align == CausalAlign::BottomRight;
  return visible_key_range(row + diagonal_offset(bottom_right, len_q, len_k), len_k, options.causal,
                           options.window_left.has_value(), options.window_left.value_or(0));
}

}  // namespace fsdpa::detail
