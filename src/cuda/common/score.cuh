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
// division by the reciprocal unit: two special-function instructions and an
// absolute error near 1e-7 in tanh (so ~1e-7 * c in the score). tanhf is
// ~20 instructions with branches; tanh.approx's 2^-11 relative error times
// caps of ~50 moves logits by more than the f16 tolerance allows. The
// exponent is clamped at 64 (e^(2y) = 2^64: tanh is 1 in float there) so
// the sum stays finite; NaN fails the comparison and propagates.
__device__ __forceinline__ float soft_cap(float x, float cap, float inverse_cap) {
  constexpr float kTwoLog2e = 2.0f * kLog2e;
  float exponent = x * (kTwoLog2e * inverse_cap);
  exponent = exponent > 64.0f ? 64.0f : exponent;
  return cap - __fdividef(2.0f * cap, 1.0f + fast_exp2(exponent));
}

}  // namespace fsdpa::detail::cuda
