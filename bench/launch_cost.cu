// Microbenchmark: the host's cost of one launch, by kind, against the
// library's own call on a small CUDA decode (the shape of bench/overhead.py:
// B=1 Hq=32 Hkv=8 Lq=1 Lk=512 D=128 bf16), so that the call-overhead bench's
// "fsdpa_attention (ctypes + library)" row splits into what the CUDA runtime
// costs and what the library adds (bench/NOTES.md, session 21).
//
// Each row, two figures, the median of 7 rounds, the rows interleaved round
// by round (as overhead.py does) so that each sees the same host:
//   host: the wall time of 200 calls, without waiting for the GPU, over 200
//     (fewer launches than the launch queue holds, so none waits for a slot);
//   stream: 2000 back-to-back calls and one synchronize, over 2000: the
//     larger of the host's and the GPU's cost per call.
//
//   nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -Iinclude
//     bench/launch_cost.cu -L<build> -lfsdpa -Xlinker -rpath=<build> -o launch_cost
// (bench/device.sh builds and runs it in its `verify` and `ecosystem` stages.)
#include <cuda_runtime.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fsdpa/c_api.h"

namespace {

__global__ void empty_kernel(int) {}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "launch_cost: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

void check(fsdpa_status status, const char* what) {
  if (status == FSDPA_OK) return;
  std::fprintf(stderr, "launch_cost: %s: %s\n", what, fsdpa_last_error());
  std::exit(1);
}

fsdpa_tensor view(void* data, int64_t b, int64_t h, int64_t l, int64_t d) {
  fsdpa_tensor t{};
  t.data = data;
  t.dtype = FSDPA_DTYPE_BF16;
  t.device_type = FSDPA_DEVICE_CUDA;
  t.device_index = 0;
  t.rank = 4;
  const int64_t sizes[4] = {b, h, l, d};
  const int64_t strides[4] = {h * l * d, l * d, d, 1};
  for (int i = 0; i < 4; ++i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = strides[i];
  }
  return t;
}

// Launches `kernel` through cudaLaunchKernelEx with the given attributes.
cudaError_t launch_ex(cudaStream_t stream, unsigned blocks, bool programmatic, unsigned cluster) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(128);
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (programmatic) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, empty_kernel, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const int64_t hq = 32, hkv = 8, lk = 512, d = 128;
  void *q, *k, *v, *out;
  check(cudaMalloc(&q, hq * d * 2), "malloc q");
  check(cudaMalloc(&k, hkv * lk * d * 2), "malloc k");
  check(cudaMalloc(&v, hkv * lk * d * 2), "malloc v");
  check(cudaMalloc(&out, hq * d * 2), "malloc out");
  check(cudaMemset(q, 0, hq * d * 2), "memset q");
  check(cudaMemset(k, 0, hkv * lk * d * 2), "memset k");
  check(cudaMemset(v, 0, hkv * lk * d * 2), "memset v");
  fsdpa_tensors tensors{};
  tensors.q = view(q, 1, hq, 1, d);
  tensors.k = view(k, 1, hkv, lk, d);
  tensors.v = view(v, 1, hkv, lk, d);
  tensors.out = view(out, 1, hq, 1, d);
  const fsdpa_options options = fsdpa_options_init();
  fsdpa_plan* plan = nullptr;
  check(fsdpa_plan_create(&tensors, &options, &plan), "plan");
  fsdpa_plan_info info{};
  check(fsdpa_plan_get_info(plan, &info), "plan info");
  void* workspace = nullptr;
  if (info.workspace_bytes > 0) check(cudaMalloc(&workspace, info.workspace_bytes), "workspace");
  std::printf(
      "bench/launch_cost.cu: the host's cost of one call (host: 200 calls without waiting, over "
      "200; stream: %d calls and a synchronize, over %d; medians of 7 interleaved rounds)\n",
      calls, calls);
  int variables = 0;
  for (char** entry = environ; *entry != nullptr; ++entry) ++variables;
  std::printf("environment: %d variables\n", variables);
  std::printf("plan: kernel %s, splits %lld, workspace %llu bytes\n%s\n", info.kernel,
              static_cast<long long>(info.num_kv_splits),
              static_cast<unsigned long long>(info.workspace_bytes), fsdpa_plan_explain(plan));

  const std::vector<std::pair<std::string, std::function<void()>>> rows = {
      {"empty kernel <<<1, 128>>>",
       [&] {
         empty_kernel<<<1, 128, 0, stream>>>(0);
         check(cudaGetLastError(), "<<<>>>");
       }},
      {"cudaLaunchKernelEx, no attributes", [&] { check(launch_ex(stream, 8, false, 1), "ex"); }},
      {"cudaLaunchKernelEx, programmatic", [&] { check(launch_ex(stream, 8, true, 1), "ex pdl"); }},
      {"cudaLaunchKernelEx, programmatic + cluster 8",
       [&] { check(launch_ex(stream, 8, true, 8), "ex cluster"); }},
      {"cudaMallocAsync + cudaFreeAsync (64 KiB)",
       [&] {
         void* p = nullptr;
         check(cudaMallocAsync(&p, 65536, stream), "mallocAsync");
         check(cudaFreeAsync(p, stream), "freeAsync");
       }},
      {"cudaGetDevice",
       [&] {
         int device = 0;
         check(cudaGetDevice(&device), "getDevice");
       }},
      {"fsdpa_run (prepared plan)",
       [&] {
         check(fsdpa_run(plan, &tensors, workspace, info.workspace_bytes, stream), "fsdpa_run");
       }},
      {"fsdpa_attention", [&] { check(fsdpa_attention(&tensors, &options, stream), "attention"); }},
      {"fsdpa_attention_data",
       [&] {
         check(fsdpa_attention_data(&tensors, q, k, v, out, nullptr, &options, stream),
               "attention_data");
       }},
  };
  for (const auto& row : rows)
    for (int i = 0; i < 50; ++i) row.second();
  check(cudaStreamSynchronize(stream), "sync");
  auto per_call_us = [&](const std::function<void()>& call, int count, bool wait) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) call();
    if (wait) check(cudaStreamSynchronize(stream), "sync");
    const auto stop = std::chrono::steady_clock::now();
    if (!wait) check(cudaStreamSynchronize(stream), "sync");
    return std::chrono::duration<double, std::micro>(stop - start).count() / count;
  };
  std::vector<std::vector<double>> host(rows.size()), streamed(rows.size());
  for (int round = 0; round < 7; ++round)
    for (size_t r = 0; r < rows.size(); ++r) {
      host[r].push_back(per_call_us(rows[r].second, 200, false));
      streamed[r].push_back(per_call_us(rows[r].second, calls, true));
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("| call | host us | stream us |\n|---|---|---|\n");
  for (size_t r = 0; r < rows.size(); ++r)
    std::printf("| %s | %.2f | %.2f |\n", rows[r].first.c_str(), median(host[r]),
                median(streamed[r]));
  fsdpa_plan_destroy(plan);
  // Without the runtimes' teardown at exit (this process holds two: its own
  // and the library's static one), which hung in session 21's run.
  std::fflush(stdout);
  std::_Exit(0);
}
