// Device pieces shared by the decode kernels (the CUDA-core split kernel, the
// tensor-core split kernel and the combine kernel): the masking rules as
// decode sees them, the per-row set-up of a block, and the
// block epilogue that merges the key streams of a block and writes either the
// final rows or the split's partial for the combine kernel (or, where the
// splits of a row chunk form a cluster, merges them there), and the repair
// of final rows with non-finite values (the NaN/Inf policy).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/key_range.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/exact_row.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_params.h"

namespace fsdpa::detail::cuda::decode_kernel {

// ------------------------------------------------------------ launch overlap

// Programmatic dependent launch (sm_90+; no-ops before). Every decode kernel
// is launched with it (launch_programmatic, check.cuh) and lets the next
// kernel of the stream be scheduled at its start: the combine behind a split
// kernel, the next call's split kernel behind a combine, so their launch and
// set-up overlap the kernel before them. Each therefore waits for the
// previous kernel of the stream (its completion and the visibility of its
// writes) before its first access to global memory.
__device__ __forceinline__ void allow_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ------------------------------------------------------------ semantics

// Keys [begin, end) visible to query position i of a sequence of len_k keys
// (core/key_range.h's rule).
__device__ __forceinline__ int2 visible_keys(const DecodeParams& p, int len_k, int i) {
  const DeviceKeyRange range = visible_keys_of_sequence(p.semantics, len_k, i);
  return make_int2(range.begin, range.end);
}

// A visible key's score in the exp2 domain (the product times scale_log2)
// under the soft cap, when the call has one.
__device__ __forceinline__ float capped_score(const DecodeParams& p, float x) {
  return p.softcap_log2 > 0.f ? soft_cap(x, p.softcap_log2, p.inverse_softcap_log2) : x;
}

// The array mask's contribution to a score in the exp2 domain (0 without
// one); -inf drops the key.
__device__ __forceinline__ float mask_term(const DecodeParams& p, int64_t row_offset, int key) {
  return p.semantics.mask_kind == 0 ? 0.f : mask_term_log2(p.semantics, row_offset, key);
}

// ------------------------------------------------------------ the block's rows

// The key splits that reach into a sequence of len_k keys, for splits of
// split_keys keys: all num_splits of them, but with per-sequence lengths only
// those that start before its end (at least one). The other splits have no
// block (decode_block) and the combine reads none of them, so a short
// sequence of a ragged batch costs its own keys only.
__device__ __forceinline__ int sequence_splits(const DecodeParams& p, int len_k, int split_keys) {
  if (p.kv.seq_lens_k == nullptr || split_keys <= 0) return p.num_splits;
  const int reach = len_k - p.key_begin;
  const int used = reach > 0 ? (reach + split_keys - 1) / split_keys : 1;
  return max(1, min(p.num_splits, used));
}

// Sequence b's length, read before the wait (past L1:
// IndexRead::BeforeWait) or after it, by a runtime flag: where the flag is a
// constant the code is sequence_len_k's, and a list kernel's guess and its
// block share one copy of the list walk (decode_list_block).
__device__ __forceinline__ int64_t sequence_len_k_read(const KvIndex& kv, int64_t b,
                                                       bool before_wait) {
  return before_wait ? sequence_len_k<IndexRead::BeforeWait>(kv, b) : sequence_len_k(kv, b);
}

// The keys of a split: keys_per_split; in a list of splits (split_slots >
// 0), at least the batch's mean length over split_slots, a multiple of
// split_keys_multiple. So a batch of equal sequences splits as its dense
// twin does (whole waves of blocks), and a ragged one into pieces of about
// the same size, each sequence in as many as its length needs. All 32
// lanes of a warp call it; every warp and kernel of the call gets the same
// value. The mean is worked out in floats rounded up (at least the exact
// mean, so decode_grid_blocks holds every split; in 64-bit integers its
// division cost the 576/512 tensor-core kernel a spill). lane_len: lane b's
// sequence's length, b < batch (decode_block reads no length twice).
// before_wait: the lengths read as sequence_len_k_read says.
__device__ __forceinline__ int batch_split_keys(const DecodeParams& p, int& lane_len,
                                                bool before_wait = false) {
  lane_len = 0;
  if (p.split_slots == 0) return p.keys_per_split;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float keys = 0.f;
  for (int b = lane; b < p.batch; b += 32) {
    const int len = static_cast<int>(sequence_len_k_read(p.kv, b, before_wait));
    if (b == lane) lane_len = len;
    keys = __fadd_ru(keys, static_cast<float>(len));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    keys = __fadd_ru(keys, __shfl_xor_sync(0xffffffffu, keys, offset));
  const float pieces = __int2float_rd(p.batch * p.split_slots);
  const int mean = static_cast<int>(
      fminf(ceilf(__fdiv_ru(keys, pieces)), static_cast<float>(p.key_end)));  // <= len_k
  const int multiple = p.split_keys_multiple;
  return max(p.keys_per_split, (mean + multiple - 1) / multiple * multiple);
}
__device__ __forceinline__ int batch_split_keys(const DecodeParams& p, bool before_wait = false) {
  int lane_len;
  return batch_split_keys(p, lane_len, before_wait);
}

// Where a block's packed rows come from: the block index (blockIdx.x unless
// the kernel orders its blocks otherwise, as the MLA kernel's split pairs do)
// decomposes into (batch, kv head, key split, row chunk), the row chunk
// fastest; packed row r of chunk c is query
// head kv_head * group + (c * kRows + r) / len_q at position (..) % len_q.
// In a list of splits (split_slots > 0), the index is an item of the list
// instead: first every sequence's splits but its last, then the last
// splits, sequence by sequence (whole splits first: the pieces of unequal
// size start last); blocks past the list have nothing to do (valid = 0).
struct DecodeBlock {
  int batch, kv_head, split, row0, rows_here;
  int len_k;       // the sequence's keys (seq_lens_k, else len_k)
  int split_keys;  // keys of a split (batch_split_keys)
  bool valid;
};

// Item `item` of the list of decode_block (all 32 lanes of a warp) as the
// block index that covers the same (sequence, kv head, split, row chunk)
// in the grid of every sequence's num_splits splits, or -1 past the list;
// len_k: that sequence's length. lane_len: batch_split_keys'. 32-bit: that
// grid's blocks are fewer than 2^31.
__device__ __forceinline__ int split_item_block(const DecodeParams& p, int split_keys, int item,
                                                int lane_len, int& len_k, bool before_wait) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int per_split = p.heads_kv * p.row_chunks;
  auto block_of = [&](int batch, int kv_head, int split, int chunk) {
    return ((batch * p.heads_kv + kv_head) * p.num_splits + split) * p.row_chunks + chunk;
  };
  auto length = [&](int b0, int b) {  // all lanes, b - b0 the same in every lane
    return b0 == 0       ? lane_len
           : b < p.batch ? static_cast<int>(sequence_len_k_read(p.kv, b, before_wait))
                         : 0;
  };
  // Every split but the last of each sequence, sequence by sequence.
  int first = 0;  // of the items of sequences [b0, ...)
  for (int b0 = 0; b0 < p.batch; b0 += 32) {
    const int b = b0 + lane;
    const int len = length(b0, b);
    const int whole = b < p.batch ? sequence_splits(p, len, split_keys) - 1 : 0;
    int last = whole * per_split;  // inclusive prefix of the items, over the lanes
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int before = __shfl_up_sync(0xffffffffu, last, offset);
      if (lane >= offset) last += before;
    }
    const unsigned ahead = __ballot_sync(0xffffffffu, item - first < last);
    if (ahead != 0u) {
      const int owner = __ffs(static_cast<int>(ahead)) - 1;
      const int splits = __shfl_sync(0xffffffffu, whole, owner);
      const int mine = __shfl_sync(0xffffffffu, last, owner) - splits * per_split;
      const int at = item - first - mine;  // chunk fastest, then split
      len_k = __shfl_sync(0xffffffffu, len, owner);
      return block_of(b0 + owner, at / p.row_chunks / splits, at / p.row_chunks % splits,
                      at % p.row_chunks);
    }
    first += __shfl_sync(0xffffffffu, last, 31);
  }
  // Then the last split of every sequence.
  const int at = item - first;
  len_k = 0;
  if (at >= p.batch * per_split) return -1;
  const int batch = at / per_split;
  const int from_lane = __shfl_sync(0xffffffffu, lane_len, batch % 32);
  len_k = batch < 32 ? from_lane : static_cast<int>(sequence_len_k_read(p.kv, batch, before_wait));
  return block_of(batch, at % per_split / p.row_chunks, sequence_splits(p, len_k, split_keys) - 1,
                  at % p.row_chunks);
}

