// Asynchronous global -> shared copies (cp.async, sm_80+).
#pragma once

#include <cstdint>

namespace fsdpa::detail::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// One 32-bit shared load, kept in order with the thread's other shared
// accesses (volatile, memory clobber): the staged unstage reads words its
// own stores may follow; the packed decode fragments read what a barrier
// published (rows that ldmatrix cannot take: not 16-byte aligned).
__device__ __forceinline__ uint32_t load_shared_4(uint32_t address) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
  return v;
}

// The thread's index and the block's z index, read where they are used: what
// derives from them is neither kept in registers nor hoisted out of a
// caller's loop (where it outlived a producer's or a decode kernel's
// registers).
__device__ __forceinline__ int fresh_thread_index() {
  int x;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(x));
  return x;
}
__device__ __forceinline__ int fresh_block_index_z() {
  int x;
  asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(x));
  return x;
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

// The same with a source aligned to only 8 or 4 bytes (`width`): 16 / width
// copies of `width` bytes, each zero-filled past `valid_bytes` of the 16
// (cp.async takes 4 and 8 bytes through L1 only, .ca). With 2-byte alignment
// (16-bit elements at odd offsets) no cp.async exists: the 8 elements go
// through registers, a synchronous load the next barrier makes visible like
// the asynchronous ones.
template <int kWidth>
__device__ __forceinline__ void cp_async_pieces(uint32_t shared_destination, const char* source,
                                                int valid_bytes) {
#pragma unroll
  for (int offset = 0; offset < 16; offset += kWidth) {
    const int bytes = min(max(valid_bytes - offset, 0), kWidth);
    const char* from = source + (bytes > 0 ? offset : 0);
    asm volatile(
        "cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_destination + offset),
        "l"(from), "n"(kWidth), "r"(bytes));
  }
}

template <typename T>
__device__ __forceinline__ void copy_16_narrow(uint32_t shared_destination, const T* source,
                                               int valid_bytes, int width) {
  if (width == 8)
    return cp_async_pieces<8>(shared_destination, reinterpret_cast<const char*>(source),
                              valid_bytes);
  if (width == 4)
    return cp_async_pieces<4>(shared_destination, reinterpret_cast<const char*>(source),
                              valid_bytes);
  if constexpr (sizeof(T) == 2) {  // wider elements are at least width-aligned
    uint16_t element[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      element[e] = 2 * e < valid_bytes ? reinterpret_cast<const uint16_t*>(source)[e] : 0;
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_destination),
                 "r"(element[0] | static_cast<uint32_t>(element[1]) << 16),
                 "r"(element[2] | static_cast<uint32_t>(element[3]) << 16),
                 "r"(element[4] | static_cast<uint32_t>(element[5]) << 16),
                 "r"(element[6] | static_cast<uint32_t>(element[7]) << 16));
  }
}

// One 16-byte chunk from a source aligned to `alignment` bytes (16, 8, 4, 2).
template <typename T>
__device__ __forceinline__ void copy_16(uint32_t shared_destination, const T* source,
                                        int valid_bytes, int alignment) {
  if (alignment >= 16)
    cp_async_16_zfill(shared_destination, source, valid_bytes);
  else
    copy_16_narrow(shared_destination, source, valid_bytes, alignment);
}

// A span of `bytes` bytes at `source` (whole rows of a matrix whose rows are
// contiguous; 4-byte aligned) as the 16-byte aligned blocks that cover it, so
// that rows of any alignment take wide copies: it lands at shared + offset
// (shared 16-byte aligned), and the blocks up to `extent` bytes past that
// point arrive as zeros. The first block's bytes before `source` are read
// too: they must be readable (the tensor's base address is 16-byte aligned).
struct SpanBlocks {
  const char* first;  // the first block: source - offset
  int offset, bytes;
  int whole;   // blocks [0, whole) lie inside the span
  int blocks;  // blocks [0, blocks) reach the extent
};
__device__ __forceinline__ SpanBlocks span_blocks(const void* source, int bytes, int extent) {
  const int offset = static_cast<int>(reinterpret_cast<uintptr_t>(source) & 15);
  return {static_cast<const char*>(source) - offset, offset, bytes, (offset + bytes) / 16,
          (offset + extent + 15) / 16};
}

