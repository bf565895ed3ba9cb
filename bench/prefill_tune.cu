// Times tile configurations of the mma.sync prefill kernel side by side
// (bf16, B=4, H=16, L=4096, median of 10 CUDA-event timings), to back the
// rows of src/cuda/prefill/config.h. Each variant is its own translation
// unit (-DTUNE_VARIANT=i) so they compile in parallel:
//   F="-std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude
//   -Isrc" for i in 0 1 2 3 4 5 6; do nvcc $F -DTUNE_VARIANT=$i -c bench/prefill_tune.cu -o v$i.o &
//   done nvcc $F -c bench/prefill_tune.cu -o main.o; nvcc $F -c src/cuda/common/device.cu -o
//   device.o nvcc -gencode=arch=compute_90a,code=sm_90a main.o v?.o device.o -o
//   .devbuild/tune/prefill_tune
// Run it on the GPU machine (carry .devbuild/tune) and copy the winners into
// config.h with their numbers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda/prefill/config.h"
#include "cuda/prefill/params.h"

namespace tune {
using fsdpa::detail::cuda::PrefillTile;
struct Variant {
  int head_dim;
  PrefillTile tile;
};
// The first row of each head dim is the tuning table's choice.
constexpr Variant kVariants[] = {
    {64, {4, 2, 64, 3, 2}},  {64, {4, 1, 64, 3, 3}},  {128, {4, 2, 32, 3, 1}},
    {128, {8, 1, 64, 2, 1}}, {128, {4, 1, 64, 2, 2}}, {256, {8, 1, 64, 2, 1}},
    {256, {4, 1, 32, 2, 2}},
};
[[maybe_unused]] constexpr int kCount = sizeof(kVariants) / sizeof(kVariants[0]);
using Launch = void (*)(const fsdpa::detail::cuda::PrefillParams&, cudaStream_t);
}  // namespace tune

#if defined(TUNE_VARIANT)
#include "cuda/prefill/kernel.cuh"
namespace tune {
namespace {
constexpr Variant kMine = kVariants[TUNE_VARIANT];
void launch_this(const fsdpa::detail::cuda::PrefillParams& p, cudaStream_t s) {
  fsdpa::detail::cuda::launch_prefill_tile<kMine.head_dim, kMine.head_dim, __nv_bfloat16,
                                           fsdpa::detail::cuda::encode_tile(kMine.tile)>(p, s);
}
}  // namespace
}  // namespace tune
#define TUNE_NAME2(n) tune_variant_##n
#define TUNE_NAME(n) TUNE_NAME2(n)
tune::Launch TUNE_NAME(TUNE_VARIANT) = &tune::launch_this;
#else
#define TUNE_DECLARE(n) extern tune::Launch tune_variant_##n;
TUNE_DECLARE(0)
TUNE_DECLARE(1)
TUNE_DECLARE(2)
TUNE_DECLARE(3)
TUNE_DECLARE(4)
TUNE_DECLARE(5)
TUNE_DECLARE(6)

__global__ void fill(__nv_bfloat16* x, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.0f) - 1.0f);
  }
}

int main() {
  const tune::Launch launches[] = {tune_variant_0, tune_variant_1, tune_variant_2, tune_variant_3,
                                   tune_variant_4, tune_variant_5, tune_variant_6};
  const int batch = 4, heads = 16, len = 4096;
  int best[512] = {};
  double best_score[512] = {};
  std::printf(
      "| D | warps x row tiles | tile_k | stages | min blocks | non-causal TFLOP/s | causal "
      "TFLOP/s |\n|---|---|---|---|---|---|---|\n");
  for (int v = 0; v < tune::kCount; ++v) {
    const auto& variant = tune::kVariants[v];
    const int d = variant.head_dim;
    const size_t n = size_t{1} * batch * heads * len * d;
    __nv_bfloat16 *q, *k, *vv, *o;
    cudaMalloc(&q, n * 2);
    cudaMalloc(&k, n * 2);
    cudaMalloc(&vv, n * 2);
    cudaMalloc(&o, n * 2);
    fill<<<1024, 256> > >(q, n, 1u);
    fill<<<1024, 256> > >(k, n, 2u);
    fill<<<1024, 256> > >(vv, n, 3u);
    fsdpa::detail::cuda::PrefillParams p;
    p.q = q;
    p.k = k;
    p.v = vv;
    p.out = o;
    const int64_t batch_stride = int64_t{heads} * len * d, head_stride = int64_t{len} * d;
    p.q_strides = p.out_strides = {batch_stride, head_stride, d, 1};
    p.k_strides = p.v_strides = {batch_stride, head_stride, d, 1};
    p.batch = batch;
    p.heads_q = p.heads_kv = heads;
    p.head_dim_qk = p.head_dim_v = d;
    p.scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(d));
    p.semantics.len_q = p.semantics.len_k = len;
    double tflops[2];
    for (int causal = 0; causal < 2; ++causal) {
      p.semantics.causal = causal != 0;
      std::vector<float> times;
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      for (int rep = 0; rep < 13; ++rep) {
        cudaEventRecord(a);
        launches[v](p, nullptr);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (rep >= 3) times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const double flops =
          4.0 * batch * heads * double(len) * len * (2 * d) / 2 * (causal ? 0.5 : 1.0);
      tflops[causal] = flops / (times[times.size() / 2] * 1e-3) / 1e12;
    }
    const cudaError_t status = cudaDeviceSynchronize();
    std::printf("| %d | %d x %d | %d | %d | %d | %.0f | %.0f |%s\n", d, variant.tile.warps,
                variant.tile.row_tiles, variant.tile.tile_k, variant.tile.stages,
                variant.tile.min_blocks, tflops[0], tflops[1],
                status == cudaSuccess ? "" : cudaGetErrorString(status));
    if (status == cudaSuccess && tflops[0] + tflops[1] > best_score[d]) {
      best_score[d] = tflops[0] + tflops[1];
      best[d] = v;
    }
    cudaFree(q);
    cudaFree(k);
    cudaFree(vv);
    cudaFree(o);
  }
  // Machine-readable winners (non-causal + causal TFLOP/s) for bench/device.sh.
  for (int d = 0; d < 512; ++d)
    if (best_score[d] > 0) {
      const auto& t = tune::kVariants[best[d]].tile;
      std::printf("BEST %d %d, %d, %d, %d, %d\n", d, t.warps, t.row_tiles, t.tile_k, t.stages,
                  t.min_blocks);
    }
  return 0;
}
#endif