// The block of index `block` (decode_block), its lengths read before the
// wait (past L1: a guess) or after it.
template <bool kList>
__device__ __forceinline__ DecodeBlock find_block(const DecodeParams& p, int rows_per_block,
                                                  int64_t block, bool before_wait) {
  DecodeBlock b;
  const bool list = kList && p.split_slots != 0;
  b.valid = true;
  b.split_keys = p.keys_per_split;
  if (list) {
    int lane_len;
    b.split_keys = batch_split_keys(p, lane_len, before_wait);
    block =
        split_item_block(p, b.split_keys, static_cast<int>(block), lane_len, b.len_k, before_wait);
    b.valid = block >= 0;
    block = max(block, int64_t{0});
  }
  const int chunk = int(block % p.row_chunks);
  block /= p.row_chunks;
  b.split = int(block % p.num_splits);
  block /= p.num_splits;
  b.kv_head = int(block % p.heads_kv);
  b.batch = int(block / p.heads_kv);
  b.row0 = chunk * rows_per_block;
  b.rows_here = min(rows_per_block, p.rows_per_kv_head - b.row0);
  if (!list) {
    b.len_k = int(sequence_len_k_read(p.kv, b.batch, before_wait));
    // The splits past a short sequence's end have nothing to do.
    b.valid = b.split < sequence_splits(p, b.len_k, b.split_keys);
  }
  return b;
}

