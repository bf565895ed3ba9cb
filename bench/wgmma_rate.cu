// Microbenchmark: how fast the H200 runs the wgmma sequences of the MLA
// decode kernel (src/cuda/decode/decode_mla.cu), without loads, softmax or
// hand-overs. One block of two warpgroups per SM, shared memory zeroed, the
// operand layouts and descriptors of the kernel (128-byte swizzle). Prints
// clocks per repetition of each sequence, measured by warpgroup 0's first
// thread of block 0 between two wgmma waits.
//
//   nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -cudart static -Isrc -Iinclude bench/wgmma_rate.cu -o .devbuild/micro/wgmma_rate
// and run it on the GPU machine (carry .devbuild/micro); results in bench/NOTES.md.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>

#include "cuda/common/copy.cuh"
#include "cuda/common/wgmma.cuh"

using namespace fsdpa::detail::cuda;
using T = __nv_bfloat16;

namespace {

constexpr int kReps = 64;
constexpr int kQBytes = 64 * 576 * 2;  // Q: 64 rows, 9 panels of 64 columns
constexpr int kKBytes = 64 * 576 * 2;  // room for a 64-key tile
constexpr int kSmem = 1024 + kQBytes + kKBytes;

enum Mode : int {
  kChain32 = 0,  // warpgroup 0: 36 dependent m64n32k16 (S of a 32-key tile)
  kTwoChains32,  // warpgroup 0: the same 36 as two independent chains of 18
  kSplit32,      // both warpgroups: 18 dependent m64n32k16 each, concurrently
  kChain64,      // warpgroup 0: 36 dependent m64n64k16 (S of a 64-key tile)
  kPv256,        // warpgroup 0: 2 dependent m64n256k16 RS (its P V of a 32-key tile)
  kTile32,       // the kernel's tensor work per tile: warpgroup 0 P V + S, warpgroup 1 P V
  kModes
};
const char* const kNames[kModes] = {"S 36 x m64n32k16, one chain",
                                    "S 36 x m64n32k16, two chains",
                                    "S 2 x 18 m64n32k16, two warpgroups",
                                    "S 36 x m64n64k16, one chain",
                                    "P V 2 x m64n256k16 RS",
                                    "tile: P V both + S 36 x n32"};

template <int N, int kFirst, int kSteps>
__device__ __forceinline__ void scores(float (&s)[N / 8][4], uint64_t q, uint64_t k) {
#pragma unroll
  for (int kk = kFirst; kk < kFirst + kSteps; ++kk) {
    const uint32_t q_offset = (kk / 4) * (64 * 128) + (kk % 4) * 32;
    const uint32_t k_offset = (kk / 4) * (N * 128) + (kk % 4) * 32;
    wgmma_ss<T, N>(s, q + (q_offset >> 4), k + (k_offset >> 4), 1);
  }
}

template <int mode>
__global__ void __launch_bounds__(256, 1) rate(long long* clocks, float* sink) {
#if FSDPA_WGMMA_ARCH
  extern __shared__ unsigned char raw[];
  const uint32_t base = (shared_address(raw) + 1023u) & ~1023u;
  for (int i = threadIdx.x; i < (kQBytes + kKBytes) / 16; i += blockDim.x)
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(base + 16 * i), "r"(0));
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const uint64_t q = swizzle128_descriptor(base, 16, 1024);
  const uint64_t k = swizzle128_descriptor(base + kQBytes, 16, 1024);
  const uint64_t v =
      swizzle128_descriptor(base + kQBytes + warpgroup * 4 * 32 * 128, 32 * 128, 1024);
  float s[4][4] = {}, s2[4][4] = {}, s64[8][4] = {}, o[32][4] = {};
  uint32_t pa[2][4] = {};
  long long start = 0;
  for (int rep = -1; rep < kReps; ++rep) {
    if (rep == 0) start = clock64();
    wgmma_fence();
    switch (mode) {  // a constant: one kernel per mode
      case kChain32:
        if (warpgroup == 0) scores<32, 0, 36>(s, q, k);
        break;
      case kTwoChains32:
        if (warpgroup == 0) {
          scores<32, 0, 18>(s, q, k);
          scores<32, 18, 18>(s2, q, k);
        }
        break;
      case kSplit32:
        if (warpgroup == 0) {
          scores<32, 0, 18>(s, q, k);
        } else {
          scores<32, 18, 18>(s, q, k);
        }
        break;
      case kChain64:
        if (warpgroup == 0) scores<64, 0, 36>(s64, q, k);
        break;
      case kPv256:
        if (warpgroup == 0)
          for (int kk = 0; kk < 2; ++kk) wgmma_rs<T, 256>(o, pa[kk], v + ((kk * 16 * 128) >> 4), 1);
        break;
      case kTile32:
        for (int kk = 0; kk < 2; ++kk) wgmma_rs<T, 256>(o, pa[kk], v + ((kk * 16 * 128) >> 4), 1);
        if (warpgroup == 0) scores<32, 0, 36>(s, q, k);
        break;
      default:
        break;
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(s);
    pin_registers(s2);
    pin_registers(s64);
    pin_registers(o);
    __syncthreads();
  }
  const long long stop = clock64();
  if (blockIdx.x == 0 && threadIdx.x == 0) clocks[mode] = (stop - start) / kReps;
  float acc = s[0][0] + s2[0][0] + s64[0][0] + o[0][0];
  if (acc == 1.f) sink[threadIdx.x] = acc;  // keeps the results alive
#endif
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* clocks = nullptr;
  float* sink = nullptr;
  cudaMalloc(&clocks, sizeof(long long) * kModes);
  cudaMalloc(&sink, sizeof(float) * 256);
  long long host[kModes] = {};
  auto run = [&](auto kernel) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    kernel<<<sms, 256, kSmem>>>(clocks, sink);  // warm-up
    kernel<<<sms, 256, kSmem>>>(clocks, sink);
  };
  run(rate<kChain32>);
  run(rate<kTwoChains32>);
  run(rate<kSplit32>);
  run(rate<kChain64>);
  run(rate<kPv256>);
  run(rate<kTile32>);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  cudaMemcpy(host, clocks, sizeof(host), cudaMemcpyDeviceToHost);
  for (int mode = 0; mode < kModes; ++mode)
    std::printf("%-40s %6lld clk per repetition\n", kNames[mode], host[mode]);
  return 0;
}
