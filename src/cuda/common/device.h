// CUDA device plumbing visible to host C++ code that is not compiled by nvcc
// (plan.cpp, the fsdpa command): no CUDA header is included here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fsdpa::detail::cuda {

// Number of CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
// Whether device `index` exists (plan() may run on a machine without one).
bool has_device(int index);

struct DeviceInfo {
  std::string name;
  int compute_capability = 0;  // major * 10 + minor
  int multiprocessors = 0;
  size_t shared_memory_per_block_optin = 0;
  size_t l2_bytes = 0;
  size_t global_memory_bytes = 0;
};

// Properties of device `index`, read once and cached. Throws DeviceError.
const DeviceInfo& device_info(int index);

// The device planning reads for `index`: the present device's properties,
// where there is none the offline target (set_offline_target: `fsdpa plan
// --arch` without a GPU), else null (the rows then assume an H100/H200).
const DeviceInfo* planning_device(int index);

// The device an offline plan assumes (null: none, the default). Set once,
// before planning; plans made under it are for reading, not for launching.
void set_offline_target(const DeviceInfo* target);

// The shared memory a block may opt into on `device` as planning sees it:
// the device's, or FSDPA_SHARED_MEMORY_LIMIT where that is less (tests of
// the tilings for smaller GPUs). Every row's fits check reads it.
size_t block_shared_memory(const DeviceInfo& device);

// The shared-memory class (shared_budget.h's shared_class_for_bytes) whose
// tilings planning takes for `device` (planning_device), from the bytes a
// block may opt into there (block_shared_memory); sm_90's without a device.
int shared_class_of(const DeviceInfo* device);

// Why device `index` cannot run the sm_90a kernels (wgmma, TMA), or empty
// when it can or is not there to ask (plan() on a machine without a GPU).
std::string wgmma_device_mismatch(int index);

// How copy_16 (cuda/common/copy.cuh) reads rows that start on a multiple of
// `row_alignment` bytes (16, 8, 4 or 2): Plan::loads of the rows that use it.
std::string copy_16_loads(int64_t row_alignment);

// Device memory for one call's workspace, allocated and freed in stream order
// (cudaMallocAsync / cudaFreeAsync), so attention() never synchronizes.
class StreamWorkspace {
 public:
  StreamWorkspace(size_t bytes, int device_index, void* stream);
  ~StreamWorkspace();
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  void* stream_ = nullptr;
};

}  // namespace fsdpa::detail::cuda
