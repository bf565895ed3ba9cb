// The CPU fused path's kernel: tiled online softmax (FlashAttention style).
//
// The top of this header is shared by fused.cpp and the kernel translation
// units: the tuning table, the launch arguments and the per-ISA entry points.
// The kernel body below FSDPA_FUSED_KERNEL_BODY is compiled twice, once per
// ISA (fused_kernel_generic.cpp, fused_kernel_avx2.cpp). Everything in the body
// lives in an anonymous namespace so the two copies, built with different
// instruction sets, can never be merged by the linker (a merged inline
// function could hand AVX2 code to a CPU without AVX2).
//
// One work item = (batch, kv head, chunk of the kv group's query heads, block
// of queries). Its rows are (query, head) pairs, so all query heads of one kv
// group share each K/V tile (GQA/MQA, and decode, where a tile holds the
// whole group). Per item: Q^T is loaded once (scaled by scale*log2(e)), then
// key tiles of the visible range are streamed: K/V rows converted to f32 into
// the thread's workspace, S^T = K.Q^T (vectorized over query rows), masks,
// online softmax in base 2 (vectorized over rows), O = O*alpha + P.V
// (vectorized over Dv). Memory is O(tile), independent of Lk.
//
// When there are fewer items than threads (decode with few kv heads), each
// item's keys are split into key_splits ranges, one work unit each; a unit
// then writes its unnormalized O with its running max and sum to
// `partials`, and a second pass (fused_combine_*) merges an item's splits
// and finalizes its rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/kv_cache.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cpu {

// ---------------------------------------------------------------- tuning

// Tile sizes by head dim (max(Dqk, Dv)); first row whose max_head_dim covers
// the problem wins. Machine: AMD EPYC (Zen 3, 2 cores, 512 KiB L2/core), f32,
// AVX2 kernel (see bench/NOTES.md, "CPU fused path").
struct CpuTile {
  int64_t max_head_dim;
  int64_t rows;  // query rows ((query, head) pairs) per tile; multiple of 16
  int64_t keys;  // keys per streamed K/V tile
};
inline constexpr CpuTile kCpuTiles[] = {
    // D<=64: not measured separately; the D<=128 shape, ~100 KiB per thread.
    {64, 64, 128},
    // D<=128: measured 1 thread, Lq=512 Lk=2048 H=4: 64x128 47 GFLOP/s, 64x64
    // 45, 32x64 28, 128x64 28 (best of 7, shared machine); ~210 KiB/thread.
    {128, 64, 128},
    // D<=256: not measured; 64x128 would be ~400 KiB/thread at D=256, so the
    // key tile is halved to stay well inside the 512 KiB L2 (~270 KiB).
    {256, 64, 64},
    // D>256 (288, 512, 576): not measured; 32x32 keeps Q^T, K, V and O tiles
    // at ~280 KiB for 576/512, where 64x64 would be ~1 MiB (spills L2).
    {std::numeric_limits<int64_t>::max(), 32, 32},
};
inline constexpr int64_t kCpuChunk = 16;  // floats per vectorized column chunk

constexpr bool cpu_tiles_valid() {
  int64_t previous = 0;
  for (const CpuTile& t : kCpuTiles) {
    if (t.max_head_dim <= previous) return false;  // sorted, no duplicates
    if (t.rows <= 0 || t.rows % kCpuChunk != 0) return false;
    if (t.keys <= 0 || t.keys > 4096) return false;
    previous = t.max_head_dim;
  }
  return previous == std::numeric_limits<int64_t>::max();  // covers every head dim
}
static_assert(cpu_tiles_valid(),
              "kCpuTiles: sorted by max_head_dim, rows a positive multiple of kCpuChunk, "
              "keys in [1, 4096], last row covers every head dim");

// ---------------------------------------------------------------- launch

