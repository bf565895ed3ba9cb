// Error checking for CUDA runtime calls and kernel launches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace fsdpa::detail::cuda {

// Throws fsdpa::DeviceError "fsdpa: CUDA error in <call>: <name> (<text>)".
void check(cudaError_t status, const char* call);

// Before the first launch of `kernel` with this block size and dynamic shared
// memory: raises the kernel's dynamic shared-memory limit when needed and
// checks the compiled limits (cudaFuncGetAttributes) against the launch, so a
// launch that cannot run is an error, not an unwritten output.
void prepare_launch(const void* kernel, int threads_per_block, size_t dynamic_shared_bytes,
                    const char* kernel_name);

}  // namespace fsdpa::detail::cuda

#define FSDPA_CUDA_CHECK(call) ::fsdpa::detail::cuda::check((call), #call)
