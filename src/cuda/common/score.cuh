// The score rule every CUDA kernel applies between the product and the
// masks (core/semantics.h's soft_cap on the device): one definition, so the
// prefill, decode and unfused families cannot drift apart.
#pragma once

namespace fsdpa::detail::cuda {

// The soft cap c * tanh(x / c) in whatever units x is in: a kernel that keeps
// scores in the exp2 domain passes c * log2(e), which is the same cap there.
// `inverse_cap` is 1 / cap, worked out once per launch or thread. tanhf, not
// tanh.approx: the approximation's 2^-11 relative error, times caps of ~50,
// moves f16 logits by more than the f16 tolerance.
__device__ __forceinline__ float soft_cap(float x, float cap, float inverse_cap) {
  return cap * tanhf(x * inverse_cap);
}

}  // namespace fsdpa::detail::cuda
