// Calls with no head dims (Dqk = Dv = 0): out has no elements and every
// score is the scale times an empty dot product, 0 (the soft cap keeps it 0),
// plus the mask. Only the LSE is written, and no tensor bounds Lk, so the
// rows are worked out without touching a key where the mask does not vary
// along the keys: n visible keys of one value m give log(n e^m + e^sink).
// Where the mask varies, its elements are read once each (they exist in
// memory). Values follow the reference's rules (docs/design.md, NaN/Inf):
// a masked key contributes nothing; a NaN or +inf score makes the row NaN.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kv_cache.h"
#include "core/semantics.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "cpu/cpu.h"

namespace fsdpa::detail::cpu {

namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// The score a mask value gives an empty-dot key: -inf for a masked key.
double masked_score(const Problem& p, double mask_value) {
  if (p.mask == MaskKind::Boolean) return mask_value == 0.0 ? kMinusInf : 0.0;
  return mask_value;  // additive (or no mask: 0)
}

// log(sum over the row's keys of e^score + e^sink) from n keys of one
// score, the reference's arithmetic: max, then the scaled sum.
double combine(double score, double keys, double sink) {
  if (std::isnan(score) || score == std::numeric_limits<double>::infinity()) return std::nan("");
  const double row_max = std::max(keys > 0 ? score : kMinusInf, sink);
  if (row_max == kMinusInf) return kMinusInf;
  double denominator = std::exp(sink - row_max);
  if (keys > 0 && score != kMinusInf) denominator += keys * std::exp(score - row_max);
  return row_max + std::log(denominator);
}

}  // namespace

bool lse_only(const Problem& p) {
  return writes_output(p) && p.head_dim_qk == 0 && p.head_dim_v == 0;
}

void lse_only_launch(const Problem& p, const Options& options, const Tensors& t) {
  if (!t.lse) throw Error("fsdpa: internal: lse_only_launch for a call without lse");
  const TensorView mask = t.mask ? broadcast_strides(*t.mask) : TensorView{};
  const bool varies_along_keys = p.mask != MaskKind::None && mask.strides[3] != 0;
  const KvIndex kv = make_kv_index(t, p);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len_k = sequence_len_k(kv, b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const double sink = p.has_sinks ? static_cast<double>(load_as_float(t.sinks->data, DType::F32,
                                                                          h * t.sinks->strides[0]))
                                      : kMinusInf;
      for (int64_t i = 0; i < p.len_q; ++i) {
        const KeyRange visible = visible_keys(options, p.len_q, len_k, i);
        const int64_t n = std::max<int64_t>(visible.end - visible.begin, 0);
        double lse;
        if (!varies_along_keys) {
          const double m =
              p.mask != MaskKind::None && n > 0
                  ? load_as_float(mask.data, mask.dtype, offset_of(mask, b, h, i, visible.begin))
                  : 0.0;
          lse = combine(masked_score(p, m), static_cast<double>(n), sink);
        } else {
          // One pass with a running max; a NaN or +inf score ends the row.
          double row_max = kMinusInf, sum = 0.0;
          bool nan = false;
          for (int64_t j = visible.begin; j < visible.end && !nan; ++j) {
            const double s =
                masked_score(p, load_as_float(mask.data, mask.dtype, offset_of(mask, b, h, i, j)));
            if (std::isnan(s) || s == std::numeric_limits<double>::infinity()) nan = true;
            if (nan || s == kMinusInf) continue;
            if (s > row_max) {
              sum = sum * std::exp(row_max - s) + 1.0;
              row_max = s;
            } else {
              sum += std::exp(s - row_max);
            }
          }
          lse =
              nan ? std::nan("")
                  : combine(row_max == kMinusInf ? kMinusInf : row_max + std::log(sum), 1.0, sink);
        }
        store_from_float(t.lse->data, DType::F32, offset_of(*t.lse, b, h, i),
                         static_cast<float>(lse));
      }
    }
  }
}

}  // namespace fsdpa::detail::cpu
