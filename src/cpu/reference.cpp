// The float64 reference: every semantic of docs/design.md (Semantics), written to be read.
// One query row at a time: scores for all visible keys, softmax with the
// sink in the denominator, weighted sum of values.
#include <cmath>
#include <limits>
#include <string>

#include "core/kv_cache.h"
#include "core/semantics.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "cpu/cpu.h"

namespace fsdpa::detail::cpu {

namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Computes out[b, h, row, :] into out_row (Dv doubles) and returns the LSE.
// Two passes over the row's visible keys, each computing their scores (the
// max, then the weights), so that no buffer grows with the key count: a
// paged call's capacity, or a broadcast k's length, may be past any memory.
double reference_row(const Problem& p, const Options& options, double scale, const Tensors& t,
                     int64_t b, int64_t h, int64_t row, double* out_row) {
  const int64_t kv_head = h / (p.heads_q / p.heads_kv);
  const KvIndex kv = make_kv_index(t, p);
  const int64_t len_k = sequence_len_k(kv, b);  // this sequence's keys: [0, len_k)
  const KvStrides k_strides = kv_strides(t.k, p.page_size > 0);
  const KvStrides v_strides = kv_strides(t.v, p.page_size > 0);
  const KeyRange visible = visible_keys(options, p.len_q, len_k, row);
  const TensorView mask = t.mask ? broadcast_strides(*t.mask) : TensorView{};

  // Key j's score; -inf marks a key that is masked out.
  auto score = [&](int64_t j) {
    double mask_value = 0.0;
    if (p.mask != MaskKind::None) {
      mask_value = load_as_float(mask.data, mask.dtype, offset_of(mask, b, h, row, j));
      if (p.mask == MaskKind::Boolean) {
        if (mask_value == 0.0) return kMinusInf;
        mask_value = 0.0;
      }
      if (mask_value == kMinusInf) return kMinusInf;  // contributes nothing, whatever q.k is
    }
    double dot = 0.0;
    // A k without elements (Dqk = 0) may have any strides: no offset then.
    const int64_t k_row = p.head_dim_qk > 0 ? key_row_offset(kv, k_strides, b, kv_head, j) : 0;
    for (int64_t d = 0; d < p.head_dim_qk; ++d)
      dot += static_cast<double>(load_as_float(t.q.data, p.dtype, offset_of(t.q, b, h, row, d))) *
             static_cast<double>(load_as_float(t.k.data, p.dtype, k_row + d * k_strides.col));
    return soft_cap(scale * dot, options.softcap) + mask_value;
  };

  // The max. A NaN score of a key the row sees makes the row NaN (std::max
  // would skip it).
  double row_max = kMinusInf;
  bool saw_nan = false;
  for (int64_t j = visible.begin; j < visible.end; ++j) {
    const double s = score(j);
    if (std::isnan(s)) saw_nan = true;
    row_max = std::max(row_max, s);
  }

  // The sink joins the denominator (and the max, for stability) only.
  const double sink =
      p.has_sinks
          ? static_cast<double>(load_as_float(t.sinks->data, DType::F32, h * t.sinks->strides[0]))
          : kMinusInf;
  row_max = std::max(row_max, sink);

  for (int64_t d = 0; d < p.head_dim_v; ++d) out_row[d] = 0.0;
  if (saw_nan) {
    for (int64_t d = 0; d < p.head_dim_v; ++d) out_row[d] = std::nan("");
    return std::nan("");
  }
  if (row_max == kMinusInf) return kMinusInf;  // fully masked: exactly 0, lse = -inf

  double denominator = std::exp(sink - row_max);  // 0 without a sink
  for (int64_t j = visible.begin; j < visible.end; ++j) {
    const double s = score(j);
    if (s == kMinusInf) continue;
    const double weight = std::exp(s - row_max);
    denominator += weight;
    const int64_t v_row = p.head_dim_v > 0 ? key_row_offset(kv, v_strides, b, kv_head, j) : 0;
    for (int64_t d = 0; d < p.head_dim_v; ++d)
      out_row[d] +=
          weight * static_cast<double>(load_as_float(t.v.data, p.dtype, v_row + d * v_strides.col));
  }
  for (int64_t d = 0; d < p.head_dim_v; ++d) out_row[d] /= denominator;
  return row_max + std::log(denominator);
}

template <typename RowSink>
void for_each_row(const Problem& p, const Options& options, const Tensors& t, double* out_row,
                  RowSink&& sink) {
  const double scale = resolve_scale(options, p.head_dim_qk);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.len_q; ++i) {
        double lse = reference_row(p, options, scale, t, b, h, i, out_row);
        sink(b, h, i, out_row, lse);
      }
}

}  // namespace

ReferenceResult reference_attention(const Tensors& t, const Options& options) {
  const Problem p = describe(t, options);
  ReferenceResult result;
  result.out.resize(static_cast<size_t>(p.batch * p.heads_q * p.len_q * p.head_dim_v));
  result.lse.resize(static_cast<size_t>(p.batch * p.heads_q * p.len_q));
  std::vector<double> out_row(static_cast<size_t>(p.head_dim_v));
  for_each_row(p, options, t, out_row.data(),
               [&](int64_t b, int64_t h, int64_t i, const double* row, double lse) {
                 const int64_t r = (b * p.heads_q + h) * p.len_q + i;
                 for (int64_t d = 0; d < p.head_dim_v; ++d)
                   result.out[static_cast<size_t>(r * p.head_dim_v + d)] = row[d];
                 result.lse[static_cast<size_t>(r)] = lse;
               });
  return result;
}

Verdict reference_supports(const Problem&, const Options&) { return Verdict::yes(); }

void reference_configure(const Problem& problem, Plan& plan) {
  plan.num_threads = 1;
  // One output row of doubles: nothing grows with the key count.
  plan.workspace_bytes = writes_output(problem) && !lse_only(problem)
                             ? static_cast<size_t>(problem.head_dim_v) * sizeof(double)
                             : 0;
}

void reference_launch(const Plan& plan, const Tensors& t, void* workspace, void*) {
  const Problem& p = plan.problem;
  if (!writes_output(p)) return;
  if (lse_only(p)) return lse_only_launch(p, plan.options, t);
  double* out_row = static_cast<double*>(workspace);
  for_each_row(p, plan.options, t, out_row,
               [&](int64_t b, int64_t h, int64_t i, const double* row, double lse) {
                 for (int64_t d = 0; d < p.head_dim_v; ++d)
                   store_from_float(t.out.data, p.dtype, offset_of(t.out, b, h, i, d),
                                    static_cast<float>(row[d]));
                 if (t.lse)
                   store_from_float(t.lse->data, DType::F32, offset_of(*t.lse, b, h, i),
                                    static_cast<float>(lse));
               });
}

}  // namespace fsdpa::detail::cpu
