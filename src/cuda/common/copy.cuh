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

// Where cp_async_tile puts element (row, col) of a tile, in 16-bit elements
// from the tile's start.
//
// Rows of kStride elements (a row padded by 16 bytes keeps ldmatrix's 8 row
// addresses in distinct banks).
template <int kStride>
struct PaddedRows {
  static constexpr int offset(int row, int col) { return row * kStride + col; }
};

// The 128-byte swizzle of wgmma operands (PTX ISA, "Shared Memory Matrix
// Layout"): 64-column panels of kRows rows x 128 bytes, one after another;
// 16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row. Serves a
// K-major operand (rows = M or N) and an MN-major one (rows = K) alike. The
// tile must start on a 1024-byte boundary: the hardware swizzles addresses.
template <int kRows>
struct Swizzle128Panels {
  static constexpr int offset(int row, int col) {
    return (col / 64) * kRows * 64 + row * 64 + (((col / 8) % 8) ^ (row % 8)) * 8;
  }
};

// Copies rows [row0, row0 + kRows) x columns [0, kCols) of a row-major
// global matrix into the shared-memory tile at byte address `shared`, laid out
// by Layout, zero-filling rows >= num_rows and columns >= num_cols: the bucket
// tail and the tensor's end cost no padded copy and no out-of-bounds read. T
// is a 16-bit type. With kFillColumnTail false, chunks wholly past num_cols
// are left alone (no instruction at all): the caller keeps those
// shared-memory columns zero, or never reads them. kUnroll: see the loop.
template <int kRows, int kCols, typename Layout, int kThreads, typename T,
          bool kFillColumnTail = true, int kUnroll = 1>
__device__ __forceinline__ void cp_async_tile_to(uint32_t shared, const T* global,
                                                 int64_t row_stride, int row0, int num_rows,
                                                 int num_cols) {
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
    cp_async_16_zfill(shared + Layout::offset(row, col) * 2, source, bytes);
  }
}

// The same into rows of kStride elements at `shared`.
template <int kRows, int kCols, int kStride, int kThreads, typename T, bool kFillColumnTail = true,
          int kUnroll = 1>
__device__ __forceinline__ void cp_async_tile(T* shared, const T* global, int64_t row_stride,
                                              int row0, int num_rows, int num_cols) {
  cp_async_tile_to<kRows, kCols, PaddedRows<kStride>, kThreads, T, kFillColumnTail, kUnroll>(
      shared_address(shared), global, row_stride, row0, num_rows, num_cols);
}

}  // namespace fsdpa::detail::cuda
