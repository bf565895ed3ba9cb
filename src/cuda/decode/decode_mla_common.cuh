// The pieces both MLA kernels share (decode_mla.cu: the kernel of 32-key
// tiles and the wide prefill row; decode_mla_latent.cu: the alternating-tile
// kernel of the latent cache): which block a CTA runs, Q's copy where no TMA
// box is the block's rows, a paged tile's pages, a tile's masked scores, the
// epilogue from a warpgroup's accumulators (out and LSE, partials, or the
// split pairs' merge through the cluster), and on the host how a launch
// runs its blocks and the combine after it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/kv_cache.h"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_host.h"
#include "cuda/decode/decode_launch.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cuda::mla {

// Several splits, when the partial rows take 16-byte vectors: the split's
// rows leave through shared memory (store_partial_staged), and an even
// number of splits runs as split pairs (store_pair_merged). The vector test
// is decode_kernel::partial_float4 spelled out: called, it changed this
// kernel's SASS (40 instructions more), and the measured code is this one.
__host__ __device__ __forceinline__ bool staged_partials(const DecodeParams& p) {
  return p.num_splits > 1 && p.dv_ws % 4 == 0 &&
         reinterpret_cast<uintptr_t>(p.partial_out) % 16 == 0;
}

// Floats of a staged row (2 half_dv columns): 8 rows' float2 writes hit
// distinct banks.
constexpr int mla_staged_row(int half_dv) { return 2 * half_dv + 8; }

// The device code, compiled for sm_90a only (elsewhere the kernels' bodies
// are empty and these would be unused).
#if FSDPA_WGMMA_ARCH
constexpr int kQPanelBytes = kMlaRows * 128;  // a 64-column panel of Q
// kHalfDv: a warpgroup's output columns (MlaShape::half_dv), in 8-column tiles.
template <int kHalfDv>
using OutFragments = float[kHalfDv / 8][4];

// Where no TMA box of q is the block's rows (64 % Lq != 0, or the heads
// broadcast; see launch_mla): starts copying the block's 64 packed Q rows
// into the swizzled panels at shared address `q` (cp.async, one commit
// group; the caller waits and then fences for the async proxy). Rows past
// the block's and columns past Dqk are zero-filled. Four threads share a
// row, so each finds its row's source once (packed_row divides) and then
// copies every fourth 16-byte chunk.
template <typename T, int kPanels>
__device__ __forceinline__ void load_q(const DecodeParams& p, const decode_kernel::DecodeBlock& b,
                                       uint32_t q) {
  constexpr int kChunks = kPanels * 8;  // 16-byte chunks of a row
  constexpr int kThreadsPerRow = kMlaThreads / kMlaRows;
  static_assert(kMlaThreads % kMlaRows == 0 && kChunks % kThreadsPerRow == 0);
  const int r = static_cast<int>(threadIdx.x) / kThreadsPerRow;
  const int first = static_cast<int>(threadIdx.x) % kThreadsPerRow;
  const decode_kernel::QRow<T> source = decode_kernel::q_row<T>(p, b, r);
  const uint32_t row = q + r * 128;
#pragma unroll
  for (int i = 0; i < kChunks / kThreadsPerRow; ++i) {
    const int c = first + i * kThreadsPerRow;
    const int bytes = 2 * max(0, min(8, source.columns - c * 8));
    cp_async_16_zfill(row + (c / 8) * kQPanelBytes + ((c % 8) ^ (r % 8)) * 16,
                      bytes > 0 ? source.source + c * 8 : source.source, bytes);
  }
  cp_async_commit();
}

