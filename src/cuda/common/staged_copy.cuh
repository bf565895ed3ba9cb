// The staged load stage (sm_90): rows of 16-bit elements that start anywhere
// on the 2-byte grid, into the 128-byte swizzle that wgmma reads, through
// bulk copies into a staging buffer and one shared-to-shared pass.
//
// TMA boxes and 16-byte cp.async need 16-byte aligned rows; below that the
// copies narrow to 8- or 4-byte pieces, 4-16 of them per 16 bytes. Here the
// bytes are instead copied by bulk copies (cp.async.bulk: 16-byte aligned
// source, destination and size) of the 16-byte aligned blocks that cover
// them: one copy for a tile whose rows are contiguous in memory ("packed":
// a contiguous operand's rows, at any width), else one per row, each into
// its own staging row. Then thread r moves row r's 16-byte chunks, shifted
// by the row start's offset within its 16-byte block, into their swizzled
// places, zeroing what lies past the row. Its 4-byte loads meet distinct
// banks across a warp where the rows' pitch is an odd number of 4-byte
// words (packed rows of D = 90); other packed widths meet 2-way conflicts,
// and per-row staging (a pitch of 16-byte chunks) 4-way ones. Its swizzled
// stores are conflict-free (8 consecutive rows cover the 8 chunk
// positions).
//
// A covering copy can read up to 15 bytes before its first byte (never
// outside the allocation: allocations start 16-byte aligned) and up to 15
// after its last; past the tensor's last byte (`limit`) those bytes may not
// exist, so that copy stops at the last 16-byte boundary and its thread
// copies the rest element by element.
#pragma once

#include <cstdint>

#include "cuda/common/copy.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/common/staged_copy.h"
#include "cuda/common/tma.cuh"

namespace fsdpa::detail::cuda {

// Stages `bytes` bytes from `start` (null or no bytes: nothing copied) at
// the 16-byte block offset they have in memory, `start` % 16, of the staging
// memory at `staged`: the bulk copy of their covering blocks (that ends at
// or before `limit`, the first byte past the tensor; the rest by this
// thread, element by element). Arrives once on `barrier` (initialized with
// one arrival per staging thread) after its own stores, announcing the copy's
// bytes. Returns start % 16.
__device__ __forceinline__ int stage_span(uint32_t staged, const char* start, int bytes,
                                          const char* limit, uint32_t barrier) {
  if (bytes <= 0) start = nullptr;
  const int offset = static_cast<int>(reinterpret_cast<uintptr_t>(start) & 15);
  const char* from = start - offset;
  int copied = start == nullptr ? 0 : (offset + bytes + 15) & ~15;
  if (start != nullptr && copied > limit - from) {
    copied = (offset + bytes) & ~15;
    for (int x = copied; x < offset + bytes; x += 2)  // the tensor's last bytes only
      asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(staged + static_cast<uint32_t>(x)),
                   "h"(*reinterpret_cast<const uint16_t*>(from + x)));
  }
  fence_async_shared();  // after this thread's accesses of the staging memory's last use
  barrier_expect_bytes(barrier, static_cast<uint32_t>(copied));
  if (copied > 0) bulk_copy_global_to_shared(staged, from, static_cast<uint32_t>(copied), barrier);
  return offset;
}

// Where thread r finds its staged row: the 16-byte aligned address its row
// starts in, the row's offset there (0..14, even) and its real bytes (0: a
// row of zeros).
struct StagedRow {
  uint32_t address;
  int offset, bytes;
};
// A packed tile: `rows` rows of `row_bytes` from byte `offset` of `buffer` on.
__device__ __forceinline__ StagedRow packed_row(uint32_t buffer, int offset, int rows,
                                                int row_bytes, int r) {
  const int at = offset + r * row_bytes;
  return {buffer + static_cast<uint32_t>(at & ~15), at & 15, r < rows ? row_bytes : 0};
}

__device__ __forceinline__ void store_shared_16(uint32_t address, const uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

// Moves staged row `from` into row r of a kRows x kCols tile in the 128-byte
// swizzle at `tile` (128-byte aligned; panels of 64 columns, each kRows x 128
// bytes; chunk c of row r at chunk position c ^ (r % 8) of its panel).
// Columns past the row's bytes are zeros. The caller has waited for the
// staging barrier's phase.
//
// Output chunk c is bytes [offset + 16 c, + 16) of the staged row: bits
// [shift, shift + 128) of the five 4-byte words from the word at or below
// its start on (shift 0 or 16: rows start on the 2-byte grid). Every chunk
// first goes through one pass without a branch (its loads may read past
// the row, within the staging buffer), so that the loads of later chunks
// issue ahead of the shifts of earlier ones; then the chunks that reach
// past the row (the last one or two of a row narrower than the tile, all of
// a row of no bytes) are stored again, masked to its bytes.
template <int kRows, int kCols>
__device__ __forceinline__ void unstage_row_swizzle128(uint32_t tile, const StagedRow& from,
                                                       int r) {
  static_assert(kCols % 8 == 0 && kRows % 8 == 0, "16-byte chunks, 8-row groups");
  constexpr int kChunks = kCols / 8;
  const int row_bytes = from.bytes;
  const uint32_t first = from.address + static_cast<uint32_t>(from.offset & 12);
  const uint32_t shift = static_cast<uint32_t>(from.offset & 2) * 8;
  // Chunk c's store address: the tile is 128-byte aligned, so the row's base
  // has no bits in the chunk position's place, and adding the swizzled
  // position is an exclusive or.
  const uint32_t row_base =
      (tile + static_cast<uint32_t>(r) * 128) ^ (static_cast<uint32_t>(r & 7) << 4);
  auto store = [&](int c, const uint32_t(&out)[4]) {
    store_shared_16((row_base ^ (static_cast<uint32_t>(c & 7) << 4)) +
                        static_cast<uint32_t>(c / 8 * kRows * 128),
                    out);
  };
  uint32_t carry = load_shared_4(first);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    uint32_t word[4], out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) word[i] = load_shared_4(first + 16 * c + 4 * i + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = __funnelshift_r(carry, word[i], shift);
      carry = word[i];
    }
    store(c, out);
  }
  for (int c = row_bytes >> 4; c < kChunks; ++c) {
    const int valid = row_bytes - 16 * c;
    uint32_t out[4] = {0u, 0u, 0u, 0u};
    if (valid > 0) {
      uint32_t word[5];
#pragma unroll
      for (int i = 0; i < 5; ++i) word[i] = load_shared_4(first + 16 * c + 4 * i);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int bytes = valid - 4 * i;
        const uint32_t x = __funnelshift_r(word[i], word[i + 1], shift);
        out[i] = bytes >= 4 ? x : bytes >= 2 ? x & 0xffffu : 0u;
      }
    }
    store(c, out);
  }
}

}  // namespace fsdpa::detail::cuda
