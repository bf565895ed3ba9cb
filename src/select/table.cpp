// The selection table. Rows are tried in order within a backend: the first
// fused row whose supports() says yes runs; otherwise the backend's unfused
// row runs (Auto) or plan() raises (ForceFused).
#include "select/table.h"

#include "cpu/cpu.h"

#if FSDPA_WITH_CUDA
#include "cuda/decode/decode.h"
#include "cuda/prefill/prefill.h"
#include "cuda/unfused/unfused.h"
#endif

namespace fsdpa::detail {

namespace {

const KernelRow kTable[] = {
#if FSDPA_WITH_CUDA
    // Few queries: split-K over the keys; routed by the decode row's supports().
    {"cuda_fused_decode_mla", Backend::CUDA, Path::FusedDecode, cuda::decode_mla_supports,
     cuda::decode_mla_configure, cuda::decode_mla_launch,
     "few-query MLA (512 < Dqk <= 576, Dv <= 512, v a view of k's first Dv columns), bf16/f16, "
     "sm_90 only: 64 packed query rows per block on wgmma tensor cores, K tiles through TMA, "
     "split-K + combine; rows 16-byte aligned (TMA); dense or paged (pages of 8, 16 or a "
     "multiple of 32 rows), per-sequence key lengths"},
    {"cuda_fused_decode", Backend::CUDA, Path::FusedDecode, cuda::decode_supports,
     cuda::decode_configure, cuda::decode_launch,
     "few-query shapes (Lq up to the measured decode limit, bench/results/h200-route.md): "
     "split-K on tensor cores (f16/bf16; tilings per shared memory a block: 227, 163 and 99 "
     "KB) or CUDA cores (f32) + combine; rows of any alignment (narrow copies below 16 bytes); "
     "dense or paged KV caches, per-sequence key lengths"},
    {"cuda_fused_prefill_mla_alternating", Backend::CUDA, Path::FusedPrefill,
     cuda::prefill_mla_alternating_supports, cuda::prefill_mla_alternating_configure,
     cuda::prefill_mla_alternating_launch,
     "MLA prefill (Lq past the decode limit; 512 < Dqk <= 576, Dv <= 512, v a view of k's "
     "first Dv columns), bf16/f16, sm_90 only: 64 query positions per block, 64-key tiles that "
     "alternate between two warpgroups (each the S and softmax of its own tiles, P V of both "
     "for half of O's columns), split-K where the rows leave SMs idle; rows 16-byte aligned "
     "(TMA); dense or paged (pages of 8, 16, 32 or a multiple of 64 rows)"},
    {"cuda_fused_prefill_mla", Backend::CUDA, Path::FusedPrefill, cuda::prefill_mla_supports,
     cuda::decode_mla_configure, cuda::decode_mla_launch,
     "MLA prefill as cuda_fused_prefill_mla_alternating on the MLA decode kernel (32-key "
     "tiles): the page sizes that row does not take (other multiples of 32)"},
    {"cuda_fused_prefill_wide", Backend::CUDA, Path::FusedPrefill, cuda::prefill_wide_supports,
     cuda::prefill_wide_configure, cuda::prefill_wide_launch,
     "prefill with Dv above 256 and Dqk above 320 (shapes 384/384, 512/512, 576/512), bf16/f16, "
     "sm_90 only: the MLA kernel with V tiles of their own, 64 query positions per block, S once "
     "for both halves of O's columns (a warpgroup each); rows 16-byte aligned (TMA), dense k "
     "and v"},
    {"cuda_fused_prefill_hopper", Backend::CUDA, Path::FusedPrefill, cuda::prefill_hopper_supports,
     cuda::prefill_hopper_configure, cuda::prefill_hopper_launch,
     "bf16/f16, the same buckets but 576/256 (Dqk <= 512; Dv above 256 in column slices), "
     "sm_90 only: tiled online softmax on wgmma tensor cores (warpgroup MMAs from "
     "128-byte-swizzled shared memory); rows through TMA where 16-byte aligned, else staged "
     "by row bulk copies (any alignment, buckets up to 176) or cp.async pieces (4-byte rows)"},
    {"cuda_fused_prefill", Backend::CUDA, Path::FusedPrefill, cuda::prefill_supports,
     cuda::prefill_configure, cuda::prefill_launch,
     "bf16/f16, every Dqk <= 576, Dv <= 512 (buckets of 16 to 256, 96/64, 192/128; above 256 "
     "Dqk buckets 288..576 with Dv in column slices), rows of any alignment (narrow copies "
     "below 16 bytes): tiled online softmax on mma.sync tensor cores, its tiles per shared "
     "memory a block (227, 163 and 99 KB: sm_90, sm_80, sm_86/89)"},
    {"cuda_fused_prefill_f32", Backend::CUDA, Path::FusedPrefill, cuda::prefill_f32_supports,
     cuda::prefill_f32_configure, cuda::prefill_f32_launch,
     "f32, every Dqk <= 576, Dv <= 512 (Dv above 256 in column slices), any alignment: exact "
     "tiled online softmax on FP32 CUDA cores (no TF32)"},
    {"cuda_unfused_cublas", Backend::CUDA, Path::Unfused, cuda::unfused_supports,
     cuda::unfused_configure, cuda::unfused_launch,
     "every valid shape: cuBLAS GEMMs + a masked-softmax kernel (materializes the scores)"},
#endif
    {"cpu_fused_online_softmax", Backend::CPU, Path::FusedPrefill, cpu::fused_supports,
     cpu::fused_configure, cpu::fused_launch,
     "every valid shape: f16/bf16/f32 (f32 accumulation), any Dqk/Dv, any strides, all "
     "semantics, dense or paged KV caches, per-sequence key lengths; O(tile) memory"},
    {"cpu_reference_f64", Backend::CPU, Path::Unfused, cpu::reference_supports,
     cpu::reference_configure, cpu::reference_launch,
     "every valid shape, float64, two passes over each query row's keys, O(Dv) memory (the "
     "test oracle)"},
};

}  // namespace

std::span<const KernelRow> selection_table() { return kTable; }

bool backend_built(Backend backend) {
  switch (backend) {
    case Backend::CPU:
      return true;
    case Backend::CUDA:
      return FSDPA_WITH_CUDA != 0;
  }
  return false;
}

}  // namespace fsdpa::detail