// The epilogue from the accumulators: one split writes out (normalized, the
// sink in the denominator) and the LSE; several write the split's
// unnormalized partial and (max, sum) for the combine kernel.
// `stats` holds each of the 64 rows' (max, sum). Returns
// whether this thread stored a NaN or an infinity into out
// (repair_block_rows).
template <typename T, int kHalfDv>
__device__ __forceinline__ bool store_rows(const DecodeParams& p,
                                           const decode_kernel::DecodeBlock& b,
                                           const OutFragments<kHalfDv>& o, const float2* stats,
                                           int warpgroup, int warp, int group, int quad) {
  using namespace decode_kernel;
  constexpr int kOutTiles = kHalfDv / 8;
  const bool single_split = p.num_splits == 1;
  const int rows_total = p.batch * p.heads_q * p.len_q;
  bool bad = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + group + 8 * h;
    if (r >= b.rows_here) continue;
    const int2 hi = packed_row(p, b, r);
    const float2 max_sum = stats[r];
    const int64_t row = (int64_t(b.batch) * p.heads_q + hi.x) * p.len_q + hi.y;
    if (single_split) {
      const float sink = sink_log2(p.semantics.sinks, p.semantics.sink_stride, hi.x);
      const float top = fmaxf(max_sum.x, sink);
      const float base = top == kMinusInf ? 0.f : top;
      const float weight = exp2f(max_sum.x - base);
      const float total = max_sum.y * weight + exp2f(sink - base);
      const float scale = total > 0.f ? weight / total : 0.f;
      T* out = static_cast<T*>(p.out) + b.batch * p.out_strides.batch + hi.x * p.out_strides.head +
               hi.y * p.out_strides.row;
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        const int col = warpgroup * kHalfDv + n * 8 + 2 * quad;
        const float x0 = o[n][2 * h] * scale, x1 = o[n][2 * h + 1] * scale;
        if (col + 1 < p.head_dim_v) {
          *reinterpret_cast<uint32_t*>(out + col) = pack_pair<T>(x0, x1);
          bad |= non_finite(x0) || non_finite(x1);
        } else if (col < p.head_dim_v) {
          out[col] = from_float<T>(x0);
          bad |= non_finite(x0);
        }
      }
      if (p.lse != nullptr && warpgroup == 0 && quad == 0)
        p.lse[b.batch * p.lse_strides.batch + hi.x * p.lse_strides.head +
              hi.y * p.lse_strides.row] =
            top == kMinusInf ? kMinusInf : (base + log2f(total)) * kLn2;
    } else {
      const int64_t slot = int64_t(b.split) * rows_total + row;
      float* partial = p.partial_out + slot * p.dv_ws;
      // Pairs are 8-byte aligned when the row stride is even (the workspace is 16-byte aligned).
      const bool pairs = p.dv_ws % 2 == 0;
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        const int col = warpgroup * kHalfDv + n * 8 + 2 * quad;
        if (pairs && col + 1 < p.head_dim_v) {
          *reinterpret_cast<float2*>(partial + col) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
        } else {
          if (col < p.head_dim_v) partial[col] = o[n][2 * h];
          if (col + 1 < p.head_dim_v) partial[col + 1] = o[n][2 * h + 1];
        }
      }
      if (warpgroup == 0 && quad == 0) reinterpret_cast<float2*>(p.partial_max_sum)[slot] = max_sum;
    }
  }
  return bad;
}

// Several splits, when the partial rows take 16-byte vectors: the split's
// unnormalized rows go through shared memory (`staging`, at
// mla_staging_offset) and leave as whole rows, each warp storing 512
// contiguous bytes at a time. A block's packed rows are consecutive rows of
// the partials.
// (Stored from the accumulator layout, each instruction wrote 8-byte pieces
// of 8 rows: ~5 us for the 16.8 MB of all blocks at once.)
// A warpgroup's accumulators into its columns of the staged rows.
template <int kHalfDv>
__device__ __forceinline__ void stage_rows(const OutFragments<kHalfDv>& o, float* staging,
                                           int warpgroup, int warp, int group, int quad) {
  constexpr int kStagedRow = mla_staged_row(kHalfDv);
  constexpr int kOutTiles = kHalfDv / 8;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float* row =
        staging + (warp * 16 + group + 8 * h) * kStagedRow + warpgroup * kHalfDv + 2 * quad;
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n)
      *reinterpret_cast<float2*>(row + n * 8) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
  }
}
template <int kHalfDv>
__device__ __forceinline__ void store_partial_staged(const DecodeParams& p,
                                                     const decode_kernel::DecodeBlock& b,
                                                     const OutFragments<kHalfDv>& o,
                                                     const float2* stats, float* staging,
                                                     int warpgroup, int warp, int group, int quad) {
  constexpr int kStagedRow = mla_staged_row(kHalfDv);
  stage_rows<kHalfDv>(o, staging, warpgroup, warp, group, quad);
  __syncthreads();
  const int64_t first_row = decode_kernel::first_partial_row(p, b);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int vectors = p.head_dim_v / 4;  // dv_ws == head_dim_v
  for (int r = static_cast<int>(threadIdx.x) / 32; r < b.rows_here; r += kMlaThreads / 32) {
    float4* out = reinterpret_cast<float4*>(p.partial_out + (first_row + r) * p.dv_ws);
    const float4* in = reinterpret_cast<const float4*>(staging + r * kStagedRow);
    for (int c = lane; c < vectors; c += 32) out[c] = in[c];
  }
  if (static_cast<int>(threadIdx.x) < b.rows_here)
    reinterpret_cast<float2*>(p.partial_max_sum)[first_row + threadIdx.x] = stats[threadIdx.x];
}

