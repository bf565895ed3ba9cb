// Error checking for CUDA runtime calls and kernel launches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

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

// kernel<<<blocks, threads, dynamic_shared_bytes, stream>>>(args...) after
// prepare_launch, with programmatic dependent launch where the device runs an
// sm_90 binary of the kernel: the grid may then be scheduled while the
// previous kernel of the stream still runs (once that kernel's blocks have
// all executed griddepcontrol.launch_dependents, or finished), and the kernel
// must execute griddepcontrol.wait before touching global memory. Elsewhere
// the launch is in plain stream order. `cluster_blocks` > 1 launches clusters
// of that many consecutive blocks (sm_90; the grid a multiple of it).
template <typename... Params, typename... Args>
void launch_programmatic_clusters(void (*kernel)(Params...), dim3 grid, int cluster_blocks,
                                  int threads, size_t dynamic_shared_bytes, cudaStream_t stream,
                                  const char* kernel_name, Args&&... args) {
  const int binary = prepare_launch(reinterpret_cast<const void*>(kernel), threads,
                                    dynamic_shared_bytes, kernel_name);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = dynamic_shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  // Only where the binary has griddepcontrol.wait (an sm_80 binary on a
  // Hopper device would start unordered).
  if (binary >= 90) {
    attributes[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++config.numAttrs;
  }
  if (cluster_blocks > 1) {
    attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attributes[config.numAttrs].val.clusterDim.x = static_cast<unsigned>(cluster_blocks);
    attributes[config.numAttrs].val.clusterDim.y = 1;
    attributes[config.numAttrs].val.clusterDim.z = 1;
    ++config.numAttrs;
  }
  config.attrs = attributes;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), kernel_name);
}

template <typename... Params, typename... Args>
void launch_programmatic(void (*kernel)(Params...), dim3 grid, int threads,
                         size_t dynamic_shared_bytes, cudaStream_t stream, const char* kernel_name,
                         Args&&... args) {
  launch_programmatic_clusters(kernel, grid, 1, threads, dynamic_shared_bytes, stream, kernel_name,
                               std::forward<Args>(args)...);
}

}  // namespace fsdpa::detail::cuda

#define FSDPA_CUDA_CHECK(call) ::fsdpa::detail::cuda::check((call), #call)