// Everything a work item needs, resolved by fused.cpp (plain data only).
struct FusedArgs {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0, dqk = 0, dv = 0;
  DType dtype = DType::F32;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int64_t q_strides[4] = {}, out_strides[4] = {};
  float* lse = nullptr;  // null when not requested
  int64_t lse_strides[3] = {};
  MaskKind mask_kind = MaskKind::None;
  DType mask_dtype = DType::F32;
  const void* mask = nullptr;
  int64_t mask_strides[4] = {};  // 0 in broadcast dims
  const float* sinks = nullptr;  // null when absent
  int64_t sinks_stride = 0;
  KvIndex kv;                  // where each key sits (dense or paged) and each sequence's length
  KvStrides k_roles, v_roles;  // k's and v's strides by role (kv_strides)
  Options options;             // causal / window, for visible_keys() of core/semantics.h
  float scale_log2 = 0.0f;     // scale * log2(e), folded into Q
  float softcap_log2 = 0.0f;   // softcap * log2(e) (base-2 scores); 0: no soft cap
  // Tiling (fused_layout in fused.cpp).
  int64_t heads_per_tile = 1;  // query heads of one kv group per tile
  int64_t head_chunks = 1;     // ceil(group / heads_per_tile)
  int64_t queries_per_tile = 1;
  int64_t query_blocks = 0;  // ceil(len_q / queries_per_tile)
  int64_t rows_pad = 0;      // heads_per_tile * queries_per_tile rounded up to kCpuChunk
  int64_t tile_keys = 0;
  int64_t dqk_pad = 0;  // K row stride in the workspace (floats)
  int64_t dv_pad = 0;   // V / O row stride, a multiple of kCpuChunk
  // Key ranges per item (split-K); > 1 only when items are fewer than threads.
  int64_t key_splits = 1;
  // key_splits > 1: fused_partial_floats() floats per work unit (64-byte aligned).
  float* partials = nullptr;
};

// Floats of one work unit's partial result: O (rows_pad x dv_pad), then the
// running max and sum (rows_pad each), rounded to 64 bytes.
inline int64_t fused_partial_floats(const FusedArgs& a) {
  return (a.rows_pad * a.dv_pad + 2 * a.rows_pad + 15) / 16 * 16;
}

// Bytes of workspace one thread needs (plus 64 bytes of alignment slack).
size_t fused_thread_bytes(const FusedArgs& args);

// Runs work unit `unit` (0 <= unit < items * key_splits, items =
// batch*heads_kv*head_chunks*query_blocks; unit = item * key_splits + split)
// with the thread's workspace (fused_thread_bytes bytes, any alignment).
void fused_item_generic(const FusedArgs& args, std::byte* workspace, int64_t unit);
// key_splits > 1, after every unit ran: merges item `item`'s splits from
// `partials` and writes its rows (out, lse).
void fused_combine_generic(const FusedArgs& args, int64_t item);
#if FSDPA_HAVE_AVX2_KERNEL
void fused_item_avx2(const FusedArgs& args, std::byte* workspace, int64_t unit);
void fused_combine_avx2(const FusedArgs& args, int64_t item);
#endif

}  // namespace fsdpa::detail::cpu

// ================================================================ kernel body
#ifdef FSDPA_FUSED_KERNEL_BODY

#ifndef FSDPA_FUSED_VEC_BYTES
#error "define FSDPA_FUSED_VEC_BYTES (16 or 32) before including the kernel body"
#endif

#include <cmath>
#include <cstring>
#include <string>

#include "core/half.h"
#include "core/semantics.h"
#if FSDPA_FUSED_F16C
#include <immintrin.h>
#endif

