// The score rules of docs/design.md (Semantics) that need no tensor: the soft cap and the
// masking that depends only on positions, in one place for every CPU path
// (the reference and the fused path) to share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

// Keys [begin, end) that causal masking and the sliding window leave visible
// to query row `row` (array masks come on top). Empty when end <= begin.
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// The soft cap (Options::softcap): c * tanh(x / c) for c > 0, x unchanged for
// c = 0. Scores in the exp2 domain (x * log2 e) take the same form with the
// cap c * log2 e, which is how the kernels that fold log2 e into the scale
// apply it.
inline double soft_cap(double score, double cap) {
  return cap > 0.0 ? cap * std::tanh(score / cap) : score;
}

inline KeyRange visible_keys(const Options& options, int64_t len_q, int64_t len_k, int64_t row) {
  const int64_t diagonal =
      row + (options.causal_align == CausalAlign::BottomRight ? len_k - len_q : 0);
  KeyRange range{0, len_k};
  if (options.causal) range.end = std::clamp<int64_t>(diagonal + 1, 0, len_k);
  if (options.window_left)
    range.begin = std::clamp<int64_t>(diagonal - *options.window_left, 0, len_k);
  return range;
}

}  // namespace fsdpa::detail