// All 32 lanes of every warp of the block call it. A kernel compiled
// without kList takes no list (the planner plans none for it).
template <bool kList = true>
__device__ __forceinline__ DecodeBlock decode_block(const DecodeParams& p, int rows_per_block,
                                                    int64_t block = blockIdx.x) {
  // The lengths may be written by the kernel before in the stream: wait for
  // it before reading them (guess_block is what a kernel can know before).
  if (p.kv.seq_lens_k != nullptr) wait_for_previous_kernel();
  return find_block<kList>(p, rows_per_block, block, /*before_wait=*/false);
}

// Before decode_block in a kernel compiled without lists: the block
// decode_block will find if the kernel before leaves the length as it is,
// from a length read before the wait, for a prefetch into L2 that overlaps
// the kernel before (which may write the lengths: decode_block waits for it
// before reading them); a stale guess costs a useless prefetch. Without
// lengths it is decode_block's block.
__device__ __forceinline__ DecodeBlock guess_block(const DecodeParams& p, int rows_per_block) {
  return find_block</*kList=*/false>(p, rows_per_block, blockIdx.x, /*before_wait=*/true);
}

// decode_block and the guess before it in a kernel compiled for lists (a
// list item's place needs every length), as two passes of one loop, so
// that the list walk is compiled once (session 36 inlined it twice, and the
// list rows lost 1-6%): the first pass reads the lengths before the wait and
// hands the block it finds to `prefetch` (when it has keys); the second
// waits, then finds the block.
template <typename Prefetch>
__device__ __forceinline__ DecodeBlock decode_list_block(const DecodeParams& p, int rows_per_block,
                                                         Prefetch&& prefetch) {
  DecodeBlock b;
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    const bool guess = pass == 0;
    if (!guess && p.kv.seq_lens_k != nullptr) wait_for_previous_kernel();
    b = find_block</*kList=*/true>(p, rows_per_block, blockIdx.x, guess);
    if (guess && b.valid) prefetch(b);
  }
  return b;
}

// (query head, query position) of packed row r of the block.
__device__ __forceinline__ int2 packed_row(const DecodeParams& p, const DecodeBlock& b, int r) {
  const int packed = b.row0 + r;
  return make_int2(b.kv_head * p.kv_group_size + packed / p.len_q, packed % p.len_q);
}

// Packed row r's q row and its real columns (0 past the block's rows: a
// padding row, copied as zeros from the start of q). The kernels copy it in
// 16-byte chunks, the division in packed_row once per thread.
template <typename T>
struct QRow {
  const T* source;
  int columns;
};
template <typename T>
__device__ __forceinline__ QRow<T> q_row(const DecodeParams& p, const DecodeBlock& b, int r) {
  QRow<T> q{static_cast<const T*>(p.q), 0};
  if (r < b.rows_here) {
    const int2 hi = packed_row(p, b, r);
    q.source += b.batch * p.q_strides.batch + hi.x * p.q_strides.head + hi.y * p.q_strides.row;
    q.columns = p.head_dim_qk;
  }
  return q;
}