// Blocks [from, span.blocks) of a span by cp.async, strided over the
// block's kThreads threads (every one calls it): the whole ones by 16-byte
// copies, the one that holds the span's end in 4-byte pieces (so that
// nothing past the end is read: a zero-filling 16-byte copy reads all 16
// bytes for the memory checker, and the span may end the allocation), the
// ones past it as zeros.
template <int kThreads>
__device__ __forceinline__ void cp_async_span_blocks(uint32_t shared, const SpanBlocks& span,
                                                     int from) {
#pragma unroll 1
  for (int i = from + static_cast<int>(threadIdx.x); i < span.blocks; i += kThreads) {
    const int valid = min(16, max(0, span.offset + span.bytes - 16 * i));
    if (valid == 16 || valid == 0)
      cp_async_16_zfill(shared + 16 * i, valid > 0 ? span.first + 16 * i : span.first, valid);
    else
      cp_async_pieces<4>(shared + 16 * i, span.first + 16 * i, valid);
  }
}

// Warms L2 with `bytes` (rounded down to 16) from `source` (16-byte
// aligned): a hint that reads nothing into the block, so it may run before
// griddepcontrol.wait. One bulk prefetch on sm_90, else one per 128-byte line.
__device__ __forceinline__ void prefetch_l2(const void* source, uint32_t bytes) {
  bytes &= ~15u;
#if __CUDA_ARCH__ >= 900
  if (bytes > 0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(source), "r"(bytes)
                 : "memory");
#else
  for (uint32_t offset = 0; offset < bytes; offset += 128)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(static_cast<const char*>(source) + offset));
#endif
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// A ring of kStages stages that every thread of the block fills by cp.async
// and reads after a block barrier (the mma.sync kernels): tile t lives in
// stage t % kStages, and each tile's copies are one commit group (an empty
// one past the last tile), so that waiting until kStages - 2 groups are in
// flight leaves tile t landed. `load(tile, stage)` issues a tile's copies.
template <int kStages>
struct CpAsyncRing {
  static_assert(kStages >= 2, "one stage loads while the block reads another");
  int num_tiles;

  // The copies of the first kStages - 1 tiles.
  template <typename Load>
  __device__ __forceinline__ void start(const Load& load) const {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) load(s, s);
      cp_async_commit();
    }
  }
  // Before tile t's reads: waits until its copies landed for every thread
  // and every thread is done with tile t - 1 (the block barrier), then issues
  // tile t + kStages - 1 into the stage t - 1 leaves free. Returns t's stage.
  template <typename Load>
  __device__ __forceinline__ int acquire(int tile, const Load& load) const {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = tile + kStages - 1;
    if (next < num_tiles) load(next, next % kStages);
    cp_async_commit();
    return tile % kStages;
  }
  // After the last tile: no copy left in flight.
  __device__ __forceinline__ void drain() const { cp_async_wait<0>(); }
};

// Copies rows [row0, row0 + kRows) x columns [0, kCols) of a row-major
// global matrix into shared memory (row stride kStride elements), zero-filling
// rows >= num_rows and columns >= num_cols: the bucket tail and the tensor's
// end cost no padded copy and no out-of-bounds read. T is a 16-bit type.
// `source_alignment` (16, 8, 4 or 2 bytes: Problem::row_alignment) is what
// the rows' starts allow; below 16 each 16-byte chunk takes copy_16_narrow.
// Not unrolled: unrolled, the prefill kernel's per-chunk addresses are
// hoisted out of its key loop as 64-bit registers and push S and O into local
// memory (ptxas). Loops that copy many tiles of one matrix use
// cp_async_tile_rows.
template <int kRows, int kCols, int kStride, int kThreads, typename T>
__device__ __forceinline__ void cp_async_tile(T* shared, const T* global, int64_t row_stride,
                                              int row0, int num_rows, int num_cols,
                                              int source_alignment = 16) {
  static_assert(sizeof(T) == 2 && kCols % 8 == 0, "16-byte chunks of 16-bit elements");
  constexpr int kChunksPerRow = kCols / 8;  // 16-byte chunks
  constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll 1
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    const int chunk = i * kThreads + static_cast<int>(threadIdx.x);
    if (kChunks % kThreads != 0 && chunk >= kChunks) break;
    const int row = chunk / kChunksPerRow;
    const int col = (chunk % kChunksPerRow) * 8;
    const int remaining = num_cols - col;
    int bytes = remaining >= 8 ? 16 : (remaining > 0 ? remaining * 2 : 0);
    if (row0 + row >= num_rows) bytes = 0;
    const T* source =
        bytes > 0 ? global + static_cast<int64_t>(row0 + row) * row_stride + col : global;
    copy_16(shared_address(shared + row * kStride + col), source, bytes, source_alignment);
  }
}

