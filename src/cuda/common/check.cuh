// Error checking for CUDA runtime calls and kernel launches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace fsdpa::detail::cuda {

// Throws fsdpa::DeviceError "fsdpa: CUDA error in <call>: <name> (<text>)".
void check(cudaError_t status, const char* call);

// Before each launch of `kernel` with this block size and dynamic shared
// memory: checks the compiled limits (cudaFuncGetAttributes, read at the
// kernel's first launch on a device and cached) against the launch and raises
// the kernel's dynamic shared-memory limit when needed, so a launch that
// cannot run is an error, not an unwritten output. Returns the architecture
// of the binary the device runs for the kernel (major * 10 + minor), which
// says which of its sm_90 instructions were compiled in.
int prepare_launch(const void* kernel, int threads_per_block, size_t dynamic_shared_bytes,
                   const char* kernel_name);

}  // namespace fsdpa::detail::cuda

#define FSDPA_CUDA_CHECK(call) ::fsdpa::detail::cuda::check((call), #call)