// The block's first row in the split partials (slot split x rows + row):
// consecutive packed rows are consecutive rows (b, kv head x group + i / Lq,
// i % Lq), so row r of the block is this + r.
__device__ __forceinline__ int64_t first_partial_row(const DecodeParams& p, const DecodeBlock& b) {
  const int rows_total = p.batch * p.heads_q * p.len_q;
  return int64_t(b.split) * rows_total +
         (int64_t(b.batch) * p.heads_q + int64_t(b.kv_head) * p.kv_group_size) * p.len_q + b.row0;
}

// Whether the split partials take 16-byte vectors: rows of a multiple of 4
// floats (dv_ws == head_dim_v) from a 16-byte aligned workspace. The split
// kernels' stores and the combine's loads decide alike.
__host__ __device__ __forceinline__ bool partial_float4(const DecodeParams& p) {
  return p.dv_ws % 4 == 0 && reinterpret_cast<uintptr_t>(p.partial_out) % 16 == 0;
}

// Keys [begin, end) row r sees ((0, 0) past the real rows), and the offset
// of its row of the array mask.
__device__ __forceinline__ int2 row_keys(const DecodeParams& p, const DecodeBlock& b, int r) {
  return r < b.rows_here ? visible_keys(p, b.len_k, packed_row(p, b, r).y) : make_int2(0, 0);
}
__device__ __forceinline__ int64_t row_mask_offset(const DecodeParams& p, const DecodeBlock& b,
                                                   int r) {
  if (r >= b.rows_here) return 0;
  const int2 hi = packed_row(p, b, r);
  return mask_row_offset(p.semantics, b.batch, hi.x, hi.y);
}

// Thread r < kRows writes row r's visible keys and mask row offset.
template <int kRows>
__device__ __forceinline__ void load_row_info(const DecodeParams& p, const DecodeBlock& b,
                                              int2* range_s, int64_t* mask_row_s) {
  const int r = threadIdx.x;
  if (r >= kRows) return;
  range_s[r] = row_keys(p, b, r);
  mask_row_s[r] = row_mask_offset(p, b, r);
}

// The block's keys [begin, end): its split, narrowed to the union of what its
// rows see; and [common_begin, common_end): the keys every real row sees
// (within the block's). Every warp computes it from the parameters alone,
// so the first K/V loads need no barrier: its lanes take a share of the
// rows each and reduce by shuffles (a loop over the rows in every thread,
// each with an integer division in packed_row, was ~1000 instructions a
// thread in the 64-row MLA kernel). All 32 lanes of the warp must call it.
struct BlockKeys {
  int begin, end, common_begin, common_end;
};
__device__ __forceinline__ BlockKeys block_keys(const DecodeParams& p, const DecodeBlock& b) {
  int lo = b.len_k, hi = 0, common_begin = 0, common_end = b.len_k;
  for (int r = static_cast<int>(threadIdx.x) % 32; r < b.rows_here; r += 32) {
    const int2 range = row_keys(p, b, r);
    if (range.x < range.y) lo = min(lo, range.x), hi = max(hi, range.y);
    common_begin = max(common_begin, range.x), common_end = min(common_end, range.y);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
    common_begin = max(common_begin, __shfl_xor_sync(0xffffffffu, common_begin, offset));
    common_end = min(common_end, __shfl_xor_sync(0xffffffffu, common_end, offset));
  }
  const int split_begin = p.key_begin + b.split * b.split_keys;
  const int split_end = min(p.key_end, split_begin + b.split_keys);
  BlockKeys k;
  k.begin = max(split_begin, lo);
  k.end = min(split_end, hi);
  k.common_begin = common_begin;
  k.common_end = min(common_end, k.end);
  return k;
}

// A row's totals over the parts merged into it: the largest max (the sink's
// included), the base the weights are taken against (0 where no key and no
// sink count) and the denominator.
struct RowTotals {
  float top, base, sum;
};

// The row's lse from its totals (-inf where nothing counts).
__device__ __forceinline__ float row_lse(const RowTotals& t) {
  return t.top == kMinusInf ? kMinusInf : (t.base + log2f(t.sum)) * kLn2;
}

