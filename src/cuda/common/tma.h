// Host side of the tensor memory accelerator (sm_90): tensor maps for tiles
// of [batch, head, row, column] tensors of 16-bit elements, in the 128-byte
// swizzle that wgmma reads. The driver's encoder is reached through the
// runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fsdpa::detail::cuda {

// A map of a [batch, heads, rows, cols] tensor whose last dimension has
// stride 1 (element strides of batch, head and row in `strides`, each a
// multiple of 8 elements, the base 16-byte aligned), read in boxes of 64
// columns x box_rows rows, 128-byte swizzled; reads past `rows` or `cols`
// land as zeros. Throws DeviceError when the driver refuses the map.
CUtensorMap make_swizzle128_map(const void* base, int64_t batch, int64_t heads, int64_t rows,
                                int64_t cols, const int64_t (&strides)[3], int box_rows);

}  // namespace fsdpa::detail::cuda
