// The exact f32 fused prefill path: the same tiled online softmax on FP32
// CUDA cores (no TF32), for every Dqk <= 576, Dv <= 512 with runtime head
// dims (Dv above 256 in column slices) and any alignment.
#pragma once

#include <cuda_runtime.h>

#include "cuda/prefill/params.h"
#include "select/table.h"

namespace fsdpa::detail::cuda {

Verdict simt_f32_supports(const Problem& problem, const Options& options);
void simt_f32_configure(const Problem& problem, Plan& plan);
void simt_f32_launch(const PrefillParams& params, cudaStream_t stream);

}  // namespace fsdpa::detail::cuda
