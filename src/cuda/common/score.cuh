// The score rule every CUDA kernel applies between the product and the
// masks (core/semantics.h's soft_cap on the device): one definition, so the
// prefill, decode and unfused families cannot drift apart.
#pragma once

#include "cuda/common/softmax.cuh"

namespace fsdpa::detail::cuda {

// The soft cap c * tanh(x / c) in whatever units x is in: a kernel that keeps
// scores in the exp2 domain passes c * log2(e), which is the same cap there.
// `inverse_cap` is 1 / cap, worked out once per launch or thread.
//
// tanh(y) = 1 - 2 / (1 + e^(2y)), with e^(2y) on the ex2 unit and the
// reciprocal on the reciprocal unit: two special-function instructions and
// an absolute error near 1e-7 in tanh (so ~1e-7 * c in the score). tanhf is
// ~20 instructions with branches; tanh.approx's 2^-11 relative error times
// caps of ~50 moves logits by more than the f16 tolerance allows. A large
// x makes e^(2y) infinite and its reciprocal 0 (the score: the cap); NaN
// propagates.
//
// soft_cap_weight is the reciprocal 1 / (1 + e^(2y)) of x times
// `exponent_factor` = 2 log2(e) / cap times whatever takes x into the cap's
// units (a kernel folds its score scale in there), so that the cap is
// cap - 2 cap * weight: one FMA, into which a kernel can fold its own
// subtraction (prefill's CappedScores).
inline constexpr float kTwoLog2e = 2.0f * kLog2e;
__device__ __forceinline__ float soft_cap_weight(float x, float exponent_factor) {
  return fast_rcp(1.0f + fast_exp2(x * exponent_factor));
}
__device__ __forceinline__ float soft_cap(float x, float cap, float inverse_cap) {
  return fmaf(-2.0f * cap, soft_cap_weight(x, kTwoLog2e * inverse_cap), cap);
}

// Query head `head`'s attention sink (Options' sinks: one logit a head, at
// `stride` floats apart) in the exp2 domain; -inf for a call without sinks.
__device__ __forceinline__ float sink_log2(const float* sinks, int64_t stride, int64_t head) {
  return sinks != nullptr ? sinks[head * stride] * kLog2e : kMinusInf;
}

}  // namespace fsdpa::detail::cuda
