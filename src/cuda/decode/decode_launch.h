// The decode instances as the dispatcher sees them: one function table per
// (dtype, Dqk bucket, Dv bucket, shared-memory class), defined in the
// generated files.
#pragma once

#include <cuda_runtime.h>

#include "cuda/decode/decode_params.h"

namespace fsdpa::detail::cuda {

struct DecodeBucketFns {
  // The split kernel (and the combine kernel when num_splits > 1).
  void (*launch)(const DecodeParams& params, cudaStream_t stream) = nullptr;
  // Resident blocks per multiprocessor of the split kernel that serves this
  // many packed rows per kv head, on the current device.
  int (*blocks_per_sm)(int rows_per_kv_head, bool v_aliases_k) = nullptr;
  // The architecture of the split kernel's binary on the current device,
  // for the tensor-core one (an sm_90 binary merges splits in clusters and
  // reads page groups as TMA boxes); null for the others.
  int (*mma_binary_version)() = nullptr;
};

// kClass: the shared-memory class (shared_budget.h) whose tiling the
// tensor-core kernel takes; the CUDA-core kernel (f32) has one for all.
template <typename T, int DQK, int DV, int kClass>
DecodeBucketFns decode_bucket_fns();

// Merges the split partials into out and lse (decode_combine.cu).
template <typename T>
void launch_decode_combine(const DecodeParams& params, cudaStream_t stream);

}  // namespace fsdpa::detail::cuda