// The thread layout of the copies that copy a tile of kRows rows x kCols
// elements in passes (cp_async_tile_rows and its narrow, gathered and
// grouped kin): each thread keeps one 16-byte chunk column of a row and
// steps kRowsPerPass rows a pass; rows are kStride elements apart in shared
// memory.
template <int kRows, int kCols, int kStride, int kThreads, typename T>
struct TileRowPasses {
  static constexpr int kElementsPerChunk = 16 / static_cast<int>(sizeof(T));
  static_assert(kCols % kElementsPerChunk == 0, "16-byte chunks");
  static constexpr int kChunksPerRow = kCols / kElementsPerChunk;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRowsPerPass >= 1, "a pass covers at least one row");
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr uint32_t kPassBytes = kRowsPerPass * kStride * sizeof(T);
};

// Zeros columns [num_cols rounded up to 8, kCols) of kRows rows kStride
// elements apart, by every thread of the block: the chunks cp_async_tile_rows
// never copies, where a product reads them against zeros (0 x NaN from stale
// shared memory is NaN). Once, before the copies (a block barrier must
// follow before they are read).
template <int kRows, int kCols, int kStride, int kThreads, typename T>
__device__ __forceinline__ void zero_tail_chunks(T* shared, int num_cols) {
  static_assert(sizeof(T) == 2 && kCols % 8 == 0, "16-byte chunks of 16-bit elements");
  const int first = (num_cols + 7) / 8;
  const int tail = kCols / 8 - first;
#pragma unroll 1
  for (int i = static_cast<int>(threadIdx.x); i < kRows * tail; i += kThreads)
    *reinterpret_cast<uint4*>(shared + (i / tail) * kStride + (first + i % tail) * 8) =
        make_uint4(0, 0, 0, 0);
}

// cp_async_tile for a tile that a loop copies again and again (a key
// stage), at a fraction of its instructions: ~5 a chunk against ~50
// (cp_async_tile works out row, column, bounds and both addresses for every
// chunk). Each thread keeps one chunk column and takes rows r, r +
// kRowsPerPass, ... (kRowsPerPass = kThreads / chunks per row; threads past
// that many rows' worth idle), so its addresses step by a constant. The
// tile's shared memory is given by address. Chunks wholly past num_cols are
// not copied at all (the caller keeps those shared columns zero, or never
// reads them); rows >= num_rows are zero-filled.
template <int kRows, int kCols, int kStride, int kThreads, typename T>
__device__ __forceinline__ void cp_async_tile_rows(uint32_t shared, const T* global,
                                                   int64_t row_stride, int row0, int num_rows,
                                                   int num_cols) {
  static_assert(sizeof(T) == 2, "16-byte chunks of 16-bit elements");
  using Passes = TileRowPasses<kRows, kCols, kStride, kThreads, T>;
  constexpr int kChunksPerRow = Passes::kChunksPerRow, kRowsPerPass = Passes::kRowsPerPass;
  constexpr int kPasses = Passes::kPasses;
  constexpr uint32_t kPassBytes = Passes::kPassBytes;
  const int row = static_cast<int>(threadIdx.x) / kChunksPerRow;
  const int col = static_cast<int>(threadIdx.x) % kChunksPerRow * 8;
  const int remaining = num_cols - col;
  if (row >= kRowsPerPass || remaining <= 0) return;
  const int bytes = remaining >= 8 ? 16 : remaining * 2;
  const T* from = global + (row0 + row) * row_stride + col;
  const int64_t pass_stride = row_stride * kRowsPerPass;
  uint32_t to = shared + static_cast<uint32_t>((row * kStride + col) * sizeof(T));
  if (row0 + kRows <= num_rows) {
    // Unrolled unless the passes are many (the 576/512 bucket: 11 and 8,
    // which spilled unrolled).
#pragma unroll(kPasses <= 6 ? kPasses : 1)
    for (int i = 0; i < kPasses; ++i) {
      if (kRows % kRowsPerPass != 0 && row + i * kRowsPerPass >= kRows) break;
      cp_async_16_zfill(to, from, bytes);
      from += pass_stride;
      to += kPassBytes;
    }
  } else {  // the tensor's last tile
#pragma unroll 1
    for (int r = row; r < kRows; r += kRowsPerPass) {
      // Past num_rows: zero-fill, reading nothing (the source only has to be an address).
      const bool valid = row0 + r < num_rows;
      cp_async_16_zfill(to, valid ? from : global, valid ? bytes : 0);
      from += pass_stride;
      to += kPassBytes;
    }
  }
}

