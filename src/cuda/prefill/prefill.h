// The CUDA prefill family's entry points for the selection table.
#pragma once

#include <string>
#include <vector>

#include "select/table.h"

namespace fsdpa::detail::cuda {

// The wgmma row (sm_90a builds, sm_90 devices, rows aligned to 4 bytes) and the
// mma.sync row (sm_80+, any alignment): bf16/f16, the same compiled bucket
// pairs but 576/256, which only the mma.sync kernel's tiles fit.
Verdict prefill_hopper_supports(const Problem& problem, const Options& options);
void prefill_hopper_configure(const Problem& problem, Plan& plan);
void prefill_hopper_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

Verdict prefill_supports(const Problem& problem, const Options& options);
void prefill_configure(const Problem& problem, Plan& plan);
void prefill_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

// The exact f32 row: the same tiled online softmax on FP32 CUDA cores (no
// TF32), runtime head dims, Dv above 256 in column slices.
Verdict prefill_f32_supports(const Problem& problem, const Options& options);
void prefill_f32_configure(const Problem& problem, Plan& plan);
void prefill_f32_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

// The (Dqk bucket, Dv bucket) pairs of the generated instance list and
// whether each is compiled into this build (FSDPA_HEAD_DIMS), for the
// mma.sync kernel and the wgmma one (FSDPA_CUDA_ARCHS with 90a); for tests.
struct PrefillBucketPair {
  int head_dim_qk_bucket;
  int head_dim_v_bucket;
  bool compiled;
  bool hopper_compiled;
};
std::vector<PrefillBucketPair> prefill_bucket_pairs();

}  // namespace fsdpa::detail::cuda