// Split pairs (two-block clusters of splits 2k and 2k + 1, see launch_mla):
// both blocks stage their rows, then each merges half of the columns of the
// pair (its own rows from shared memory, the partner's through the cluster,
// both weighted to the larger of the two maxima). With two splits in all the
// pair holds every key of its rows and writes out and lse itself, the sink
// in the denominator, and no combine runs; else it stores split k of the
// partials, (max, sum) from rank 0: the combine reads half the bytes.
// kWritesOut: the pair is every split (num_splits == 2; an instance of its
// own, so that the many-split kernel keeps its code: with a run-time branch
// the 64-split call was 1-1.8 us slower, bench/NOTES.md, session 35).
// `weights`: 64 float2 of shared memory for the rows' two weights. (With
// every load of a thread in flight at once instead of 4, and the weights
// worked out per element, the call took 1.7 us longer: bench/NOTES.md,
// session 9.)
template <typename T, bool kWritesOut, int kHalfDv>
__device__ __forceinline__ void store_pair_merged(const DecodeParams& p,
                                                  const decode_kernel::DecodeBlock& b,
                                                  const OutFragments<kHalfDv>& o,
                                                  const float2* stats, float* staging,
                                                  float2* weights, int warpgroup, int warp,
                                                  int group, int quad) {
  using decode_kernel::RowTotals;
  constexpr int kStagedRow = mla_staged_row(kHalfDv);
  stage_rows<kHalfDv>(o, staging, warpgroup, warp, group, quad);
  cluster_arrive();
  cluster_wait();  // both blocks' rows and statistics staged
  const uint32_t rank = cluster_rank(), partner = rank ^ 1u;
  decode_kernel::DecodeBlock merged = b;
  merged.split = b.split / 2;
  const int64_t first_row = decode_kernel::first_partial_row(p, merged);
  const int t = static_cast<int>(threadIdx.x);
  if (t < kMlaRows) {
    const float2 own = stats[t];
    const float2 other = load_cluster_float2(cluster_address(shared_address(stats + t), partner));
    const bool row_here = t < b.rows_here;
    const int2 hi = row_here ? decode_kernel::packed_row(p, b, t) : make_int2(0, 0);
    const float sink = kWritesOut && row_here
                           ? sink_log2(p.semantics.sinks, p.semantics.sink_stride, hi.x)
                           : kMinusInf;
    RowTotals totals;
    totals.top = fmaxf(fmaxf(own.x, other.x), sink);
    totals.base = totals.top == kMinusInf ? 0.f : totals.top;
    const float own_weight = exp2f(own.x - totals.base),
                other_weight = exp2f(other.x - totals.base);
    totals.sum = own.y * own_weight + other.y * other_weight + exp2f(sink - totals.base);
    if constexpr (kWritesOut) {
      const float scale = totals.sum > 0.f ? 1.f / totals.sum : 0.f;
      weights[t] = make_float2(own_weight * scale, other_weight * scale);
      if (rank == 0 && row_here && p.lse != nullptr)
        p.lse[b.batch * p.lse_strides.batch + hi.x * p.lse_strides.head +
              hi.y * p.lse_strides.row] = decode_kernel::row_lse(totals);
    } else {
      weights[t] = make_float2(own_weight, other_weight);
      if (rank == 0 && row_here)
        reinterpret_cast<float2*>(p.partial_max_sum)[first_row + t] =
            make_float2(totals.top, totals.sum);
    }
  }
  __syncthreads();
  // This block's 16-byte columns of every row: the first half (rank 0) or the rest.
  const int vectors = p.head_dim_v / 4;  // dv_ws == head_dim_v
  const int first = rank == 0 ? 0 : (vectors + 1) / 2;
  const int count = rank == 0 ? (vectors + 1) / 2 : vectors / 2;
  const uint32_t remote = cluster_address(shared_address(staging), partner);
  bool bad = false;
#pragma unroll 4
  for (int i = t; i < b.rows_here * count; i += kMlaThreads) {
    const int r = i / count, c = (first + i % count) * 4;
    const int offset = r * kStagedRow + c;
    const float4 a = *reinterpret_cast<const float4*>(staging + offset);
    const float4 x = load_cluster_float4(remote + offset * 4);
    const float2 w = weights[r];
    const float v[4] = {a.x * w.x + x.x * w.y, a.y * w.x + x.y * w.y, a.z * w.x + x.z * w.y,
                        a.w * w.x + x.w * w.y};
    if constexpr (kWritesOut)
      bad |= decode_kernel::store_out_columns<T>(p, b, r, c, v, 1.f);
    else
      *reinterpret_cast<float4*>(p.partial_out + (first_row + r) * p.dv_ws + c) =
          make_float4(v[0], v[1], v[2], v[3]);
  }
  cluster_arrive();
  cluster_wait();  // the partner's reads of this block's rows are done, its stores seen
  if constexpr (kWritesOut) decode_kernel::repair_block_rows<T>(p, b, bad);
}
// Causal prefill: the rows late in a sequence see the most keys, and a grid
// that reaches them last ends on a few long blocks. Where every row chunk is
// 64 positions of one head (len_q a multiple of 64), the chunks run by
// descending position, the heads of a kv group side by side. A permutation of
// the chunks of each (batch, kv head, split); a no-op otherwise.
__device__ __forceinline__ int64_t heavy_chunks_first(const DecodeParams& p, int64_t block) {
  if (!p.semantics.causal || p.len_q % kMlaRows != 0) return block;
  const int chunk = static_cast<int>(block % p.row_chunks);
  const int per_head = p.len_q / kMlaRows;  // row_chunks == kv_group_size * per_head
  const int position = per_head - 1 - chunk / p.kv_group_size;
  return block - chunk + (chunk % p.kv_group_size) * per_head + position;
}