namespace fsdpa::detail::cpu {
namespace {

// GCC/Clang generic vectors: SSE in the generic build, AVX2+FMA in the AVX2
// build, from the same source. Used only for the two register-blocked
// micro-kernels, where the plain-loop form left the accumulators on the stack.
typedef float Vec __attribute__((vector_size(FSDPA_FUSED_VEC_BYTES)));
constexpr int kLanes = FSDPA_FUSED_VEC_BYTES / 4;
constexpr int kChunk = static_cast<int>(kCpuChunk);
constexpr int kVecs = kChunk / kLanes;  // vectors per column chunk
static_assert(kChunk % kLanes == 0);

// Register blocking: keys per Q.K^T block and rows per P.V block. AVX2:
// 6 x 2 ymm accumulators + 2 loads + 1 broadcast = 15 of 16 registers.
constexpr int kBlockQK = FSDPA_FUSED_VEC_BYTES == 32 ? 6 : 3;
constexpr int kBlockPV = FSDPA_FUSED_VEC_BYTES == 32 ? 6 : 3;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kLn2 = 0.693147180559945309417;

inline int64_t imin(int64_t x, int64_t y) { return x < y ? x : y; }
inline int64_t imax(int64_t x, int64_t y) { return x > y ? x : y; }
inline float max_float(float x, float y) { return x > y ? x : y; }

inline Vec load_vec(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store_vec(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof v); }

inline float bits_as_float(uint32_t bits) {
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t float_as_bits(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof bits);
  return bits;
}

// 2^x for x <= 0 (the argument of every exp in the online softmax), written
// so the compiler vectorizes loops of it: round-to-nearest split x = n + f
// with f in [-0.5, 0.5], 2^f by a degree-6 polynomial (relative error
// < 2e-7), 2^n by building the exponent bits. x < -126 (so -inf) and NaN
// (from -inf - -inf) give exactly 0.
inline float exp2_neg(float x) {
  // Branch-free selects (integer masks) so GCC if-converts the loop without
  // -fno-trapping-math: a float operation inside a ?: arm blocks it.
  const uint32_t keep = 0u - static_cast<uint32_t>(x > -126.0f);  // all ones or 0
  const float xc = bits_as_float((float_as_bits(x) & keep) | (float_as_bits(-126.0f) & ~keep));
  const float shifted = xc + 12582912.0f;  // 1.5 * 2^23: rounds to an integer
  const float n = shifted - 12582912.0f;
  const float f = xc - n;
  const int32_t ni = static_cast<int32_t>(float_as_bits(shifted)) - 0x4B400000;
  const float pow2n = bits_as_float(static_cast<uint32_t>(ni + 127) << 23);
  float p = 1.5403530393381606e-4f;  // ln2^k / k!, k = 6 .. 0
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  return bits_as_float(float_as_bits(p * pow2n) & keep);
}

// --------------------------------------------------------------- storage

template <DType D>
struct Storage {
  using type = uint16_t;
};
template <>
struct Storage<DType::F32> {
  using type = float;
};

template <DType D>
inline float widen(typename Storage<D>::type x) {
  if constexpr (D == DType::F32) {
    return x;
  } else if constexpr (D == DType::BF16) {
    return bits_as_float(static_cast<uint32_t>(x) << 16);
  } else {
#if FSDPA_FUSED_F16C
    return _cvtsh_ss(x);
#else
    return f16_to_float(x);
#endif
  }
}

template <DType D>
inline typename Storage<D>::type narrow(float x) {
  if constexpr (D == DType::F32) {
    return x;
  } else if constexpr (D == DType::BF16) {
    const uint32_t bits = float_as_bits(x);  // round to nearest even, NaN stays NaN
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  } else {
#if FSDPA_FUSED_F16C
    // (_cvtss_sh is a macro with a compound literal in clang's headers.)
    return static_cast<uint16_t>(
        _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
#else
    return float_to_f16(x);
#endif
  }
}

// Element access through memcpy: the caller's pointers need only byte
// alignment (an f32 tensor may start at an odd address), and a load through
// a misaligned T* would be undefined behaviour; memcpy compiles to the same
// plain load.
template <typename T>
inline T load_element(const T* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}
template <typename T>
inline void store_element(T* p, T x) {
  std::memcpy(p, &x, sizeof(T));
}

// dst[i] = src[i * stride] as f32, i < n.
template <DType D>
void load_row(const void* base, int64_t offset, int64_t stride, int64_t n, float* __restrict dst) {
  using T = typename Storage<D>::type;
  const T* __restrict src = static_cast<const T*>(base) + offset;
  if (stride == 1) {
    int64_t i = 0;
#if FSDPA_FUSED_F16C
    if constexpr (D == DType::F16) {
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
#endif
    for (; i < n; ++i) dst[i] = widen<D>(load_element(src + i));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = widen<D>(load_element(src + i * stride));
  }
}

// ------------------------------------------------------------ micro-kernels

// S^T[j][r] = sum_d K[j][d] * Q^T[d][r] for MR keys and one chunk of 16 rows:
// each K element is broadcast, each Q^T row chunk loaded once per d.
template <int MR>
void qk_block(const float* __restrict kf, int64_t k_stride, const float* __restrict qt,
              int64_t rows_pad, int64_t dqk, float* __restrict st) {
  Vec acc[MR][kVecs] = {};
  for (int64_t d = 0; d < dqk; ++d) {
    Vec q[kVecs];
    for (int v = 0; v < kVecs; ++v) q[v] = load_vec(qt + d * rows_pad + v * kLanes);
    for (int j = 0; j < MR; ++j) {
      const float kj = kf[j * k_stride + d];
      for (int v = 0; v < kVecs; ++v) acc[j][v] += kj * q[v];
    }
  }
  for (int j = 0; j < MR; ++j)
    for (int v = 0; v < kVecs; ++v) store_vec(st + j * rows_pad + v * kLanes, acc[j][v]);
}

// O[r][c] = O[r][c] * alpha[r] + sum_j P^T[j][r] * V[j][c] for MR rows and one
// chunk of 16 columns: each V row chunk loaded once per j, P broadcast.
template <int MR>
void pv_block(float* __restrict o, int64_t dv_pad, const float* __restrict alpha,
              const float* __restrict pt, int64_t rows_pad, const float* __restrict vf,
              int64_t keys) {
  Vec acc[MR][kVecs];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = load_vec(o + r * dv_pad + v * kLanes) * alpha[r];
  for (int64_t j = 0; j < keys; ++j) {
    Vec x[kVecs];
    for (int v = 0; v < kVecs; ++v) x[v] = load_vec(vf + j * dv_pad + v * kLanes);
    for (int r = 0; r < MR; ++r) {
      const float p = pt[j * rows_pad + r];
      for (int v = 0; v < kVecs; ++v) acc[r][v] += p * x[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < kVecs; ++v) store_vec(o + r * dv_pad + v * kLanes, acc[r][v]);
}

// Tail dispatch: runs the block of exactly `count` (< MR) keys / rows.
template <int MR>
void qk_tail(int count, const float* kf, int64_t k_stride, const float* qt, int64_t rows_pad,
             int64_t dqk, float* st) {
  if constexpr (MR > 0) {
    if (count == MR) return qk_block<MR>(kf, k_stride, qt, rows_pad, dqk, st);
    qk_tail<MR - 1>(count, kf, k_stride, qt, rows_pad, dqk, st);
  }
}
template <int MR>
void pv_tail(int count, float* o, int64_t dv_pad, const float* alpha, const float* pt,
             int64_t rows_pad, const float* vf, int64_t keys) {
  if constexpr (MR > 0) {
    if (count == MR) return pv_block<MR>(o, dv_pad, alpha, pt, rows_pad, vf, keys);
    pv_tail<MR - 1>(count, o, dv_pad, alpha, pt, rows_pad, vf, keys);
  }
}

// ------------------------------------------------------------- masks

// Adds mask[b, h, i, k0 : k0 + keys] (times log2 e) to column r of S^T, or
// sets -inf where a boolean mask says drop.
// A base-2 score plus an additive mask value: -inf masks the key whatever
// the score (a NaN score of a masked key must not reach the row).
inline float masked_add(float score, float mask) {
  return mask == kNegInf ? kNegInf : score + mask * kLog2e;
}

void apply_mask(const FusedArgs& a, int64_t b, int64_t h, int64_t i, int64_t k0, int64_t keys,
                float* s_col, int64_t rows_pad) {
  const int64_t offset = b * a.mask_strides[0] + h * a.mask_strides[1] + i * a.mask_strides[2] +
                         k0 * a.mask_strides[3];
  const int64_t stride = a.mask_strides[3];
  if (a.mask_kind == MaskKind::Boolean) {
    const uint8_t* m = static_cast<const uint8_t*>(a.mask) + offset;
    for (int64_t j = 0; j < keys; ++j)
      if (m[j * stride] == 0) s_col[j * rows_pad] = kNegInf;
    return;
  }
  switch (a.mask_dtype) {
    case DType::F32: {
      const float* m = static_cast<const float*>(a.mask) + offset;
      for (int64_t j = 0; j < keys; ++j)
        s_col[j * rows_pad] = masked_add(s_col[j * rows_pad], load_element(m + j * stride));
      return;
    }
    case DType::F16: {
      const uint16_t* m = static_cast<const uint16_t*>(a.mask) + offset;
      for (int64_t j = 0; j < keys; ++j)
        s_col[j * rows_pad] =
            masked_add(s_col[j * rows_pad], widen<DType::F16>(load_element(m + j * stride)));
      return;
    }
    case DType::BF16: {
      const uint16_t* m = static_cast<const uint16_t*>(a.mask) + offset;
      for (int64_t j = 0; j < keys; ++j)
        s_col[j * rows_pad] =
            masked_add(s_col[j * rows_pad], widen<DType::BF16>(load_element(m + j * stride)));
      return;
    }
    case DType::Bool:
    case DType::I32:
      return;  // not reachable: a Bool mask has mask_kind Boolean, describe() rejects I32
  }
}

// ------------------------------------------------------------- workspace

struct Workspace {
  float* qt;     // dqk x rows_pad: Q^T * scale * log2 e
  float* kf;     // tile_keys x dqk_pad
  float* vf;     // tile_keys x dv_pad (columns >= dv zero)
  float* st;     // tile_keys x rows_pad: S^T, then P^T
  float* o;      // rows_pad x dv_pad: the accumulator
  float* m;      // rows_pad: running max (base 2)
  float* l;      // rows_pad: running sum
  float* alpha;  // rows_pad: per-tile rescale factor
  int64_t* vb;   // rows_pad: visible key range per row
  int64_t* ve;
};

inline Workspace carve(const FusedArgs& a, std::byte* raw) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(raw);
  float* p = reinterpret_cast<float*>(raw + ((64 - address % 64) % 64));
  Workspace w{};
  auto take = [&p](int64_t floats) {
    float* start = p;
    p += (floats + 15) / 16 * 16;  // keep every section 64-byte aligned
    return start;
  };
  w.qt = take(a.dqk * a.rows_pad);
  w.kf = take(a.tile_keys * a.dqk_pad);
  w.vf = take(a.tile_keys * a.dv_pad);
  w.st = take(a.tile_keys * a.rows_pad);
  w.o = take(a.rows_pad * a.dv_pad);
  w.m = take(a.rows_pad);
  w.l = take(a.rows_pad);
  w.alpha = take(a.rows_pad);
  w.vb = reinterpret_cast<int64_t*>(take(2 * a.rows_pad));
  w.ve = reinterpret_cast<int64_t*>(take(2 * a.rows_pad));
  return w;
}

// ------------------------------------------------------------- one item

// The rows of item `item`: row r is query i0 + r / nh of head h0 + r % nh.
struct ItemRows {
  int64_t b, g, h0, nh, i0, rows;
};

inline ItemRows item_rows(const FusedArgs& a, int64_t item) {
  // Heaviest query blocks first (causal), across all heads.
  const int64_t per_block = a.batch * a.heads_kv * a.head_chunks;
  const int64_t qblock = a.query_blocks - 1 - item / per_block;
  int64_t rest = item % per_block;
  const int64_t chunk = rest % a.head_chunks;
  rest /= a.head_chunks;
  ItemRows x;
  x.g = rest % a.heads_kv;
  x.b = rest / a.heads_kv;
  const int64_t group = a.heads_q / a.heads_kv;
  x.h0 = x.g * group + chunk * a.heads_per_tile;
  x.nh = imin(a.heads_per_tile, group - chunk * a.heads_per_tile);
  x.i0 = qblock * a.queries_per_tile;
  x.rows = imin(a.queries_per_tile, a.len_q - x.i0) * x.nh;
  return x;
}

// Writes row r of an item: m (running max, base 2) and l (running sum) over
// its visible keys, acc its unnormalized output; the sink joins the
// denominator, the LSE is computed in double.
// O = O * alpha + P . V over the keys each row sees (P != 0) only: the
// tiled product's slow twin, for tiles whose V holds NaN or infinity.
inline void pv_seen_keys(int64_t rows, float* o, int64_t dv_pad, const float* alpha,
                         const float* pt, int64_t rows_pad, const float* vf, int64_t keys) {
  for (int64_t r = 0; r < rows; ++r) {
    float* out = o + r * dv_pad;
    for (int64_t c = 0; c < dv_pad; ++c) out[c] *= alpha[r];
    for (int64_t j = 0; j < keys; ++j) {
      const float p = pt[j * rows_pad + r];
      if (p == 0.0f) continue;
      for (int64_t c = 0; c < dv_pad; ++c) out[c] += p * vf[j * dv_pad + c];
    }
  }
}

template <DType D>
void finalize_row(const FusedArgs& a, const ItemRows& x, int64_t r, float m, float l,
                  const float* acc) {
  using T = typename Storage<D>::type;
  const int64_t h = x.h0 + r % x.nh, i = x.i0 + r / x.nh;
  const double row_max = static_cast<double>(m) * kLn2;  // natural units; -inf stays
  const double sink = a.sinks ? static_cast<double>(load_element(a.sinks + h * a.sinks_stride))
                              : -std::numeric_limits<double>::infinity();
  const double top = (row_max > sink ? row_max : sink);
  double factor = 0.0, lse = -std::numeric_limits<double>::infinity();
  if (l != l) {  // a NaN or infinity the row used: NaN out and lse
    factor = lse = std::numeric_limits<double>::quiet_NaN();
  } else if (top != -std::numeric_limits<double>::infinity()) {
    const double keep = std::exp(row_max - top);  // 0 when no key was visible
    const double denominator = static_cast<double>(l) * keep + std::exp(sink - top);
    factor = keep / denominator;
    lse = top + std::log(denominator);
  }
  const float f = static_cast<float>(factor);
  T* dst =
      static_cast<T*>(a.out) + x.b * a.out_strides[0] + h * a.out_strides[1] + i * a.out_strides[2];
  const int64_t s3 = a.out_strides[3];
  if (factor == 0.0) {
    for (int64_t c = 0; c < a.dv; ++c) store_element(dst + c * s3, narrow<D>(0.0f));
  } else if (s3 == 1) {
    for (int64_t c = 0; c < a.dv; ++c) store_element(dst + c, narrow<D>(acc[c] * f));
  } else {
    for (int64_t c = 0; c < a.dv; ++c) store_element(dst + c * s3, narrow<D>(acc[c] * f));
  }
  if (a.lse)
    store_element(a.lse + x.b * a.lse_strides[0] + h * a.lse_strides[1] + i * a.lse_strides[2],
                  static_cast<float>(lse));
}

template <DType D>
void run_item(const FusedArgs& a, std::byte* raw, int64_t unit) {
  using T = typename Storage<D>::type;
  const Workspace w = carve(a, raw);
  const int64_t rp = a.rows_pad;
  const ItemRows x = item_rows(a, unit / a.key_splits);
  const int64_t split = unit % a.key_splits;
  const int64_t b = x.b, g = x.g, h0 = x.h0, nh = x.nh, i0 = x.i0, rows = x.rows;

  // Q^T, scaled into the base-2 domain; padding rows are zero.
  for (int64_t r = 0; r < rp; ++r) {
    float* __restrict col = w.qt + r;
    if (r >= rows) {
      for (int64_t d = 0; d < a.dqk; ++d) col[d * rp] = 0.0f;
      continue;
    }
    const int64_t h = h0 + r % nh, i = i0 + r / nh;
    const T* src =
        static_cast<const T*>(a.q) + b * a.q_strides[0] + h * a.q_strides[1] + i * a.q_strides[2];
    const int64_t s3 = a.q_strides[3];
    for (int64_t d = 0; d < a.dqk; ++d)
      col[d * rp] = widen<D>(load_element(src + d * s3)) * a.scale_log2;
  }

  // Visible key ranges of this sequence's keys; the item streams the union.
  const int64_t len_k = sequence_len_k(a.kv, b);
  int64_t k_begin = len_k, k_end = 0;      // union
  int64_t all_begin = 0, all_end = len_k;  // intersection
  for (int64_t r = 0; r < rows; ++r) {
    const KeyRange range = visible_keys(a.options, a.len_q, len_k, i0 + r / nh);
    w.vb[r] = range.begin;
    w.ve[r] = imax(range.begin, range.end);
    if (w.ve[r] > w.vb[r]) {
      k_begin = imin(k_begin, w.vb[r]);
      k_end = imax(k_end, w.ve[r]);
    }
    all_begin = imax(all_begin, w.vb[r]);
    all_end = imin(all_end, w.ve[r]);
  }
  if (a.key_splits > 1 && k_end > k_begin) {  // this unit's share of the union
    const int64_t per_split = (k_end - k_begin + a.key_splits - 1) / a.key_splits;
    k_begin += split * per_split;
    k_end = imin(k_end, k_begin + per_split);
  }

  for (int64_t r = 0; r < rp; ++r) {
    w.m[r] = kNegInf;
    w.l[r] = 0.0f;
  }
  for (int64_t e = 0; e < rows * a.dv_pad; ++e) w.o[e] = 0.0f;
  for (int64_t e = 0; e < a.tile_keys * a.dv_pad; ++e) w.vf[e] = 0.0f;

  const T* k_base = static_cast<const T*>(a.k);
  const T* v_base = static_cast<const T*>(a.v);

  for (int64_t k0 = k_begin; k0 < k_end; k0 += a.tile_keys) {
    const int64_t keys = imin(a.tile_keys, k_end - k0);

    // K and V rows of the tile to f32.
    for (int64_t j = 0; j < keys; ++j) {
      load_row<D>(k_base, key_row_offset(a.kv, a.k_roles, b, g, k0 + j), a.k_roles.col, a.dqk,
                  w.kf + j * a.dqk_pad);
      load_row<D>(v_base, key_row_offset(a.kv, a.v_roles, b, g, k0 + j), a.v_roles.col, a.dv,
                  w.vf + j * a.dv_pad);
    }

    // S^T = K . Q^T (base-2 scores).
    for (int64_t r0 = 0; r0 < rp; r0 += kChunk) {
      int64_t j0 = 0;
      for (; j0 + kBlockQK <= keys; j0 += kBlockQK)
        qk_block<kBlockQK>(w.kf + j0 * a.dqk_pad, a.dqk_pad, w.qt + r0, rp, a.dqk,
                           w.st + j0 * rp + r0);
      if (j0 < keys)
        qk_tail<kBlockQK - 1>(static_cast<int>(keys - j0), w.kf + j0 * a.dqk_pad, a.dqk_pad,
                              w.qt + r0, rp, a.dqk, w.st + j0 * rp + r0);
    }

    // The soft cap, on the base-2 scores of the real rows, before any mask.
    if (a.softcap_log2 > 0.0f) {
      const float cap = a.softcap_log2, inverse = 1.0f / a.softcap_log2;
      for (int64_t j = 0; j < keys; ++j) {
        float* __restrict s = w.st + j * rp;
        for (int64_t r = 0; r < rows; ++r) s[r] = cap * std::tanh(s[r] * inverse);
      }
    }

    // Masks: array mask, then the causal / window range where this tile is
    // not wholly visible to every row.
    if (a.mask_kind != MaskKind::None)
      for (int64_t r = 0; r < rows; ++r)
        apply_mask(a, b, h0 + r % nh, i0 + r / nh, k0, keys, w.st + r, rp);
    if (!(all_begin <= k0 && k0 + keys <= all_end)) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t lo = imin(imax(w.vb[r] - k0, 0), keys);
        const int64_t hi = imin(imax(w.ve[r] - k0, lo), keys);
        float* col = w.st + r;
        for (int64_t j = 0; j < lo; ++j) col[j * rp] = kNegInf;
        for (int64_t j = hi; j < keys; ++j) col[j * rp] = kNegInf;
      }
    }

    // Online softmax, vectorized over rows.
    {
      float* __restrict m = w.m;
      float* __restrict l = w.l;
      float* __restrict alpha = w.alpha;
      for (int64_t r = 0; r < rp; ++r) alpha[r] = m[r];  // the new max, for now
      for (int64_t j = 0; j < keys; ++j) {
        const float* __restrict s = w.st + j * rp;
        for (int64_t r = 0; r < rp; ++r) alpha[r] = s[r] > alpha[r] ? s[r] : alpha[r];
      }
      for (int64_t r = 0; r < rp; ++r) {
        const float new_max = alpha[r];
        alpha[r] = exp2_neg(m[r] - new_max);  // 0 while m was -inf (NaN -> 0 too)
        l[r] *= alpha[r];
        m[r] = new_max;
      }
      for (int64_t j = 0; j < keys; ++j) {
        float* __restrict s = w.st + j * rp;
        for (int64_t r = 0; r < rp; ++r) {
          // A NaN score (NaN in q or k of a key the row sees) stays NaN, to
          // reach the row's output and lse; exp2_neg alone would make it 0.
          const uint32_t nan = 0u - static_cast<uint32_t>(s[r] != s[r]);
          const float p = bits_as_float(float_as_bits(exp2_neg(s[r] - m[r])) | nan);
          s[r] = p;
          l[r] += p;
        }
      }
    }

    // O = O * alpha + P . V. A non-finite value in the tile's V would turn
    // the 0 of a key some row masks into NaN (0 * NaN) in the tiled product:
    // such tiles skip the keys a row does not see (P = 0), one row at a time.
    float probe = 0.0f;
    for (int64_t e = 0; e < keys * a.dv_pad; ++e) probe += w.vf[e] * 0.0f;  // NaN iff non-finite
    if (probe != probe) {
      pv_seen_keys(rows, w.o, a.dv_pad, w.alpha, w.st, rp, w.vf, keys);
      continue;
    }
    for (int64_t c0 = 0; c0 < a.dv_pad; c0 += kChunk) {
      int64_t r0 = 0;
      for (; r0 + kBlockPV <= rows; r0 += kBlockPV)
        pv_block<kBlockPV>(w.o + r0 * a.dv_pad + c0, a.dv_pad, w.alpha + r0, w.st + r0, rp,
                           w.vf + c0, keys);
      if (r0 < rows)
        pv_tail<kBlockPV - 1>(static_cast<int>(rows - r0), w.o + r0 * a.dv_pad + c0, a.dv_pad,
                              w.alpha + r0, w.st + r0, rp, w.vf + c0, keys);
    }
  }

  if (a.key_splits == 1) {
    for (int64_t r = 0; r < rows; ++r) finalize_row<D>(a, x, r, w.m[r], w.l[r], w.o + r * a.dv_pad);
    return;
  }
  // A split's partial: O unnormalized, with its running max and sum.
  float* part = a.partials + unit * fused_partial_floats(a);
  for (int64_t e = 0; e < rows * a.dv_pad; ++e) part[e] = w.o[e];
  for (int64_t r = 0; r < rows; ++r) {
    part[rp * a.dv_pad + r] = w.m[r];
    part[rp * a.dv_pad + rp + r] = w.l[r];
  }
}

// Merges the key splits of item `item` (every unit ran) and finalizes its
// rows. The merged O accumulates in split 0's partial.
template <DType D>
void combine_item(const FusedArgs& a, int64_t item) {
  const ItemRows x = item_rows(a, item);
  const int64_t rp = a.rows_pad, floats = fused_partial_floats(a);
  float* first = a.partials + item * a.key_splits * floats;
  for (int64_t r = 0; r < x.rows; ++r) {
    float top = kNegInf;
    for (int64_t s = 0; s < a.key_splits; ++s)
      top = max_float(top, first[s * floats + rp * a.dv_pad + r]);
    float* acc = first + r * a.dv_pad;
    float l = 0.0f;
    for (int64_t s = 0; s < a.key_splits; ++s) {
      const float* part = first + s * floats;
      // exp2_neg gives 0 for a split that saw no key (-inf - top), and NaN -> 0
      // when no split saw one (top -inf): such a row finalizes to zeros.
      const float weight = exp2_neg(part[rp * a.dv_pad + r] - top);
      l += part[rp * a.dv_pad + rp + r] * weight;
      const float* o = part + r * a.dv_pad;
      if (s == 0)
        for (int64_t c = 0; c < a.dv; ++c) acc[c] = o[c] * weight;
      else
        for (int64_t c = 0; c < a.dv; ++c) acc[c] += o[c] * weight;
    }
    finalize_row<D>(a, x, r, top, l, acc);
  }
}

// Calls f.template operator()<D>() for the element type of the call's
// tensors; Bool (rejected by validation) or an unknown value raises.
template <typename F>
void with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32:
      return f.template operator()<DType::F32>();
    case DType::F16:
      return f.template operator()<DType::F16>();
    case DType::BF16:
      return f.template operator()<DType::BF16>();
    case DType::Bool:
    case DType::I32:
      break;
  }
  throw Error("fsdpa: internal: the CPU fused kernel has no instance for dtype value " +
              std::to_string(static_cast<int>(dtype)));
}

inline void run_item_any(const FusedArgs& a, std::byte* workspace, int64_t unit) {
  with_dtype(a.dtype, [&]<DType D>() { run_item<D>(a, workspace, unit); });
}

inline void combine_item_any(const FusedArgs& a, int64_t item) {
  with_dtype(a.dtype, [&]<DType D>() { combine_item<D>(a, item); });
}

}  // namespace
}  // namespace fsdpa::detail::cpu

#endif  // FSDPA_FUSED_KERNEL_BODY
