// The CUDA decode family's entry points for the selection table.
#pragma once

#include "select/table.h"

namespace fsdpa::detail::cuda {

Verdict decode_supports(const Problem& problem, const Options& options);
// decode_supports without the decode limit on len_q: what the decode kernels
// themselves need (the MLA kernel also serves long query runs).
Verdict decode_kernel_supports(const Problem& problem, const Options& options);
// The decode kernels' 32-bit indices: keys, pages and packed rows within
// INT_MAX (decode_kernel_supports and the wide row ask it).
Verdict decode_index_limits(const Problem& problem);
// Whether a block of the bucket's split kernel for the problem's dtype fits
// `shared_bytes_per_block` (the device's opt-in limit): the tilings are
// sized for the H200's 227 KB, and GPUs with 99 KB (sm_86, sm_89) cannot
// launch most of them. decode_kernel_supports asks it for the problem's
// device.
Verdict decode_fits_shared_memory(const Problem& problem, size_t shared_bytes_per_block);
void decode_configure(const Problem& problem, Plan& plan);
void decode_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

// The wgmma MLA kernel (decode_mla.cu): 576/512 with v aliasing k, bf16/f16,
// sm_90. Two rows run it: the decode row (len_q up to the decode limit) and
// the prefill row (longer query runs: DeepSeek's absorbed prefill chunks).
// Both plan and launch alike.
Verdict decode_mla_supports(const Problem& problem, const Options& options);
Verdict prefill_mla_supports(const Problem& problem, const Options& options);
void decode_mla_configure(const Problem& problem, Plan& plan);
void decode_mla_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);
// The alternating-tile MLA kernel (decode_mla_latent.cu): the prefill row's
// problems (but pages of 8, 16, 32 or a multiple of 64 rows). It measured
// faster than decode_mla.cu's kernel on long key loops (MLA prefill) and
// slower on decode's short ones (bench/NOTES.md, session 48), so only the
// prefill family routes to it.
Verdict prefill_mla_alternating_supports(const Problem& problem, const Options& options);
void prefill_mla_alternating_configure(const Problem& problem, Plan& plan);
void prefill_mla_alternating_launch(const Plan& plan, const Tensors& tensors, void* workspace,
                                    void* stream);
// The same kernel with V tiles of its own: prefill with Dv above 256 where
// computing S once for both of O's column halves measured faster than the
// column slices (Dqk above 320). The plan carries the
// instance (shape and dtype); the launch does not look it up again.
Verdict prefill_wide_supports(const Problem& problem, const Options& options);
void prefill_wide_configure(const Problem& problem, Plan& plan);
void prefill_wide_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

// Whether a compiled bucket covers (head_dim_qk, head_dim_v): FSDPA_HEAD_DIMS
// may leave buckets out; tests skip what is not built.
bool decode_bucket_compiled(int64_t head_dim_qk, int64_t head_dim_v);

}  // namespace fsdpa::detail::cuda