// The block this CTA runs (decode_block) and whether it has anything to do.
// Split pairs: consecutive CTAs are splits 2k and 2k + 1 of one row chunk
// (decode_block's order has the row chunk fastest). Nothing to do past the
// sequence's last split (a list holds no such block); a pair runs where its
// first split has keys: where the sequence ends in that split (one sequence
// with its own length, so no list), the second block runs with none, since
// its partner merges its rows through the cluster (store_pair_merged).
struct MlaBlock {
  decode_kernel::DecodeBlock blk;
  bool pairs, runs;
};
template <bool kList>
__device__ __forceinline__ MlaBlock mla_block(const DecodeParams& p) {
  using namespace decode_kernel;
  const bool pairs = cluster_blocks() == 2;
  int64_t block = blockIdx.x;
  if (pairs) {
    const int64_t split = block % p.num_splits, rest = block / p.num_splits;
    block = (rest / p.row_chunks * p.num_splits + split) * p.row_chunks + rest % p.row_chunks;
  }
  const DecodeBlock blk = decode_block<kList>(p, kMlaRows, heavy_chunks_first(p, block));
  allow_next_launch();
  const bool runs =
      pairs ? blk.split / 2 * 2 < sequence_splits(p, blk.len_k, blk.split_keys) : blk.valid;
  return {blk, pairs, runs};
}

// A paged tile's boxes: the pool pages of its kTileBoxes boxes and the row of
// its first key in the first of them.
template <int kTileBoxes>
struct TilePages {
  int page[kTileBoxes];
  int row;
};
// The columns of the block table (a paged call's len_k is whole pages).
__device__ __forceinline__ uint32_t table_columns(const DecodeParams& p) {
  return static_cast<uint32_t>(p.kv.len_k) / static_cast<uint32_t>(p.kv.page_size);
}
// The pages of sequence `batch`'s tile that starts at key `key`, one box a
// page it spans. A box past the table's last column reads that column's
// page (its keys are past the sequence, masked).
template <int kTileBoxes>
__device__ __forceinline__ TilePages<kTileBoxes> tile_pages(const DecodeParams& p, int batch,
                                                            int key, uint32_t columns) {
  TilePages<kTileBoxes> pages{};
  const PageSlot slot = page_slot(p.kv, key);
  pages.row = static_cast<int>(slot.row);
#pragma unroll
  for (int box = 0; box < kTileBoxes; ++box)
    pages.page[box] = static_cast<int>(
        page_of(p.kv, batch, min(static_cast<uint32_t>(slot.column) + box, columns - 1)));
  return pages;
}

