// The device side of the prefill phase trace (trace.h). Compiled to nothing
// unless FSDPA_PREFILL_TRACE is defined.
#pragma once

#include <cstdint>

#include "cuda/prefill/params.h"
#include "cuda/prefill/trace.h"

namespace fsdpa::detail::cuda {

// Thread 0 of `role`'s warpgroup (thread 0 of the block for the producer)
// stamps the SM clock as `phase` of key tile `tile`. A predicated store, no
// branch: a branch between a wgmma's issue and its wait makes ptxas
// serialize the wgmmas.
__device__ __forceinline__ void trace_stamp([[maybe_unused]] const PrefillParams& p,
                                            [[maybe_unused]] int role, [[maybe_unused]] int tile,
                                            [[maybe_unused]] int phase) {
#if defined(FSDPA_PREFILL_TRACE)
  // Everything read anew (volatile) at each stamp, so that nothing of the
  // trace stays in registers across the key loop (kept there, the block's
  // slot spilled the 256/256 consumer).
  unsigned x, y, z, nx, ny, t;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(z));
  asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(nx));
  asm volatile("mov.u32 %0, %%nctaid.y;\n" : "=r"(ny));
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  const unsigned linear = x + nx * (y + ny * z);
  const bool on = p.trace != nullptr && linear < unsigned{kTraceBlocks} &&
                  static_cast<unsigned>(tile) < unsigned{kTraceTiles} && t % 128 == 0;
  const unsigned slot = ((linear % unsigned{kTraceBlocks} * kTraceRoles + role) * kTraceTiles +
                         static_cast<unsigned>(tile) % unsigned{kTraceTiles}) *
                            kTracePhases +
                        phase;
  unsigned now;  // the clock's low 32 bits: a slot is one 32-bit word
  asm volatile("mov.u32 %0, %%clock;\n" : "=r"(now));
  asm volatile("{\n.reg .pred on;\nsetp.ne.u32 on, %0, 0;\n@on st.global.u32 [%1], %2;\n}\n" ::"r"(
                   on ? 1u : 0u),
               "l"(p.trace + slot), "r"(now));
#endif
}

}  // namespace fsdpa::detail::cuda
