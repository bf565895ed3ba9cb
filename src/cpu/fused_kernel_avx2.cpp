// The CPU fused kernel for x86-64 with AVX2, FMA and F16C: CMake compiles
// this file with -mavx2 -mfma -mf16c; fused.cpp calls it only after checking
// the CPU supports all three.
#define FSDPA_FUSED_KERNEL_BODY 1
#define FSDPA_FUSED_VEC_BYTES 32
#define FSDPA_FUSED_F16C 1
#include "cpu/fused_kernel.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "fused_kernel_avx2.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif

namespace fsdpa::detail::cpu {

void fused_item_avx2(const FusedArgs& args, std::byte* workspace, int64_t unit) {
  run_item_any(args, workspace, unit);
}

void fused_combine_avx2(const FusedArgs& args, int64_t item) { combine_item_any(args, item); }

}  // namespace fsdpa::detail::cpu