// Merges row r's key streams: stats_s[stream * kRows + r] holds each
// stream's (max, sum); each entry becomes (its weight against the row's
// base, 0). `sink` (exp2 domain, -inf for none) joins the max and the sum.
template <int kStreams, int kRows>
__device__ __forceinline__ RowTotals merge_stream_stats(float2* stats_s, int r, float sink) {
  float block_max = kMinusInf;
#pragma unroll
  for (int w = 0; w < kStreams; ++w) block_max = fmaxf(block_max, stats_s[w * kRows + r].x);
  RowTotals t;
  t.top = fmaxf(block_max, sink);
  t.base = t.top == kMinusInf ? 0.f : t.top;
  t.sum = exp2f(sink - t.base);
#pragma unroll
  for (int w = 0; w < kStreams; ++w) {
    const float2 stream = stats_s[w * kRows + r];
    const float weight = exp2f(stream.x - t.base);
    t.sum += stream.y * weight;
    stats_s[w * kRows + r] = make_float2(weight, 0.f);
  }
  return t;
}

// Writes 4 output columns [d, d + 4) of row r (fewer at the end of Dv) of
// the block's rows, v times scale; returns whether one of them is NaN or
// infinite (repair_block_rows).
template <typename T>
__device__ __forceinline__ bool store_out_columns(const DecodeParams& p, const DecodeBlock& b,
                                                  int r, int d, const float (&v)[4], float scale) {
  const int columns = min(4, p.head_dim_v - d);
  const int2 hi = packed_row(p, b, r);
  T* out = static_cast<T*>(p.out) + b.batch * p.out_strides.batch + hi.x * p.out_strides.head +
           hi.y * p.out_strides.row + d;
  // Where rows start 16-byte aligned, 4 elements at a multiple of 4 are one vector.
  alignas(16) T x[4];
  bool bad = false;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    x[e] = from_float<T>(v[e] * scale);
    bad |= e < columns && non_finite(v[e] * scale);
  }
  if (columns == 4 && p.copy_bytes >= 16) {
    if constexpr (sizeof(T) == 2)
      *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(x);
    else
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(x);
  } else {
    for (int e = 0; e < columns; ++e) out[e] = x[e];
  }
  return bad;
}

// ------------------------------------------------------------ the NaN/Inf policy

// Key j's rows of sequence `batch` and kv head `kv_head` in k and v (dense
// or paged: core/kv_cache.h) as exact_row reads them; v's from column
// `column0` on.
template <typename T>
struct DecodeRowOperands {
  const T* q;
  const DecodeParams* p;
  int64_t batch, kv_head, column0;
  int64_t q_col, k_col, v_col;
  __device__ const T* key(int j) const {
    return static_cast<const T*>(p->k) + key_row_offset(p->kv, p->k_strides, batch, kv_head, j);
  }
  __device__ const T* value(int j) const {
    return static_cast<const T*>(p->v) + key_row_offset(p->kv, p->v_strides, batch, kv_head, j) +
           column0 * v_col;
  }
};

// Recomputes query head `head` at position `pos` of sequence `batch` (of
// len_k keys): out columns [column0, column0 + columns) and, with
// write_lse, its lse (exact_row: cuda/common/exact_row.cuh). All 32 lanes of
// a warp, converged.
template <typename T>
__device__ __forceinline__ void decode_exact_row(const DecodeParams& p, int batch, int len_k,
                                                 int head, int pos, int column0, int columns,
                                                 bool write_lse) {
  const DecodeRowOperands<T> x{static_cast<const T*>(p.q) + batch * p.q_strides.batch +
                                   head * p.q_strides.head + pos * p.q_strides.row,
                               &p,
                               batch,
                               head / p.kv_group_size,
                               column0,
                               p.q_strides.col,
                               p.k_strides.col,
                               p.v_strides.col};
  const int2 keys = visible_keys(p, len_k, pos);
  const ExactRule rule{{keys.x, keys.y},
                       p.scale_log2,
                       p.softcap_log2,
                       sink_log2(p.semantics.sinks, p.semantics.sink_stride, head)};
  const int64_t mask_row = mask_row_offset(p.semantics, batch, head, pos);
  T* out = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
           pos * p.out_strides.row + column0;
  float* lse = write_lse && p.lse != nullptr
                   ? p.lse + batch * p.lse_strides.batch + head * p.lse_strides.head +
                         pos * p.lse_strides.row
                   : nullptr;
  exact_row<T, 32>(
      x, rule, [&](int j) { return mask_term(p, mask_row, j); }, p.head_dim_qk, out, columns, lse);
}

