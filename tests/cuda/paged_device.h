// A paged case's buffers (tests/common/paged_case.h) on device 0, for the
// GPU suites that run them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "common/paged_case.h"
#include "gpu_case.h"  // cuda_ok

namespace fsdpa::gpu_test {

using test::PagedData;
using test::Storage;

// The case's buffers on device 0, with the views moved onto them.
class DeviceCopy {
 public:
  explicit DeviceCopy(PagedData& d) : host_(d) {
    for (Storage* s : d.storages()) {
      void* device = nullptr;
      if (s->size_bytes() > 0) {
        cuda_ok(cudaMalloc(&device, s->size_bytes()), "cudaMalloc");
        cuda_ok(cudaMemcpy(device, s->bytes(), s->size_bytes(), cudaMemcpyHostToDevice), "upload");
      }
      buffers_.push_back({s, device});
    }
    tensors = d.tensors;
    for (TensorView* t : {&tensors.q, &tensors.k, &tensors.v, &tensors.out}) move(*t);
    for (auto* t :
         {&tensors.mask, &tensors.sinks, &tensors.lse, &tensors.block_table, &tensors.seq_lens_k})
      if (*t) move(**t);
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() {
    for (const Buffer& b : buffers_)
      if (b.device) (void)cudaFree(b.device);
  }
  // out and lse back into the host buffers.
  void download() {
    cuda_ok(cudaDeviceSynchronize(), "synchronize");
    for (const Buffer& b : buffers_)
      if (b.device && (b.host == &host_.out || b.host == &host_.lse))
        cuda_ok(cudaMemcpy(b.host->bytes(), b.device, b.host->size_bytes(), cudaMemcpyDeviceToHost),
                "download");
  }
  Tensors tensors;

 private:
  struct Buffer {
    Storage* host;
    void* device;
  };
  void move(TensorView& t) {
    t.device = {DeviceType::CUDA, 0};
    const auto* p = static_cast<const std::byte*>(t.data);
    for (const Buffer& b : buffers_)
      if (p >= b.host->bytes() && p < b.host->bytes() + std::max<size_t>(b.host->size_bytes(), 1)) {
        t.data = static_cast<std::byte*>(b.device) + (p - b.host->bytes());
        return;
      }
    throw std::runtime_error("a view outside the case's buffers");
  }
  PagedData& host_;
  std::vector<Buffer> buffers_;
};

}  // namespace fsdpa::gpu_test
