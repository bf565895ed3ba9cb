// docs/design.md's NaN/Inf policy on the CUDA kernels: a key a row masks
// contributes nothing to that row, whatever its values; a non-finite value
// the row uses reaches its output and lse.
//
// The tiled kernels cannot keep the first rule in their products: a masked
// key's probability is 0, and 0 * NaN (a NaN or infinity in the key's v
// row) is NaN; an additive -inf plus a NaN score is NaN. Both only ever turn
// a row's outputs non-finite. So a kernel checks the values it stores, and
// a warp recomputes each row that has a non-finite one here, key by key in
// f32 with the float64 reference's rules (cpu/reference.cpp): a key outside
// the visible range, under a false boolean or an additive -inf is skipped;
// a NaN score makes the whole row and its lse NaN; a score of -inf
// contributes nothing; +inf and non-finite v values propagate through the
// arithmetic. A row that is non-finite by the policy comes out non-finite
// again; one that was not, finite. Finite inputs never reach this path.
#pragma once

#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/semantics.cuh"
#include "cuda/common/softmax.cuh"

namespace fsdpa::detail::cuda {

// NaN or an infinity (NaN fails the comparison).
__device__ __forceinline__ bool non_finite(float x) { return !(fabsf(x) <= 3.402823466e38f); }

// Where one row's operands are, as exact_row reads them: q's row, and
// key(j) / value(j) the rows of key j in k and v (v's at the first column
// the caller recomputes), each with its column stride. Dense rows: k's and
// v's rows of the kv head at a row stride (the paged decode has its own).
template <typename T>
struct DenseRowOperands {
  const T* q;
  const T* k;
  const T* v;
  int64_t q_col, k_row, k_col, v_row, v_col;
  __device__ const T* key(int j) const { return k + j * k_row; }
  __device__ const T* value(int j) const { return v + j * v_row; }
};

// What exact_row needs of a row besides its operands, exp2 domain: the
// keys it sees (causal, window, the sequence's length), the scale, the soft
// cap (0: none) and the sink (-inf: none).
struct ExactRule {
  DeviceKeyRange range;
  float scale_log2, cap_log2, sink_log2;
};

// Recomputes one query row: columns [0, columns) of `out` (the row's first
// recomputed column; column stride 1) and, when not null, `lse`.
// `mask_term(j)` is key j's array-mask term in the exp2 domain (-inf: the
// key is masked). Called by all 32 lanes of a warp, converged, with the same
// arguments; columns are taken kColumns at a time (one pass over the keys
// each), 32 lanes wide.
template <typename T, int kColumns, typename Operands, typename MaskTerm>
__device__ __forceinline__ void exact_row(const Operands& x, const ExactRule& rule,
                                          const MaskTerm& mask_term, int head_dim_qk, T* out,
                                          int columns, float* lse) {
  static_assert(kColumns % 32 == 0, "columns in whole warp widths");
  constexpr int kPerLane = kColumns / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const float inverse_cap = rule.cap_log2 > 0.0f ? 1.0f / rule.cap_log2 : 0.0f;
#pragma unroll 1
  for (int column0 = 0; column0 == 0 || column0 < columns; column0 += kColumns) {
    float m = kMinusInf, l = 0.0f, o[kPerLane] = {};
    bool nan = false;
    // Cold code: no unrolling, so that it does not raise the register
    // count of the kernel it sits in.
#pragma unroll 1
    for (int j = rule.range.begin; j < rule.range.end && !nan; ++j) {
      const float term = mask_term(j);
      if (term == kMinusInf) continue;  // a false boolean or an additive -inf
      const auto* key = x.key(j);
      float dot = 0.0f;
#pragma unroll 1
      for (int d = lane; d < head_dim_qk; d += 32)
        dot = fmaf(to_float(x.q[d * x.q_col]), to_float(key[d * x.k_col]), dot);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      float s = dot * rule.scale_log2;
      if (rule.cap_log2 > 0.0f) s = soft_cap(s, rule.cap_log2, inverse_cap);
      s += term;
      if (s != s) nan = true;
      if (nan || s == kMinusInf) continue;
      const float top = fmaxf(m, s);
      const float correction = exp2f(m - top), weight = exp2f(s - top);  // m = -inf: 0
      m = top;
      l = l * correction + weight;
      const auto* value = x.value(j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = column0 + lane + 32 * i;
        o[i] = o[i] * correction + (c < columns ? weight * to_float(value[c * x.v_col]) : 0.0f);
      }
    }
    const float top = fmaxf(m, rule.sink_log2);
    float factor = 0.0f, row_lse = kMinusInf;
    if (nan) {
      factor = row_lse = __int_as_float(0x7fffffff);
    } else if (top != kMinusInf) {
      const float correction = exp2f(m - top);
      l = l * correction + exp2f(rule.sink_log2 - top);
      factor = correction / l;
      row_lse = (top + log2f(l)) * kLn2;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = column0 + lane + 32 * i;
      if (c < columns) out[c] = from_float<T>(o[i] * factor);
    }
    if (column0 == 0 && lse != nullptr && lane == 0) *lse = row_lse;
  }
}

// exact_row of row `row` of (batch, head) under the prefill families' mask
// semantics (MaskSemantics: causal, window, the array mask, sinks, cap).
template <typename T, int kColumns, typename Operands>
__device__ __forceinline__ void exact_row(const Operands& x, const MaskSemantics& sem, int batch,
                                          int head, int row, int head_dim_qk, float scale_log2,
                                          T* out, int columns, float* lse) {
  const int64_t mask_row = mask_row_offset(sem, batch, head, row);
  const ExactRule rule{visible_key_range(sem, row), scale_log2, sem.softcap * kLog2e,
                       sink_log2(sem.sinks, sem.sink_stride, head)};
  exact_row<T, kColumns>(
      x, rule, [&](int j) { return sem.mask_kind == 0 ? 0.0f : mask_term_log2(sem, mask_row, j); },
      head_dim_qk, out, columns, lse);
}

// The warp's rows whose stored values were non-finite, recomputed: each
// lane passes `bad` (whether it stored a non-finite value of row `row`) for
// its `lanes_per_row` consecutive lanes' shared row; every row with one is
// recomputed by the whole warp through `recompute(row)`, after this warp's
// own stores. Called by all 32 lanes, converged.
template <typename Recompute>
__device__ __forceinline__ void repair_rows(bool bad, int row, int lanes_per_row,
                                            const Recompute& recompute) {
  unsigned rows = __ballot_sync(0xffffffffu, bad);
  if (rows == 0u) return;
  __syncwarp();  // the warp's stores of these rows come before their repair
  while (rows != 0u) {
    const int source = __ffs(rows) - 1;
    const int bad_row = __shfl_sync(0xffffffffu, row, source);
    // The other lanes of that row: one repair covers them.
    const int first = source / lanes_per_row * lanes_per_row;
    rows &= ~(((1u << lanes_per_row) - 1u) << first);
    recompute(bad_row);
  }
}

}  // namespace fsdpa::detail::cuda