// After a block's last stores of its final rows: `bad` says whether this
// thread stored a NaN or an infinity. If a thread of the block did, each
// warp re-reads a share of the block's rows (out, and lse for NaN) and
// recomputes those with one. Every thread of the block calls it; in a
// cluster, after the barrier that ends the cluster's stores (a row's
// columns may come from several blocks: each block that stored a bad value
// repairs whole rows, all with the same values).
template <typename T>
__device__ __forceinline__ void repair_block_rows(const DecodeParams& p, const DecodeBlock& b,
                                                  bool bad) {
  if (!__syncthreads_or(bad)) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  for (int r = static_cast<int>(threadIdx.x) / 32; r < b.rows_here; r += warps) {
    const int2 hi = packed_row(p, b, r);
    const T* out = static_cast<const T*>(p.out) + b.batch * p.out_strides.batch +
                   hi.x * p.out_strides.head + hi.y * p.out_strides.row;
    bool row_bad = false;
    for (int c = lane; c < p.head_dim_v; c += 32) row_bad |= non_finite(to_float(out[c]));
    if (lane == 0 && p.lse != nullptr) {
      const float lse = p.lse[b.batch * p.lse_strides.batch + hi.x * p.lse_strides.head +
                              hi.y * p.lse_strides.row];
      row_bad |= lse != lse;
    }
    if (__any_sync(0xffffffffu, row_bad))
      decode_exact_row<T>(p, b.batch, b.len_k, hi.x, hi.y, 0, p.head_dim_v, true);
  }
}

// The block epilogue. stats_s[stream * kRows + r] holds each key stream's
// (max, sum) for row r, merge_s[(stream * kRows + r) * DV + d] its
// unnormalized output. Merges the streams and writes out/lse (one split: the
// sink joins the denominator) or the split's partial and (max, sum) for the
// combine kernel. A row's weights are worked out once (its thread r writes
// them over stats_s), then all threads merge 4 columns at a time (element by
// element, with the row's weights and source per element, it took 2-4 us of
// the Lk=32768 calls at Dv = 128-512).
template <typename T, int kStreams, int kRows, int DV>
__device__ __forceinline__ void store_block_rows(const DecodeParams& p, const DecodeBlock& b,
                                                 float2* stats_s, const float* merge_s) {
  static_assert(DV % 4 == 0);
  const bool single_split = p.num_splits == 1;
  const int64_t first_slot = first_partial_row(p, b);
  if (const int r = static_cast<int>(threadIdx.x); r < b.rows_here) {
    const int2 hi = packed_row(p, b, r);
    const float sink =
        single_split ? sink_log2(p.semantics.sinks, p.semantics.sink_stride, hi.x) : kMinusInf;
    const RowTotals t = merge_stream_stats<kStreams, kRows>(stats_s, r, sink);
    stats_s[r].y = single_split ? (t.sum > 0.f ? 1.f / t.sum : 0.f) : 1.f;  // the row's scale
    if (!single_split)
      reinterpret_cast<float2*>(p.partial_max_sum)[first_slot + r] = make_float2(t.top, t.sum);
    else if (p.lse != nullptr)
      p.lse[b.batch * p.lse_strides.batch + hi.x * p.lse_strides.head + hi.y * p.lse_strides.row] =
          row_lse(t);
  }
  __syncthreads();
  constexpr int kVectors = DV / 4;
  const bool partial_vectors = partial_float4(p);
  bool bad = false;
  for (int idx = threadIdx.x; idx < b.rows_here * kVectors; idx += blockDim.x) {
    const int r = idx / kVectors, d = idx % kVectors * 4;
    if (d >= p.head_dim_v) continue;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kStreams; ++w) {
      const float weight = stats_s[w * kRows + r].x;
      const float4 m = *reinterpret_cast<const float4*>(merge_s + (w * kRows + r) * DV + d);
      v[0] += weight * m.x, v[1] += weight * m.y, v[2] += weight * m.z, v[3] += weight * m.w;
    }
    if (single_split) {
      bad |= store_out_columns<T>(p, b, r, d, v, stats_s[r].y);
    } else {
      const int columns = min(4, p.head_dim_v - d);
      float* out = p.partial_out + (first_slot + r) * p.dv_ws + d;
      if (columns == 4 && partial_vectors)
        *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      else
        for (int e = 0; e < columns; ++e) out[e] = v[e];
    }
  }
  if (single_split) repair_block_rows<T>(p, b, bad);  // split partials: the combine repairs
}

