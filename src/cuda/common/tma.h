// Host side of the tensor memory accelerator (sm_90): tensor maps for tiles
// of [batch, head, row, column] tensors of 16-bit elements, in the 128-byte
// swizzle that wgmma reads. The driver's encoder is reached through the
// runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fsdpa::detail::cuda {

// A map of a [batch, heads, rows, cols] tensor of 16-bit elements (bf16 or
// f16: the copy engine moves bytes; zero bits are zero in both) whose last
// dimension has stride 1 (element strides of batch, head and row in
// `strides`, each a multiple of 8 elements, the base 16-byte aligned), read
// in boxes of 64 columns x box_rows rows (x box_heads heads: the box's rows
// are then the heads' rows one after the other), 128-byte swizzled; reads past
// `rows` or `cols` land as zeros. A batch or head dimension broadcast with
// stride 0 is mapped with extent 1: multiply its coordinate by
// batch_step / head_step (0 there, else 1). Throws DeviceError when the
// driver refuses the map.
struct TileMap {
  CUtensorMap map;
  int head_step;
  int batch_step;
};
TileMap make_swizzle128_map(const void* base, int64_t batch, int64_t heads, int64_t rows,
                            int64_t cols, const int64_t (&strides)[3], int box_rows,
                            int box_heads = 1);

// The same tensor as 64-column panels, 128 bytes apart (cols a multiple of
// 64; Error otherwise), read in boxes of box_rows rows x box_panels panels:
// one copy lands box_panels panels of box_rows rows each, panel after panel
// (2-byte elements: box_rows x 128 bytes a panel), as that many boxes of
// make_swizzle128_map's would. A 5-d map: tma_load_5d (column 0, row, first
// panel, head, batch).
TileMap make_swizzle128_panel_map(const void* base, int64_t batch, int64_t heads, int64_t rows,
                                  int64_t cols, const int64_t (&strides)[3], int box_rows,
                                  int box_panels);

}  // namespace fsdpa::detail::cuda