// cp_async_tile_rows for rows aligned to fewer than 16 bytes (`alignment`:
// 8, 4 or 2): the same chunks and threads, each chunk through
// copy_16_narrow, none of the 16-byte path's unrolling.
template <int kRows, int kCols, int kStride, int kThreads, typename T>
__device__ __forceinline__ void copy_tile_rows_narrow(uint32_t shared, const T* global,
                                                      int64_t row_stride, int row0, int num_rows,
                                                      int num_cols, int alignment) {
  using Passes = TileRowPasses<kRows, kCols, kStride, kThreads, T>;
  constexpr int kElementsPerChunk = Passes::kElementsPerChunk;
  constexpr int kChunksPerRow = Passes::kChunksPerRow, kRowsPerPass = Passes::kRowsPerPass;
  constexpr uint32_t kPassBytes = Passes::kPassBytes;
  const int row = static_cast<int>(threadIdx.x) / kChunksPerRow;
  const int col = static_cast<int>(threadIdx.x) % kChunksPerRow * kElementsPerChunk;
  const int remaining = num_cols - col;
  if (row >= kRowsPerPass || remaining <= 0) return;
  const int bytes = remaining >= kElementsPerChunk ? 16 : remaining * static_cast<int>(sizeof(T));
  const T* from = global + (row0 + row) * row_stride + col;
  const int64_t pass_stride = row_stride * kRowsPerPass;
  uint32_t to = shared + static_cast<uint32_t>((row * kStride + col) * sizeof(T));
#pragma unroll 1
  for (int r = row; r < kRows; r += kRowsPerPass) {
    const bool valid = row0 + r < num_rows;
    copy_16_narrow(to, valid ? from : global, valid ? bytes : 0, alignment);
    from += pass_stride;
    to += kPassBytes;
  }
}

// cp_async_tile_rows for rows found one by one (a paged cache's rows sit in
// pages anywhere in the pool): `rows(j)` is row j's first element, a lookup
// (the block table, a division by the page size) of some 40 instructions.
// The same chunks and threads as cp_async_tile_rows; each chunk goes through
// copy_16 at the rows' `alignment` (16, 8, 4 or 2 bytes). Every lane of a
// warp takes the same rows as 8 to 32 others, so the warp looks each of its
// rows up once, in one lane, and hands the address to the lanes that copy
// it by a shuffle (looked up per lane and pass, a paged call took 1.5-1.7x
// the dense one: bench/NOTES.md, session 14). Chunks wholly past num_cols are
// not copied; rows >= num_rows are zero-filled from `any` (an address that
// is never read). Every thread of the block calls it (the shuffles).
template <int kRows, int kCols, int kStride, int kThreads, typename T, typename Rows>
__device__ __forceinline__ void copy_tile_rows_gather(uint32_t shared, const Rows& rows,
                                                      const T* any, int row0, int num_rows,
                                                      int num_cols, int alignment) {
  using Passes = TileRowPasses<kRows, kCols, kStride, kThreads, T>;
  constexpr int kElementsPerChunk = Passes::kElementsPerChunk;
  constexpr int kChunksPerRow = Passes::kChunksPerRow, kRowsPerPass = Passes::kRowsPerPass;
  constexpr int kPasses = Passes::kPasses;
  constexpr uint32_t kPassBytes = Passes::kPassBytes;
  static_assert(kThreads % 32 == 0, "whole warps (the shuffles)");
  // The thread index read where it is used (the 320 bucket's decode kernel
  // spilled with it hoisted).
  const int thread = fresh_thread_index();
  const int lane = thread % 32;
  const int row = thread / kChunksPerRow;
  const int col = thread % kChunksPerRow * kElementsPerChunk;
  // The warp's rows of a pass: [first, first + per_pass), each pass's the
  // same plus kRowsPerPass; lookup `pair` = pass * per_pass + row - first.
  const int first = (thread - lane) / kChunksPerRow;
  const int per_pass = min((thread - lane + 31) / kChunksPerRow, kRowsPerPass - 1) - first + 1;
  const bool shared_lookups = per_pass >= 1 && kPasses * per_pass <= 32;
  const T* mine = any;
  if (shared_lookups && lane < kPasses * per_pass) {
    const int r = first + lane % per_pass + lane / per_pass * kRowsPerPass;
    if (r < kRows && row0 + r < num_rows) mine = rows(row0 + r);
  }
  const int remaining = num_cols - col;
  const bool copies = row < kRowsPerPass && remaining > 0;
  const int bytes = remaining >= kElementsPerChunk ? 16 : remaining * static_cast<int>(sizeof(T));
  uint32_t to = shared + static_cast<uint32_t>((row * kStride + col) * sizeof(T));
#pragma unroll 1
  for (int pass = 0; pass < kPasses; ++pass, to += kPassBytes) {
    const int r = row + pass * kRowsPerPass;
    const bool valid = copies && r < kRows && row0 + r < num_rows;
    const T* from = any;
    if (shared_lookups) {
      const int pair = pass * per_pass + row - first;
      const auto bits = reinterpret_cast<uintptr_t>(mine);
      const uint32_t lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(bits), pair);
      const uint32_t hi = __shfl_sync(0xffffffffu, static_cast<uint32_t>(bits >> 32), pair);
      from = reinterpret_cast<const T*>(static_cast<uintptr_t>(hi) << 32 | lo);
    } else if (valid) {
      from = rows(row0 + r);
    }
    if (copies && r < kRows) copy_16(to, valid ? from + col : any, valid ? bytes : 0, alignment);
  }
}