// The epilogue of a block whose row chunk's key splits form one cluster
// (rank = split, launch_mma_split; sm_90): each block merges its streams in
// place (stream 0's rows of merge_s become the block's unnormalized rows,
// block_s[r] their (max, sum)), then the blocks merge the splits through
// distributed shared memory, each a share of the rows' 4-column vectors, and
// write out and lse as the combine kernel does from the partials: no
// partials, no second kernel. block_s: kRows float2 of shared memory.
template <typename T, int kStreams, int kRows, int DV>
__device__ __forceinline__ void store_cluster_rows(const DecodeParams& p, const DecodeBlock& b,
                                                   float2* stats_s, float* merge_s,
                                                   float2* block_s) {
  static_assert(DV % 4 == 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < kRows) {
    const RowTotals t = merge_stream_stats<kStreams, kRows>(stats_s, tid, kMinusInf);
    block_s[tid] = make_float2(t.top, t.sum);
  }
  __syncthreads();
  constexpr int kVectors = DV / 4;
  for (int idx = tid; idx < b.rows_here * kVectors; idx += blockDim.x) {
    const int r = idx / kVectors, d = idx % kVectors * 4;
    if (d >= p.head_dim_v) continue;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kStreams; ++w) {
      const float weight = stats_s[w * kRows + r].x;
      const float4 m = *reinterpret_cast<const float4*>(merge_s + (w * kRows + r) * DV + d);
      v.x += weight * m.x, v.y += weight * m.y, v.z += weight * m.z, v.w += weight * m.w;
    }
    // Over stream 0's row: no other thread reads these 4 columns of row r.
    *reinterpret_cast<float4*>(merge_s + r * DV + d) = v;
  }
  cluster_arrive();
  cluster_wait();  // every split's rows and totals staged
  const int splits = static_cast<int>(cluster_blocks()), rank = static_cast<int>(cluster_rank());
  const uint32_t rows_at = shared_address(merge_s), totals_at = shared_address(block_s);
  const int vectors = (p.head_dim_v + 3) / 4;
  bool bad = false;
  for (int idx = rank * static_cast<int>(blockDim.x) + tid; idx < b.rows_here * vectors;
       idx += splits * static_cast<int>(blockDim.x)) {
    const int r = idx / vectors, d = idx % vectors * 4;
    float2 totals[kDecodeMaxClusterSplits];
    RowTotals t;
    t.top = kMinusInf;
#pragma unroll
    for (int s = 0; s < kDecodeMaxClusterSplits; ++s)
      if (s < splits) {
        totals[s] = load_cluster_float2(cluster_address(totals_at + r * 8, s));
        t.top = fmaxf(t.top, totals[s].x);
      }
    const int2 hi = packed_row(p, b, r);
    const float sink = sink_log2(p.semantics.sinks, p.semantics.sink_stride, hi.x);
    t.top = fmaxf(t.top, sink);
    t.base = t.top == kMinusInf ? 0.f : t.top;
    t.sum = exp2f(sink - t.base);
    float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < kDecodeMaxClusterSplits; ++s)
      if (s < splits) {
        const float weight = exp2f(totals[s].x - t.base);  // 0 for a split without keys
        t.sum += weight * totals[s].y;
        const float4 m = load_cluster_float4(cluster_address(rows_at + (r * DV + d) * 4, s));
        v[0] += weight * m.x, v[1] += weight * m.y, v[2] += weight * m.z, v[3] += weight * m.w;
      }
    bad |= store_out_columns<T>(p, b, r, d, v, t.sum > 0.f ? 1.f / t.sum : 0.f);
    if (d == 0 && p.lse != nullptr)
      p.lse[b.batch * p.lse_strides.batch + hi.x * p.lse_strides.head + hi.y * p.lse_strides.row] =
          row_lse(t);
  }
  cluster_arrive();
  cluster_wait();  // the other blocks' reads of this block's rows are done, its stores seen
  repair_block_rows<T>(p, b, bad);
#else
  (void)p, (void)b, (void)stats_s, (void)merge_s, (void)block_s;
  __trap();  // launch_mma_split forms clusters only for sm_90 binaries
#endif
}

}  // namespace fsdpa::detail::cuda::decode_kernel
