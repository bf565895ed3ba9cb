// Decode calls whose per-sequence lengths and block table are written by the
// kernel just before them in the stream. The decode kernels launch with
// programmatic dependent launch, so their blocks may start while that kernel
// still runs; what they read of the lengths and the table before their wait
// (a guess of their block, for an L2 prefetch) must not decide what they
// compute, nor stay behind in L1. The kernel before here lets them launch at
// once, spins ~50 us, then writes the real lengths and table over stale ones
// (every sequence at the capacity, every table entry page 0).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/paged_case.h"
#include "cuda/decode/decode.h"
#include "paged_device.h"

namespace fsdpa::test {
namespace {

using gpu_test::cuda_ok;
using gpu_test::DeviceCopy;

// Lets the next kernel in the stream launch, spins `cycles` clocks, then
// copies lengths[i] = new_lengths[i] (i < lengths_count) and likewise the
// table. One block.
__global__ void write_late(int32_t* lengths, const int32_t* new_lengths, int lengths_count,
                           int32_t* table, const int32_t* new_table, int table_count,
                           long long cycles) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (int i = static_cast<int>(threadIdx.x); i < lengths_count; i += blockDim.x)
    lengths[i] = new_lengths[i];
  for (int i = static_cast<int>(threadIdx.x); i < table_count; i += blockDim.x)
    table[i] = new_table[i];
}

// A device copy of `s`'s bytes (freed by the caller).
int32_t* device_copy(const Storage& s) {
  void* p = nullptr;
  cuda_ok(cudaMalloc(&p, s.size_bytes()), "cudaMalloc");
  cuda_ok(cudaMemcpy(p, s.bytes(), s.size_bytes(), cudaMemcpyHostToDevice), "upload");
  return static_cast<int32_t*>(p);
}

// One sequence plans no list (the tensor-core kernel guesses its block
// before the wait); four plan a list. Dense caches with lengths and paged
// ones; the generic kernels (64/64) and MLA's (576/512, v a view of k).
TEST(DecodeStreamOrder, LengthsAndTableWrittenByTheKernelBefore) {
  PagedCase generic;
  generic.heads_q = 8, generic.heads_kv = 2;
  PagedCase mla;
  mla.dqk = 576, mla.dv = 512, mla.mla_alias = true, mla.heads_q = 16, mla.heads_kv = 1;
  for (const PagedCase& kind : {generic, mla})
    for (const bool paged : {false, true})
      for (const int64_t batch : {1, 4}) {
        PagedCase c = kind;
        c.dtype = DType::BF16;
        c.batch = batch, c.page_size = 16, c.max_pages = 64;
        c.paged = paged;
        SCOPED_TRACE(c.name());
        if (!detail::cuda::decode_bucket_compiled(c.dqk, c.dv)) continue;  // FSDPA_HEAD_DIMS
        Rng rng(base_seed() ^ name_hash(c.name()));
        PagedData d = make_paged(c, rng);
        d.out.poison();
        DeviceCopy device(d);
        int32_t* lengths = static_cast<int32_t*>(device.tensors.seq_lens_k->data);
        int32_t* new_lengths = device_copy(d.lens);
        int32_t* table = paged ? static_cast<int32_t*>(device.tensors.block_table->data) : nullptr;
        int32_t* new_table = paged ? device_copy(d.table) : nullptr;
        const std::vector<int32_t> stale(static_cast<size_t>(batch), int32_t(c.capacity()));
        cuda_ok(cudaMemcpy(lengths, stale.data(), stale.size() * sizeof(int32_t),
                           cudaMemcpyHostToDevice),
                "stale lengths");
        if (paged) cuda_ok(cudaMemset(table, 0, d.table.size_bytes()), "stale table");

        const Plan plan = fsdpa::plan(describe(device.tensors, d.options), d.options);
        EXPECT_EQ(plan.path, Path::FusedDecode) << plan.explain();
        void* workspace = nullptr;
        if (plan.workspace_bytes > 0)
          cuda_ok(cudaMalloc(&workspace, plan.workspace_bytes), "cudaMalloc");
        cudaStream_t stream = nullptr;
        cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
        write_late<<<1, 256, 0, stream>>>(
            lengths, new_lengths, static_cast<int>(batch), table, new_table,
            paged ? static_cast<int>(d.table.size_bytes() / 4) : 0, 100000);
        cuda_ok(cudaGetLastError(), "write_late");
        run(plan, device.tensors, workspace, plan.workspace_bytes, stream);
        device.download();  // synchronizes the device
        const PagedCheck check = check_paged(d);
        EXPECT_TRUE(check.ok) << plan.kernel << ", " << plan.num_kv_splits << " splits\n"
                              << check.report;
        cuda_ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
        for (void* p : {workspace, static_cast<void*>(new_lengths), static_cast<void*>(new_table)})
          if (p) cuda_ok(cudaFree(p), "cudaFree");
      }
}

}  // namespace
}  // namespace fsdpa::test