// A tile's scores s (8-key tiles from key k0; a thread's rows row0 and
// row0 + 8, halves h = 0, 1) into the exp2 domain: a key row half h sees
// (in range[h], before `end`, the block's last) scaled, soft-capped and
// masked (the row's mask offset mask_row[h], where has_mask), any other
// -inf.
template <int kKeyTiles>
__device__ __forceinline__ void mask_scores(const DecodeParams& p, float (&s)[kKeyTiles][4], int k0,
                                            int end, const int2 (&range)[2],
                                            const int64_t (&mask_row)[2], bool has_mask, int quad) {
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2, key = k0 + n * 8 + 2 * quad + e % 2;
      float x = kMinusInf;
      if (key < end && key >= range[h].x && key < range[h].y) {
        x = decode_kernel::capped_score(p, s[n][e] * p.scale_log2);
        if (has_mask) x += decode_kernel::mask_term(p, mask_row[h], key);
      }
      s[n][e] = x;
    }
}
#endif  // FSDPA_WGMMA_ARCH

// ------------------------------------------------------------ the launch

// k's map for tiles of tile_keys keys: dense k [B, Hkv, Lk, D] in boxes of
// tile_keys keys, a pool [pages, page_size, Hkv, D] in boxes of a page's rows
// (at most tile_keys).
inline TileMap mla_k_map(const DecodeParams& p, int tile_keys) {
  const int64_t k_strides[3] = {p.k_strides.outer, p.k_strides.head, p.k_strides.row};
  if (p.kv.block_table != nullptr)
    return make_swizzle128_map(p.k, p.kv.num_pages, p.heads_kv, p.kv.page_size, p.head_dim_qk,
                               k_strides,
                               static_cast<int>(std::min<int64_t>(p.kv.page_size, tile_keys)));
  return make_swizzle128_map(p.k, p.batch, p.heads_kv, p.len_k, p.head_dim_qk, k_strides,
                             tile_keys);
}

// How a launch runs its blocks, from the params: split pairs merged in a
// two-block cluster where the splits pair up and the partials are staged,
// not where the blocks are a list of splits over the lengths (decode_block),
// whose neighbours need not be one row chunk's (the pairs' combine reads
// half the partials: bench/NOTES.md, session 9); a pair of the only two
// splits writes out itself (no combine). Q comes by TMA where a box of 64 /
// Lq heads x Lq rows is a block's 64 packed rows and the heads are not
// broadcast (stride 0: the map would hold one head), else by cp.async
// (load_q); each block of a pair reads its own (a multicast to both measured
// slower: session 10).
struct MlaLaunch {
  bool pairs, list, pair_out, q_by_tma;
  TileMap q_map;
};
inline MlaLaunch mla_launch(const DecodeParams& p) {
  MlaLaunch launch{};
  launch.pairs = p.num_splits % 2 == 0 && staged_partials(p) && p.split_slots == 0;
  launch.list = p.split_slots != 0;
  launch.pair_out = launch.pairs && p.num_splits == 2;
  launch.q_by_tma = kMlaRows % p.len_q == 0 && (p.heads_q == 1 || p.q_strides.head != 0);
  if (launch.q_by_tma) {
    const int64_t q_strides[3] = {p.q_strides.batch, p.q_strides.head, p.q_strides.row};
    launch.q_map = make_swizzle128_map(p.q, p.batch, p.heads_q, p.len_q, p.head_dim_qk, q_strides,
                                       p.len_q, kMlaRows / p.len_q);
  }
  return launch;
}
// A latent-cache kernel's instance for a tile's box count `boxes` (0: dense
// k, else a page pool read in that many boxes a panel), one of kBoxCounts:
// make.template operator()<kBoxes>(). A build without the 576/512 bucket
// (kMlaLatentBuilt) has none, and instantiates none of make's.
template <typename Kernel, int... kBoxCounts, typename Make>
Kernel latent_instance(const char* kernel, int boxes, const Make& make) {
  Kernel instance = nullptr;
  if constexpr (kMlaLatentBuilt)
    (void)((boxes == kBoxCounts && (instance = make.template operator()<kBoxCounts>(), true)) ||
           ...);
  if (instance == nullptr)
    throw Error(std::string("fsdpa: internal: ") + kernel + " has no instance for " +
                std::to_string(boxes) + " boxes a tile" +
                (kMlaLatentBuilt ? "" : " (the 576/512 bucket is not built)"));
  return instance;
}

// After the split kernel: the combine of its partials, where they are not
// written out by split pairs (split k of the pairs' partials is 2k and
// 2k + 1 merged).
template <typename T>
void launch_mla_combine(const DecodeParams& p, const MlaLaunch& launch, cudaStream_t stream) {
  if (p.num_splits == 1 || launch.pair_out) return;
  DecodeParams merged = p;
  if (launch.pairs) merged.num_splits /= 2, merged.keys_per_split *= 2;
  launch_decode_combine<T>(merged, stream);
}

}  // namespace fsdpa::detail::cuda::mla
