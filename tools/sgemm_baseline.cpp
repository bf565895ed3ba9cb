#include "sgemm_baseline.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/semantics.h"
#include "core/tensor.h"
#include "core/validate.h"

#if FSDPA_TOOL_OPENBLAS
#include <cblas.h>
#endif

namespace fsdpa::tool {

bool sgemm_baseline_built() { return FSDPA_TOOL_OPENBLAS != 0; }

size_t sgemm_attention(const Tensors& t, const Options& options) {
#if FSDPA_TOOL_OPENBLAS
  using detail::load_as_float;
  using detail::offset_of;
  const Problem p = describe(t, options);
  const int64_t lq = p.len_q, lk = p.len_k, dqk = p.head_dim_qk, dv = p.head_dim_v;
  const auto scale = static_cast<float>(detail::resolve_scale(options, dqk));
  const TensorView mask = t.mask ? detail::broadcast_strides(*t.mask) : TensorView{};
  std::vector<float> q(static_cast<size_t>(lq * dqk)), k(static_cast<size_t>(lk * dqk)),
      v(static_cast<size_t>(lk * dv)), s(static_cast<size_t>(lq * lk)),
      o(static_cast<size_t>(lq * dv)), lse(static_cast<size_t>(lq));
  auto gather = [&](std::vector<float>& into, const TensorView& view, int64_t b, int64_t h,
                    int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < cols; ++d)
        into[static_cast<size_t>(i * cols + d)] =
            load_as_float(view.data, view.dtype, offset_of(view, b, h, i, d));
  };
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kv_head = h / (p.heads_q / p.heads_kv);
      gather(q, t.q, b, h, lq, dqk);
      gather(k, t.k, b, kv_head, lk, dqk);
      gather(v, t.v, b, kv_head, lk, dv);
      if (lq > 0 && lk > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(lq),
                    static_cast<int>(lk), static_cast<int>(dqk), scale, q.data(),
                    static_cast<int>(dqk), k.data(), static_cast<int>(dqk), 0.0f, s.data(),
                    static_cast<int>(lk));
      const float sink = p.has_sinks
                             ? load_as_float(t.sinks->data, DType::F32, h * t.sinks->strides[0])
                             : kMinusInf;
      for (int64_t i = 0; i < lq; ++i) {
        float* row = s.data() + i * lk;
        const detail::KeyRange visible = detail::visible_keys(options, lq, lk, i);
        float row_max = sink;
        for (int64_t j = 0; j < lk; ++j) {
          float score = kMinusInf;
          if (j >= visible.begin && j < visible.end) {
            score = static_cast<float>(detail::soft_cap(row[j], options.softcap));
            if (p.mask != MaskKind::None) {
              const float m = load_as_float(mask.data, mask.dtype, offset_of(mask, b, h, i, j));
              score = p.mask == MaskKind::Boolean ? (m != 0.0f ? score : kMinusInf) : score + m;
            }
          }
          row[j] = score;
          row_max = std::max(row_max, score);
        }
        float sum = row_max == kMinusInf ? 0.0f : std::exp(sink - row_max);
        for (int64_t j = 0; j < lk; ++j) {
          row[j] = row_max == kMinusInf || row[j] == kMinusInf ? 0.0f : std::exp(row[j] - row_max);
          sum += row[j];
        }
        const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int64_t j = 0; j < lk; ++j) row[j] *= inverse;
        lse[static_cast<size_t>(i)] = row_max == kMinusInf ? kMinusInf : row_max + std::log(sum);
      }
      if (lq > 0 && lk > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(lq),
                    static_cast<int>(dv), static_cast<int>(lk), 1.0f, s.data(),
                    static_cast<int>(lk), v.data(), static_cast<int>(dv), 0.0f, o.data(),
                    static_cast<int>(dv));
      else
        std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t i = 0; i < lq; ++i) {
        for (int64_t d = 0; d < dv; ++d)
          detail::store_from_float(t.out.data, t.out.dtype, offset_of(t.out, b, h, i, d),
                                   o[static_cast<size_t>(i * dv + d)]);
        if (t.lse)
          detail::store_from_float(t.lse->data, DType::F32, offset_of(*t.lse, b, h, i),
                                   lse[static_cast<size_t>(i)]);
      }
    }
  return (q.size() + k.size() + v.size() + s.size() + o.size() + lse.size()) * sizeof(float);
#else
  (void)t;
  (void)options;
  throw std::logic_error("sgemm_attention: the command was built without OpenBLAS");
#endif
}

}  // namespace fsdpa::tool