// cp_async_tile_rows for a tile whose rows lie in groups of 16, each
// group's rows row_stride apart and the groups anywhere (a paged cache's
// keys where pages hold a multiple of 16 rows and the tile starts at a
// multiple of 16): lane g of every warp holds group g's first element in
// `group_first` (g < kRows / 16; any address where the group starts at or
// past num_rows), and each copy takes its group's by a shuffle. The
// threads, chunks and passes are cp_async_tile_rows', so a row costs a
// shuffle more than a dense one, not a lookup (copy_tile_rows_gather).
// Every thread of the block calls it (the shuffles).
template <int kRows, int kCols, int kStride, int kThreads, typename T>
__device__ __forceinline__ void cp_async_tile_row_groups(uint32_t shared, const T* group_first,
                                                         const T* any, int64_t row_stride, int row0,
                                                         int num_rows, int num_cols) {
  static_assert(sizeof(T) == 2, "16-byte chunks of 16-bit elements");
  static_assert(kRows % 16 == 0 && kRows / 16 <= 32, "a warp's lanes hold the groups");
  using Passes = TileRowPasses<kRows, kCols, kStride, kThreads, T>;
  constexpr int kChunksPerRow = Passes::kChunksPerRow, kRowsPerPass = Passes::kRowsPerPass;
  constexpr int kPasses = Passes::kPasses;
  constexpr uint32_t kPassBytes = Passes::kPassBytes;
  static_assert(kThreads % 32 == 0, "whole warps (the shuffles)");
  const int thread = fresh_thread_index();
  const int row = thread / kChunksPerRow;
  const int col = thread % kChunksPerRow * 8;
  const int remaining = num_cols - col;
  const bool copies = row < kRowsPerPass && remaining > 0;
  const int bytes = remaining >= 8 ? 16 : remaining * 2;
  const auto bits = reinterpret_cast<uintptr_t>(group_first);
  uint32_t to = shared + static_cast<uint32_t>((row * kStride + col) * sizeof(T));
  // Unrolled unless the passes are many (cp_async_tile_rows' 576/512 spill).
#pragma unroll(kPasses <= 6 ? kPasses : 1)
  for (int i = 0; i < kPasses; ++i, to += kPassBytes) {
    const int r = row + i * kRowsPerPass;
    const int group = min(r / 16, kRows / 16 - 1);
    const uint32_t lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(bits), group);
    const uint32_t hi = __shfl_sync(0xffffffffu, static_cast<uint32_t>(bits >> 32), group);
    const T* first = reinterpret_cast<const T*>(static_cast<uintptr_t>(hi) << 32 | lo);
    // Past num_rows: zero-fill, reading nothing (the source only has to be an address).
    const bool valid = copies && r < kRows && row0 + r < num_rows;
    if (copies && r < kRows)
      cp_async_16_zfill(to, valid ? first + (r % 16) * row_stride + col : any, valid ? bytes : 0);
  }
}

