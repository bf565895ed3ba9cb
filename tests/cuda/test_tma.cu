// The tensor maps of cuda/common/tma.h: a panel map's box (all nine panels
// of a row range in one copy) lands the bytes that make_swizzle128_map's
// nine boxes land, zeros past the rows included; and a panel map of a width
// that is not whole panels is refused before the driver is asked.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/common/copy.cuh"
#include "cuda/common/device.h"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.cuh"
#include "fsdpa/fsdpa.h"
#include "gpu_case.h"

namespace fsdpa::test {
namespace {

using detail::cuda::TileMap;
using gpu_test::Buffer;
using gpu_test::cuda_ok;

constexpr int kBoxRows = 16, kPanels = 9, kColumns = 64 * kPanels;
constexpr int kBoxBytes = kBoxRows * kColumns * 2;

// Block 0 copies rows [row, row + 16) of kv head `head` both ways into
// shared memory (the panel map's one box, then the row map's nine boxes,
// each panel 16 rows x 128 bytes after the other) and writes both out.
__global__ void land_both(const __grid_constant__ TileMap panels,
                          const __grid_constant__ TileMap boxes, int row, int head,
                          unsigned char* out) {
#if FSDPA_WGMMA_ARCH
  using namespace detail::cuda;
  extern __shared__ unsigned char raw[];
  const uint32_t raw_address = shared_address(raw);
  const uint32_t base = (raw_address + 1023u) & ~1023u;
  const unsigned char* landed = raw + (base - raw_address);
  const uint32_t barrier = base + 2 * kBoxBytes;
  if (threadIdx.x == 0) {
    barrier_init(barrier);
    barrier_init_fence();
    barrier_expect_bytes(barrier, 2 * kBoxBytes);
    tma_load_5d(base, &panels.map, barrier, 0, row, 0, head, 0);
    for (int panel = 0; panel < kPanels; ++panel)
      tma_load_4d(base + kBoxBytes + panel * kBoxRows * 128, &boxes.map, barrier, panel * 64, row,
                  head, 0);
  }
  __syncthreads();
  barrier_wait(barrier, 0);
  for (int i = static_cast<int>(threadIdx.x); i < 2 * kBoxBytes; i += static_cast<int>(blockDim.x))
    out[i] = landed[i];
#endif
}

TEST(CudaTensorMaps, PanelMapNeedsWholePanels) {
  const int64_t strides[3] = {0, 0, 100};
  std::vector<uint16_t> rows(16 * 100);
  try {
    (void)detail::cuda::make_swizzle128_panel_map(rows.data(), 1, 1, 16, 100, strides, 16, 1);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "fsdpa: internal: a panel map needs whole 64-column panels, not 100 columns");
  }
}

TEST(CudaTensorMaps, PanelBoxLandsTheBytesOfNineBoxes) {
  if (!detail::cuda::has_device(0)) GTEST_SKIP() << "no CUDA device";
  if (const std::string why = detail::cuda::wgmma_device_mismatch(0); !why.empty())
    GTEST_SKIP() << why;
  // Rows of two kv heads side by side ([rows, 2, 576]: the head stride below
  // the row stride, as a page pool's), 40 rows: the box from row 30 reads
  // past the end.
  constexpr int kRows = 40, kHeads = 2;
  Buffer k(size_t{kRows} * kHeads * kColumns * 2), out(2 * kBoxBytes);
  std::vector<uint16_t> host(size_t{kRows} * kHeads * kColumns);
  std::mt19937 random(20261205);
  for (uint16_t& x : host) x = static_cast<uint16_t>(random() & 0x3fffu);
  std::memcpy(k.host.data(), host.data(), k.host.size());
  k.upload();
  const int64_t strides[3] = {0, kColumns, kHeads * kColumns};  // batch, head, row
  const TileMap panels = detail::cuda::make_swizzle128_panel_map(
      k.device, 1, kHeads, kRows, kColumns, strides, kBoxRows, kPanels);
  const TileMap boxes =
      detail::cuda::make_swizzle128_map(k.device, 1, kHeads, kRows, kColumns, strides, kBoxRows);
  const int shared = 1024 + 2 * kBoxBytes + 16;
  cuda_ok(cudaFuncSetAttribute(land_both, cudaFuncAttributeMaxDynamicSharedMemorySize, shared),
          "shared memory attribute");
  for (const int row : {0, 17, 30}) {
    for (const int head : {0, 1}) {
      cuda_ok(cudaMemset(out.device, 0xff, out.host.size()), "poison");
      land_both<<<1, 128, shared>>>(panels, boxes, row, head,
                                    static_cast<unsigned char*>(out.device));
      cuda_ok(cudaGetLastError(), "land_both");
      out.download();
      const std::vector<unsigned char>& landed = out.host;
      int differences = 0;
      for (int i = 0; i < kBoxBytes; ++i) differences += landed[i] != landed[kBoxBytes + i];
      EXPECT_EQ(differences, 0) << "row " << row << ", head " << head;
      // Both against the tensor: element (r, c) at panel c / 64, row r, its
      // 16-byte chunk swizzled by the row (chunk ^ r % 8).
      int wrong = 0;
      for (int r = 0; r < kBoxRows && row + r < kRows; ++r)
        for (int c = 0; c < kColumns; ++c) {
          const int at = (c / 64 * kBoxRows + r) * 128 + ((c % 64 / 8) ^ (r % 8)) * 16 + c % 8 * 2;
          const uint16_t x = static_cast<uint16_t>(landed[at] | landed[at + 1] << 8);
          wrong +=
              x != host[(static_cast<size_t>(row) + r) * kHeads * kColumns + head * kColumns + c];
        }
      EXPECT_EQ(wrong, 0) << "row " << row << ", head " << head;
      // Rows past the tensor's end land as zeros (the last box: 6 of its rows).
      if (row == 30) {
        int nonzero = 0;
        for (int panel = 0; panel < kPanels; ++panel)
          for (int r = kRows - row; r < kBoxRows; ++r)
            for (int b = 0; b < 128; ++b) nonzero += landed[(panel * kBoxRows + r) * 128 + b] != 0;
        EXPECT_EQ(nonzero, 0) << "head " << head;
      }
    }
  }
}

}  // namespace
}  // namespace fsdpa::test
