// The one host builder of AttentionParams (params.h).
#include "core/semantics.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "cuda/common/params.h"

namespace fsdpa::detail::cuda {
namespace {

// The semantics of a validated call.
MaskSemantics make_mask_semantics(const Problem& p, const Options& options, const Tensors& t) {
  MaskSemantics s;
  s.len_q = p.len_q;
  s.len_k = p.len_k;
  s.bottom_right = options.causal_align == CausalAlign::BottomRight;
  s.diagonal_offset = diagonal_offset(s.bottom_right, p.len_q, p.len_k);
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

}  // namespace

AttentionParams make_attention_params(const Plan& plan, const Tensors& t) {
  const Problem& p = plan.problem;
  const bool paged = p.page_size > 0;
  auto strides = [](const TensorView& view) {
    return Strides4{view.strides[0], view.strides[1], view.strides[2],
                    view.rank > 3 ? view.strides[3] : 0};
  };
  AttentionParams a;
  a.q = t.q.data;
  a.k = t.k.data;
  a.v = t.v.data;
  a.out = t.out.data;
  a.q_strides = strides(t.q);
  a.out_strides = strides(t.out);
  if (t.lse) {
    a.lse = static_cast<float*>(t.lse->data);
    a.lse_strides = strides(*t.lse);
  }
  a.k_strides = kv_strides(t.k, paged);
  a.v_strides = kv_strides(t.v, paged);
  a.kv = make_kv_index(t, p);
  a.batch = static_cast<int32_t>(p.batch);
  a.heads_q = static_cast<int32_t>(p.heads_q);
  a.heads_kv = static_cast<int32_t>(p.heads_kv);
  a.len_q = static_cast<int32_t>(p.len_q);
  a.len_k = static_cast<int32_t>(p.len_k);
  a.head_dim_qk = static_cast<int32_t>(p.head_dim_qk);
  a.head_dim_v = static_cast<int32_t>(p.head_dim_v);
  a.kv_group_size = static_cast<int32_t>(p.heads_q / p.heads_kv);
  a.v_aliases_k = p.v_aliases_k ? 1 : 0;
  a.copy_bytes = row_alignment(t);
  a.scale_log2 = in_exp2_domain(plan.scale);
  if (plan.options.softcap > 0.0) {
    a.softcap_log2 = in_exp2_domain(plan.options.softcap);
    a.inverse_softcap_log2 = 1.0f / a.softcap_log2;
    a.two_softcap_log2 = in_exp2_domain(2.0 * plan.options.softcap);
    a.softcap_exponent = static_cast<float>(2.0 * plan.scale * kLog2eDouble / plan.options.softcap);
  }
  a.semantics = make_mask_semantics(p, plan.options, t);
  return a;
}

}  // namespace fsdpa::detail::cuda
