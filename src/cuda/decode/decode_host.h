// Host pieces shared by the decode family's table rows (decode.cu: the
// mma.sync and CUDA-core kernels; decode_mla.cu: the wgmma MLA kernel): the
// plan's split count and workspace, and the kernel parameters of a call.
#pragma once

#include "cuda/decode/decode_params.h"
#include "select/table.h"

namespace fsdpa::detail::cuda {

// What a row's kernel needs planned: the bucket it runs, its block shape
// (packed rows, keys per pipeline step), how many of its blocks fit one
// multiprocessor, and the multiple the keys per split are rounded up to
// when the split count is chosen (the launch then divides the keys evenly
// over that count); whether the kernel can merge a row chunk's splits in a
// cluster (the tensor-core split kernel on sm_90: merges_in_cluster),
// whether that is known of the device's binary (then splits that merge need
// no workspace; else it is reserved), and whether the kernel takes a list of
// splits over per-sequence lengths (decode_mma_split_list).
struct DecodeGrid {
  int head_dim_qk_bucket, head_dim_v_bucket;
  int rows, keys;
  int blocks_per_sm;
  int split_keys_multiple;
  bool cluster_merge;
  bool merge_known = false;
  bool split_list = true;
};

// Fills the plan's kernel facts: buckets, tile, the split count (one full
// wave of blocks, or FSDPA_DECODE_SPLITS) and the workspace (rows x splits x
// (Dv + 2) floats when splits > 1 and do not merge in a cluster).
void configure_decode_plan(const Problem& problem, Plan& plan, const DecodeGrid& grid);

// The generic kernels' splits start on a multiple of this many keys: a
// stream's 16 where the cache is paged, so that where pages hold a multiple
// of 16 keys a block's stages take their keys as whole groups of 16 rows of
// one page (decode_mma_kernel.cuh: page_groups); the same where a dense cache
// has per-sequence lengths, so that it splits as its paged twin does (the
// same bits); else 1.
int decode_split_keys_multiple(const Problem& problem);

// Whether the binary of the tensor-core kernel that serves the problem can
// take TMA page boxes: an sm_90 one (DecodeBucketFns::mma_binary_version where
// the problem's device is the current one; else the device's compute
// capability, or sm_90 without a device). The launch then decides with the
// tensors' own addresses (page_boxes_fit); the plan's loads text and its tests
// ask this.
bool decode_page_box_binary(const Problem& problem);

// The kernels' parameters for one call of a planned decode problem, with
// rows_per_block packed rows per block and splits of a multiple of
// split_keys_multiple keys from a multiple of it (DecodeGrid's: the MLA
// kernel's 32-key tiles, so that a paged tile starts on a page or 32-key
// boundary).
DecodeParams make_decode_params(const Plan& plan, const Tensors& tensors, void* workspace,
                                int rows_per_block, int split_keys_multiple);

// What tells the latent cache's MLA kernels apart to their rows: the
// kernel's name in a decline, the TMA boxes a tile's panel takes from a page
// pool of a page size (0: pages it does not take) and those page sizes in
// words, and the block's shared memory.
struct MlaKernelFacts {
  const char* name;
  int (*tile_boxes)(int64_t page_size);
  const char* pages;
  size_t shared_bytes;
};

// The prefill rows of the MLA kernels serve query runs past the decode limit
// (kDecodeMaxLenQ); within it a query run is the decode family's.
Verdict past_decode_limit(const Problem& problem);

// The latent-cache MLA kernels' instances are the 576/512 bucket's: compiled
// when FSDPA_HEAD_DIMS selects it, as the decode family's 576/512 instances
// are (CMake defines FSDPA_BUILT_DECODE_576x512). Without them the MLA rows
// decline in decode_kernel_supports (no compiled decode bucket covers 576/512).
#if defined(FSDPA_BUILT_DECODE_576x512)
inline constexpr bool kMlaLatentBuilt = true;
#else
inline constexpr bool kMlaLatentBuilt = false;
#endif

// What a latent-cache MLA kernel (decode_mla.cu, decode_mla_latent.cu) needs
// of a problem at any len_q: bf16/f16, v a view of k's first Dv columns,
// 512 < Dqk <= 576, a page size it takes, TMA's 16-byte rows, a 90a build
// and device, its shared memory (and decode_kernel_supports' rules, the
// compiled 576/512 bucket among them).
Verdict mla_latent_supports(const Problem& problem, const Options& options,
                            const MlaKernelFacts& kernel);

}  // namespace fsdpa::detail::cuda
