// The CPU fused kernel for any CPU: the portable build of fused_kernel.h
// (baseline ISA of the target; SSE2 on x86-64).
#define FSDPA_FUSED_KERNEL_BODY 1
#define FSDPA_FUSED_VEC_BYTES 16
#define FSDPA_FUSED_F16C 0
#include "cpu/fused_kernel.h"

namespace fsdpa::detail::cpu {

void fused_item_generic(const FusedArgs& args, std::byte* workspace, int64_t unit) {
  run_item_any(args, workspace, unit);
}

void fused_combine_generic(const FusedArgs& args, int64_t item) { combine_item_any(args, item); }

}  // namespace fsdpa::detail::cpu