// One whole 16-byte chunk in cp.async pieces of kWidth (8 or 4) bytes: both
// addresses in registers, the pieces' offsets immediate.
template <int kWidth>
__device__ __forceinline__ void cp_async_chunk_pieces(uint32_t shared_destination,
                                                      const char* source) {
  static_assert(kWidth == 8 || kWidth == 4, "cp.async pieces of 8 or 4 bytes");
  if constexpr (kWidth == 8)
    asm volatile(
        "cp.async.ca.shared.global [%0], [%1], 8;\n"
        "cp.async.ca.shared.global [%0 + 8], [%1 + 8], 8;\n" ::"r"(shared_destination),
        "l"(source));
  else
    asm volatile(
        "cp.async.ca.shared.global [%0], [%1], 4;\n"
        "cp.async.ca.shared.global [%0 + 4], [%1 + 4], 4;\n"
        "cp.async.ca.shared.global [%0 + 8], [%1 + 8], 4;\n"
        "cp.async.ca.shared.global [%0 + 12], [%1 + 12], 4;\n" ::"r"(shared_destination),
        "l"(source));
}

// Copies rows [row0, row0 + kRows) x columns [0, kCols) of a row-major
// global matrix of 16-bit elements into the 128-byte swizzle that TMA writes
// and wgmma reads (panels of 64 columns, each kRows x 128 bytes; 16-byte
// chunk c of row r sits at chunk position c ^ (r % 8) of its panel), for
// rows aligned to kWidth = 8 or 4 bytes: cp.async pieces by the 128 threads
// of a producer warpgroup (the block's first), each keeping one chunk column
// and stepping rows. `global` is row 0 of the matrix; rows >= num_rows and
// columns >= num_cols arrive as zeros and are not read. The caller makes
// the copies' completion known (cp_async_arrive).
template <int kRows, int kCols, int kWidth, typename T>
__device__ __forceinline__ void copy_tile_swizzle128_narrow(uint32_t shared, const T* global,
                                                            int64_t row_stride, int row0,
                                                            int num_rows, int num_cols) {
  static_assert(sizeof(T) == 2 && kCols % 8 == 0 && kRows % 8 == 0, "16-byte chunks, 8-row groups");
  constexpr int kThreads = 128;
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRowsPerPass >= 1, "a pass covers at least one row");
  // The thread index read where it is used (hoisted out of the caller's
  // loop over tiles, per operand, it outlived the producer's 24 registers).
  const int thread = fresh_thread_index() % kThreads;
  const int first_row = thread / kChunksPerRow;
  const int chunk = thread % kChunksPerRow;
  if (first_row >= kRowsPerPass) return;
  const int remaining = num_cols - chunk * 8;
  const int bytes = remaining >= 8 ? 16 : (remaining > 0 ? remaining * 2 : 0);
  const T* column = global + chunk * 8;
  const uint32_t panel = shared + static_cast<uint32_t>(chunk / 8 * kRows * 128);
  const uint32_t swizzle = static_cast<uint32_t>(chunk % 8);
#pragma unroll 1
  for (int r = first_row; r < kRows; r += kRowsPerPass) {
    const int row = row0 + r;
    // Rows past the end are zeros, read from nowhere; their address is the
    // last row's, so that every address is inside the matrix.
    const char* source = reinterpret_cast<const char*>(
        column + static_cast<int64_t>(min(row, num_rows - 1)) * row_stride);
    const uint32_t to = panel + static_cast<uint32_t>(r) * 128 + ((swizzle ^ (r & 7)) << 4);
    const int valid = row < num_rows ? bytes : 0;
    if (valid == 16)
      cp_async_chunk_pieces<kWidth>(to, source);
    else
      cp_async_pieces<kWidth>(to, source, valid);
  }
}

// This thread's arrival on mbarrier `barrier`, made when all of its earlier
// cp.async copies have completed; the barrier counts it as one of the
// arrivals it was initialized with.
__device__ __forceinline__ void cp_async_arrive(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

}  // namespace fsdpa::detail::cuda
