// Microbenchmark: how fast TMA streams the MLA decode kernel's K tiles (32
// keys x 576 bf16 columns as nine 64-column boxes, 128-byte swizzle) into a
// ring of shared-memory stages with no math at all: the floor under that
// kernel's main loop (src/cuda/decode/decode_mla.cu; bench/NOTES.md, session
// 8, "the ingest hypothesis"). One block per SM as there (the stages fill its
// shared memory), 128 blocks, 512 keys a block as at B=1 Hq=128 Lk=32768:
//   paired: blocks 2s and 2s + 1 read split s (the kernel's two row chunks),
//           64 splits of a 32768-key K;
//   unique: every block its own 512 keys of a 65536-key K.
// One thread issues the copies (a stage refilled once freed), one warp waits
// for each tile and frees it. L2 is flushed (a 256 MB memset) before every
// timed launch. Prints per case the median launch time, the SMs' intake
// (bytes the blocks received / time), and a block's loop in clocks and
// bytes per clock.
// Then, paired at 4 stages, a tile in boxes of 32, 16 or 8 rows (the paged
// kernel's one, two or four pages a tile: 9, 18 or 36 copies) and the same
// with every box taking all nine panels (make_swizzle128_panel_map: 1, 2 or
// 4 copies a tile): whether the copy engine lands a tile of more, smaller
// boxes more slowly (bench/NOTES.md, session 34: page 16's late tiles).
//
//   nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a
//     -cudart static -Isrc -Iinclude bench/tma_ingest.cu src/cuda/common/tma.cu
//     -o .devbuild/micro/tma_ingest
// and run it on the GPU machine (carry .devbuild/micro); an argument sets the
// number of blocks (default 128).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/copy.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.cuh"
#include "fsdpa/fsdpa.h"

using namespace fsdpa::detail::cuda;

namespace {

constexpr int kTileKeys = 32;
constexpr int kColumns = 576;
constexpr int kPanels = kColumns / 64;
constexpr int kPanelBytes = kTileKeys * 128;
constexpr int kTileBytes = kPanels * kPanelBytes;
constexpr int kBlocks = 128;
constexpr int kKeysPerBlock = 512;
constexpr int kThreads = 64;  // warp 0: the issuing thread; warp 1: the consumer

__device__ __forceinline__ uint32_t shared_u32(uint32_t address) {
  uint32_t value;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(value) : "r"(address) : "memory");
  return value;
}

// A tile's copies: boxes of box_rows rows, each one panel (4-d map) or all
// nine (`panels`, 5-d map: the box lands [panel][box_rows rows], so the
// stage holds box after box).
struct TileBoxes {
  int box_rows;
  bool panels;
};

template <int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    stream_tiles(const __grid_constant__ TileMap map, int paired, TileBoxes boxes,
                 long long* block_clocks, uint32_t* sink) {
#if FSDPA_WGMMA_ARCH
  extern __shared__ unsigned char shared_raw[];
  const uint32_t raw = shared_address(shared_raw);
  const uint32_t stages = (raw + 1023u) & ~1023u;
  const uint32_t barriers = stages + kStages * kTileBytes;
  auto full = [&](int tile) { return barriers + 8 * (tile % kStages); };
  auto consumed = [&](int tile) { return barriers + 8 * (kStages + tile % kStages); };
  auto parity = [](int tile) { return static_cast<uint32_t>(tile / kStages % 2); };
  constexpr int kTiles = kKeysPerBlock / kTileKeys;
  const int first_key = (paired ? blockIdx.x / 2 : blockIdx.x) * kKeysPerBlock;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full(s));
      barrier_init(consumed(s), 32);
    }
    barrier_init_fence();
  }
  __syncthreads();
  const long long start = clock64();
  uint32_t acc = 0;
  if (threadIdx.x == 0) {
    for (int t = 0; t < kTiles; ++t) {
      if (t >= kStages) barrier_wait(consumed(t), parity(t) ^ 1);  // tile t - stages consumed
      const uint32_t stage = stages + (t % kStages) * kTileBytes;
      barrier_expect_bytes(full(t), kTileBytes);
      for (int box = 0; box < kTileKeys / boxes.box_rows; ++box) {
        const int row = first_key + t * kTileKeys + box * boxes.box_rows;
        if (boxes.panels)
          tma_load_5d(stage + box * boxes.box_rows * kColumns * 2, &map.map, full(t), 0, row, 0, 0,
                      0);
        else
          for (int panel = 0; panel < kPanels; ++panel)
            tma_load_4d(stage + panel * kPanelBytes + box * boxes.box_rows * 128, &map.map, full(t),
                        panel * 64, row, 0, 0);
      }
    }
  } else if (threadIdx.x >= 32) {
    for (int t = 0; t < kTiles; ++t) {
      barrier_wait(full(t), parity(t));
      acc += shared_u32(stages + (t % kStages) * kTileBytes + (threadIdx.x - 32) * 4);
      barrier_arrive(consumed(t));
    }
  }
  __syncthreads();
  const long long stop = clock64();
  if (threadIdx.x == 0) block_clocks[blockIdx.x] = stop - start;
  if (acc == 0x12345678u) sink[threadIdx.x] = acc;  // keeps the loads alive
