#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/device.h"
#include "cuda/common/shared_budget.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cuda {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw DeviceError(std::string("fsdpa: CUDA error in ") + call + ": " + cudaGetErrorName(status) +
                    " (" + cudaGetErrorString(status) + ")");
}

namespace {

// What prepare_launch learned about one kernel on one device: read once
// (cudaFuncGetAttributes), so later launches make no CUDA call for it.
struct KernelLimits {
  int max_threads = 0;
  int registers = 0;
  size_t static_shared = 0;
  size_t dynamic_shared_allowed = 0;  // the kernel's current dynamic limit
  int binary_version = 0;             // architecture of the binary the device runs
};

}  // namespace

int prepare_launch(const void* kernel, int threads_per_block, size_t dynamic_shared_bytes,
                   const char* kernel_name) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, KernelLimits> known;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  auto [entry, first_launch] = known.try_emplace({kernel, device});
  KernelLimits& limits = entry->second;
  if (first_launch) {
    cudaFuncAttributes attributes{};
    try {
      check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
    } catch (...) {
      known.erase(entry);
      throw;
    }
    limits.max_threads = attributes.maxThreadsPerBlock;
    limits.registers = attributes.numRegs;
    limits.static_shared = attributes.sharedSizeBytes;
    limits.dynamic_shared_allowed = static_cast<size_t>(attributes.maxDynamicSharedSizeBytes);
    limits.binary_version = attributes.binaryVersion;
  }
  if (threads_per_block > limits.max_threads)
    throw DeviceError(std::string("fsdpa: kernel ") + kernel_name + " launches " +
                      std::to_string(threads_per_block) +
                      " threads per block but was compiled for at most " +
                      std::to_string(limits.max_threads) +
                      " (registers: " + std::to_string(limits.registers) + " per thread)");
  if (dynamic_shared_bytes <= limits.dynamic_shared_allowed) return limits.binary_version;
  const DeviceInfo& info = device_info(device);
  const size_t total_shared = limits.static_shared + dynamic_shared_bytes;
  if (total_shared > info.shared_memory_per_block_optin)
    throw DeviceError(std::string("fsdpa: kernel ") + kernel_name + " needs " +
                      std::to_string(total_shared) + " bytes of shared memory per block, device " +
                      std::to_string(device) + " allows " +
                      std::to_string(info.shared_memory_per_block_optin));
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dynamic_shared_bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  limits.dynamic_shared_allowed = dynamic_shared_bytes;
  return limits.binary_version;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return count;
}

bool has_device(int index) { return index >= 0 && index < device_count(); }

namespace {
const DeviceInfo* offline_target = nullptr;
}  // namespace

void set_offline_target(const DeviceInfo* target) { offline_target = target; }

const DeviceInfo* planning_device(int index) {
  if (has_device(index)) return &device_info(index);
  return offline_target;
}

std::string wgmma_device_mismatch(int index) {
  const DeviceInfo* device = planning_device(index);
  if (device == nullptr) return "";
  const int capability = device->compute_capability;
  if (capability == 90) return "";
  return "compute capability " + std::to_string(capability) + " of device " +
         std::to_string(index) + ": the wgmma kernel runs on sm_90 (Hopper) only";
}

const DeviceInfo& device_info(int index) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DeviceInfo>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (index >= 0 && static_cast<size_t>(index) < cache.size() && cache[static_cast<size_t>(index)])
    return *cache[static_cast<size_t>(index)];
  if (index < 0 || index >= device_count())
    throw DeviceError("fsdpa: CUDA device " + std::to_string(index) + " does not exist (" +
                      std::to_string(device_count()) + " devices)");
  if (cache.size() <= static_cast<size_t>(index)) cache.resize(static_cast<size_t>(index) + 1);
  if (!cache[static_cast<size_t>(index)]) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    auto info = std::make_unique<DeviceInfo>();
    info->name = prop.name;
    info->compute_capability = prop.major * 10 + prop.minor;
    info->multiprocessors = prop.multiProcessorCount;
    info->shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
    info->l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    info->global_memory_bytes = prop.totalGlobalMem;
    cache[static_cast<size_t>(index)] = std::move(info);
  }
  return *cache[static_cast<size_t>(index)];
}

size_t block_shared_memory(const DeviceInfo& device) {
  const size_t bytes = device.shared_memory_per_block_optin;
  const int64_t limit = shared_memory_limit();
  return limit >= 0 && static_cast<size_t>(limit) < bytes ? static_cast<size_t>(limit) : bytes;
}

int shared_class_of(const DeviceInfo* device) {
  if (device == nullptr) return 0;
  return shared_class_for_bytes(static_cast<long long>(block_shared_memory(*device)));
}

StreamWorkspace::StreamWorkspace(size_t bytes, int device_index, void* stream) : stream_(stream) {
  if (bytes == 0) return;
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device_index)
    throw InvalidArgument("fsdpa: tensors are on cuda:" + std::to_string(device_index) +
                          " but the current device is cuda:" + std::to_string(current));
  check(cudaMallocAsync(&data_, bytes, static_cast<cudaStream_t>(stream)), "cudaMallocAsync");
}

StreamWorkspace::~StreamWorkspace() {
  if (data_ != nullptr) (void)cudaFreeAsync(data_, static_cast<cudaStream_t>(stream_));
}

std::string copy_16_loads(int64_t row_alignment) {
  if (row_alignment >= 16) return "cp.async, 16 bytes";
  if (row_alignment >= 4) return "cp.async pieces of " + std::to_string(row_alignment) + " bytes";
  return "register copies of 2-byte elements";
}

}  // namespace fsdpa::detail::cuda
