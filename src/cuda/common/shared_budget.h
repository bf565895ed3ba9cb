// The shared-memory budgets the CUDA tilings are sized for, as constexpr data
// shared by the host (plan, fits checks) and the kernels. No CUDA header here.
#pragma once

namespace fsdpa::detail::cuda {

// Opt-in shared memory per block: 227 KB on sm_90, 163 KB on sm_80, 99 KB on
// sm_86/89 (each SM holds 1 KB more, reserved per block). The wgmma kernels
// are sized for sm_90; the mma.sync prefill kernel and the tensor-core decode
// kernel, the ones GPUs before Hopper run, have a tiling per budget, so that
// every bucket runs fused on each of them.
inline constexpr int kSm90SharedBytes = 227 * 1024;
inline constexpr int kSharedBudgets[] = {kSm90SharedBytes, 163 * 1024, 99 * 1024};
inline constexpr int kSharedClasses = 3;
static_assert(sizeof(kSharedBudgets) / sizeof(int) == kSharedClasses, "one budget a class");

// The class whose tilings a block of `bytes` of opt-in shared memory takes:
// that of the largest budget it holds; below every budget (no GPU that runs
// mma.sync bf16 has less than 99 KB; FSDPA_SHARED_MEMORY_LIMIT may ask for
// less) the smallest's, whose tilings each row's fits check then measures.
constexpr int shared_class_for_bytes(long long bytes) {
  for (int c = 0; c < kSharedClasses; ++c)
    if (kSharedBudgets[c] <= bytes) return c;
  return kSharedClasses - 1;
}

// Shared memory a block may take when two blocks share an SM of class `c`:
// half of the SM's (the budget plus the 1 KB its block reserves), less one
// block's reserve (113 KB on sm_90).
constexpr int shared_budget_two_blocks(int c) { return (kSharedBudgets[c] - 1024) / 2; }

static_assert(shared_class_for_bytes(232448) == 0 && shared_class_for_bytes(166912) == 1 &&
                  shared_class_for_bytes(101376) == 2 && shared_class_for_bytes(49152) == 2,
              "H100/H200, A100, sm_86/89 opt-in limits");
static_assert(shared_budget_two_blocks(0) == 113 * 1024, "two blocks per sm_90 SM");

}  // namespace fsdpa::detail::cuda