#endif
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Blocks streaming at once (default 128, as in the kernel): fewer tell
  // whether the intake is bound per SM (the same B/clk a block) or in total.
  const int blocks = argc > 1 ? std::atoi(argv[1]) : kBlocks;
  if (blocks < 1 || blocks > kBlocks) {
    std::fprintf(stderr, "blocks: 1..%d\n", kBlocks);
    return 1;
  }
  constexpr int64_t kRows = 65536;
  void* k = nullptr;
  void* flush = nullptr;
  long long* block_clocks = nullptr;
  uint32_t* sink = nullptr;
  constexpr size_t kFlushBytes = size_t{256} << 20;
  check(cudaMalloc(&k, kRows * kColumns * 2), "cudaMalloc k");
  check(cudaMemset(k, 0, kRows * kColumns * 2), "cudaMemset k");
  check(cudaMalloc(&flush, kFlushBytes), "cudaMalloc flush");
  check(cudaMalloc(&block_clocks, sizeof(long long) * blocks), "cudaMalloc clocks");
  check(cudaMalloc(&sink, sizeof(uint32_t) * kThreads), "cudaMalloc sink");
  const int64_t strides[3] = {0, 0, kColumns};
  auto map_of = [&](TileBoxes boxes) {
    return boxes.panels ? make_swizzle128_panel_map(k, 1, 1, kRows, kColumns, strides,
                                                    boxes.box_rows, kPanels)
                        : make_swizzle128_map(k, 1, 1, kRows, kColumns, strides, boxes.box_rows);
  };
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  std::printf("%-7s %-6s %-14s %10s %12s %14s %12s\n", "case", "stages", "copies a tile",
              "median us", "intake TB/s", "block kclk", "B/clk/block");
  auto run = [&](auto kernel, int stages, int paired, TileBoxes boxes) {
    const TileMap map = map_of(boxes);
    const int smem = 1024 + stages * kTileBytes + 16 * stages;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "smem attribute");
    std::vector<float> times;
    std::vector<long long> clocks(blocks);
    for (int rep = 0; rep < 21; ++rep) {
      cudaMemsetAsync(flush, rep, kFlushBytes);
      cudaEventRecord(begin);
      kernel<<<blocks, kThreads, smem>>>(map, paired, boxes, block_clocks, sink);
      cudaEventRecord(end);
      check(cudaEventSynchronize(end), "kernel");
      float ms = 0.f;
      cudaEventElapsedTime(&ms, begin, end);
      if (rep > 0) times.push_back(ms * 1000.f);
    }
    check(
        cudaMemcpy(clocks.data(), block_clocks, sizeof(long long) * blocks, cudaMemcpyDeviceToHost),
        "clocks");
    std::sort(times.begin(), times.end());
    std::sort(clocks.begin(), clocks.end());
    const double us = times[times.size() / 2];
    const double block_bytes = double(kKeysPerBlock) * kColumns * 2;
    const double median_clk = double(clocks[blocks / 2]);
    const int copies = kTileKeys / boxes.box_rows * (boxes.panels ? 1 : kPanels);
    char copies_text[32];
    std::snprintf(copies_text, sizeof copies_text, "%d x %d rows%s", copies, boxes.box_rows,
                  boxes.panels ? " x 9" : "");
    std::printf("%-7s %-6d %-14s %10.1f %12.2f %8.1f-%-5.1f %12.1f\n", paired ? "paired" : "unique",
                stages, copies_text, us, block_bytes * blocks / us * 1e-6, clocks.front() / 1e3,
                clocks.back() / 1e3, block_bytes / median_clk);
  };
  const TileBoxes tile_boxes{kTileKeys, false};
  for (int paired : {1, 0}) {
    run(stream_tiles<2>, 2, paired, tile_boxes);
    run(stream_tiles<4>, 4, paired, tile_boxes);
    run(stream_tiles<5>, 5, paired, tile_boxes);
  }
  for (bool panels : {false, true})
    for (int box_rows : {kTileKeys, kTileKeys / 2, kTileKeys / 4}) {
      try {
        run(stream_tiles<4>, 4, 1, TileBoxes{box_rows, panels});
      } catch (const fsdpa::Error& e) {  // the driver may refuse the 5-d view
        std::printf("paired  4      %d-row boxes%s: %s\n", box_rows, panels ? " x 9" : "",
                    e.what());
      }
    }
  return 0;
}
