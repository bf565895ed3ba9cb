// Asynchronous global -> shared copies (cp.async, sm_80+).
#pragma once

#include <cstdint>

namespace fsdpa::detail::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Copies `valid_bytes` (0..16) from global `source` to 16 bytes of shared
// memory at `shared_destination` and zero-fills the rest: the predicated
// load that lets a head-dim bucket or a tile run past the tensor's end
// without reading it. With valid_bytes == 0 nothing is read.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t shared_destination, const void* source,
                                                  int valid_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_destination),
               "l"(source), "r"(valid_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Copies rows [row0, row0 + kRows) x columns [0, kCols) of a row-major
// global matrix into shared memory (row stride kStride elements), zero-filling
// rows >= num_rows and columns >= num_cols: the bucket tail and the tensor's
// end cost no padded copy and no out-of-bounds read. T is a 16-bit type.
// With kFillColumnTail false, chunks wholly past num_cols are left alone (no
// instruction at all): the caller keeps those shared-memory columns zero, or
// never reads them. kUnroll: see the loop.
template <int kRows, int kCols, int kStride, int kThreads, typename T, bool kFillColumnTail = true,
          int kUnroll = 1>
__device__ __forceinline__ void cp_async_tile(T* shared, const T* global, int64_t row_stride,
                                              int row0, int num_rows, int num_cols) {
  static_assert(sizeof(T) == 2 && kCols % 8 == 0, "16-byte chunks of 16-bit elements");
  constexpr int kChunksPerRow = kCols / 8;  // 16-byte chunks
  constexpr int kChunks = kRows * kChunksPerRow;
  // Not unrolled by default: unrolled, the prefill kernel's per-chunk
  // addresses are hoisted out of its key loop as 64-bit registers and push S
  // and O into local memory (ptxas). Kernels with registers to spare unroll.
#pragma unroll kUnroll
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    const int chunk = i * kThreads + static_cast<int>(threadIdx.x);
    if (kChunks % kThreads != 0 && chunk >= kChunks) break;
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    const int remaining = num_cols - col;
    if (!kFillColumnTail && remaining <= 0) continue;
    int bytes = remaining >= 8 ? 16 : (remaining > 0 ? remaining * 2 : 0);
    if (row0 + row >= num_rows) bytes = 0;
    const T* source =
        bytes > 0 ? global + static_cast<int64_t>(row0 + row) * row_stride + col : global;
    cp_async_16_zfill(shared_address(shared + row * kStride + col), source, bytes);
  }
}

}  // namespace fsdpa::detail::cuda
