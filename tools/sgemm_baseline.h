// The CPU "vs unfused" baseline of the `fsdpa` command: attention the way a
// framework without a fused kernel computes it, on OpenBLAS sgemm (scores
// S = scale Q K^T materialized per batch and head, the score rules, softmax,
// O = P V), so that the speed-up column compares with a real materializing
// path instead of the single-thread float64 oracle.
#pragma once

#include <cstddef>

#include "fsdpa/fsdpa.h"

namespace fsdpa::tool {

// Whether the command was built with OpenBLAS (else the column falls back to
// the library's unfused path, the float64 reference, and says so).
bool sgemm_baseline_built();

// Computes out (and lse when given) for any tensors the library accepts, in
// float32; returns the bytes of its transient buffers (the Lq x Lk scores
// and the float32 copies of one head's q, k, v, out).
size_t sgemm_attention(const Tensors& tensors, const Options& options);

}  // namespace fsdpa::tool
