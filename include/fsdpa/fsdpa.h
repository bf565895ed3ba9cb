// fsdpa: fused scaled-dot-product attention for every head dimension.
//
// The contract is docs/design.md; this header is its C++ form.
//
//   q   [B, Hq,  Lq, Dqk]        k [B, Hkv, Lk, Dqk]        v [B, Hkv, Lk, Dv]
//   out [B, Hq,  Lq, Dv ] (written, never read)
//   lse [B, Hq,  Lq] float32 (optional, written)
//   mask [B|1, Hq|1, Lq, Lk] additive (f16/bf16/f32) or boolean (true = keep)
//   sinks [Hq] float32
//
// A paged KV cache: k [num_pages, page_size, Hkv, Dqk], v [num_pages,
// page_size, Hkv, Dv] page pools with block_table [B, max_pages] int32; key j
// of sequence b is row j % page_size of page block_table[b, j / page_size].
// seq_lens_k [B] int32 (paged or dense): sequence b has that many keys.
//
// out_i = sum_j softmax_j(cap(scale * q_i . k_j) + mask_ij) v_j (cap: the optional
// soft cap c * tanh(x / c)), with causal and
// sliding-window masking, sinks in the denominator, fully masked rows = 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>

namespace fsdpa {

// ---------------------------------------------------------------- errors

// Every message starts with "fsdpa: ".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Bad input: names the argument, the expected and the actual value.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
// No kernel can serve the request (ForceFused without a fused kernel, a
// backend that is not built): names the constraint, allowed and actual value.
class Unsupported : public Error {
 public:
  using Error::Error;
};
// A CUDA call failed: names the call.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// --------------------------------------------------------------- tensors

// I32: the block table and the sequence lengths of a paged or ragged call only.
enum class DType : uint8_t { F16 = 0, BF16 = 1, F32 = 2, Bool = 3, I32 = 4 };
enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
};

inline constexpr int kMaxRank = 4;

// A strided view of memory owned by the caller. Strides are in elements.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device{};
  int rank = 0;
  std::array<int64_t, kMaxRank> sizes{};
  std::array<int64_t, kMaxRank> strides{};
};

// Row-major (C-contiguous) view.
TensorView contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                           Device device = {});
// View with explicit strides (elements).
TensorView strided_view(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                        std::initializer_list<int64_t> strides, Device device = {});

const char* to_string(DType dtype);
const char* to_string(DeviceType type);
size_t element_size(DType dtype);

// --------------------------------------------------------------- options

// Which diagonal causal masking is anchored to. BottomRight (FlashAttention
// >= 2.1, MLX): query i sees keys j <= i + (Lk - Lq). TopLeft: j <= i.
enum class CausalAlign : uint8_t { BottomRight = 0, TopLeft = 1 };

enum class Policy : uint8_t {
  Auto = 0,        // the fastest correct path; unfused only where nothing fused can serve
  ForceFused = 1,  // never fall back: raise Unsupported instead
  Unfused = 2,     // the materializing path (GPU: GEMMs + softmax; CPU: float64 reference)
};

struct Options {
  // Defaults to 1/sqrt(Dqk). Must be finite, > 0 and at most FLT_MAX / log2(e)
  // (~2.36e38: the kernels scale scores into the exp2 domain in float32).
  std::optional<double> scale;
  bool causal = false;
  CausalAlign causal_align = CausalAlign::BottomRight;
  // Sliding window: key j is also masked when j < i + offset - window_left,
  // with offset = Lk - Lq (BottomRight) or 0 (TopLeft). Must be >= 0.
  std::optional<int64_t> window_left;
  // Unset: the environment variable FSDPA_POLICY (auto|fused|unfused), else Auto.
  std::optional<Policy> policy;
  // f32 inputs on the GPU may use TF32 tensor cores (~1e-3 relative error).
  bool allow_tf32 = false;
  // Logit soft cap (Gemma 2): when > 0, s = softcap * tanh(s / softcap) after
  // the scale, before masks. 0: none. Must be finite, >= 0 and at most
  // FLT_MAX / log2(e), like the scale.
  double softcap = 0.0;
};

// The tensors of one call. out and lse are written; everything else is read.
struct Tensors {
  TensorView q, k, v, out;
  std::optional<TensorView> mask;   // [B|1, Hq|1, Lq, Lk]; Bool = keep, else additive
  std::optional<TensorView> sinks;  // [Hq] f32
  std::optional<TensorView> lse;    // [B, Hq, Lq] f32
  // A paged KV cache: k and v are page pools [num_pages, page_size, Hkv, D]
  // and key j of sequence b is row j % page_size of page
  // block_table[b, j / page_size]; the key capacity Lk is max_pages *
  // page_size. Ids of the pages a sequence uses must be in [0, num_pages).
  std::optional<TensorView> block_table;  // [B, max_pages] i32
  // Keys per sequence (paged or dense k/v): sequence b sees keys
  // [0, seq_lens_k[b]), each in [0, Lk]; causal alignment and windows use
  // that length. Absent: every sequence has Lk keys.
  std::optional<TensorView> seq_lens_k;  // [B] i32
  // Where the block table and the lengths are in host memory, describe()
  // checks every id and length a call uses; on the GPU they are read by the
  // kernels, which clamp an id into the pool and a length into [0, Lk]
  // rather than read outside the tensors.
};

// --------------------------------------------------------------- planning

enum class MaskKind : uint8_t { None = 0, Additive = 1, Boolean = 2 };

// The shape and layout facts that select a kernel.
struct Problem {
  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t len_q = 0;
  int64_t len_k = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  DType dtype = DType::F16;
  Device device{};
  MaskKind mask = MaskKind::None;
  DType mask_dtype = DType::F32;  // meaningful when mask != None
  bool has_sinks = false;
  bool has_lse = false;
  // Bytes: the largest of 16, 8, 4, 2 and 1 that divides the base address and
  // every batch, head and row stride (in bytes) of q, k, v and out, i.e. the
  // widest access every row start allows (TMA and 16-byte copies need 16);
  // 0 when a last dimension of theirs does not have stride 1.
  int row_alignment = 16;
  // Each [L, D] matrix of q, k and v has stride 1 in one of its two dims and
  // the other stride at least the size of that dim, and out has stride 1 in
  // its last dim: the layouts a BLAS GEMM takes (the unfused GPU path).
  bool matrices_blas_compatible = true;
  // v is a view of the first Dv columns of k (MLA absorbed decode).
  bool v_aliases_k = false;
  // Paged KV cache (Tensors::block_table): the rows per page (0: dense k/v)
  // and the pool's pages; len_k is then the table's capacity in keys.
  int64_t page_size = 0;
  int64_t num_pages = 0;
  // Per-sequence key lengths (Tensors::seq_lens_k) are given.
  bool has_seq_lens_k = false;
};

// Validates the tensors and options and derives the Problem.
// Throws InvalidArgument naming the first bad argument, a tensor spanning
// more than 2^52 bytes (element count or extent) among them.
Problem describe(const Tensors& tensors, const Options& options = {});

enum class Backend : uint8_t { CPU = 0, CUDA = 1 };
enum class Path : uint8_t { FusedPrefill = 0, FusedDecode = 1, Unfused = 2 };

const char* to_string(Backend backend);
const char* to_string(Path path);
const char* to_string(Policy policy);

// What will run, as decided by the selection table.
struct Plan {
  Problem problem;
  Options options;               // as given
  Policy policy = Policy::Auto;  // resolved (options, FSDPA_POLICY, default)
  double scale = 0.0;            // resolved
  Backend backend = Backend::CPU;
  Path path = Path::Unfused;
  std::string kernel;
  int64_t head_dim_qk_bucket = 0;  // compiled head-dim bucket (0 where none)
  int64_t head_dim_v_bucket = 0;
  // Work done over work needed: (bucket_qk + bucket_v) * num_v_slices / (Dqk + Dv)
  // where every column slice computes q.k again, (bucket_qk + bucket_v *
  // num_v_slices) / (Dqk + Dv) where the slices share it.
  double pad_ratio = 1.0;
  int64_t tile_q = 0;
  int64_t tile_k = 0;
  // How the kernel reads the rows of q, k and v for the planned layout (the
  // CUDA fused rows, by Problem::row_alignment; empty for the others).
  std::string loads;
  int64_t num_kv_splits = 1;
  // CUDA decode of a batch with per-sequence lengths (internal): the splits
  // a sequence of the batch's mean length takes (0 where the grid is every
  // sequence's num_kv_splits splits).
  int64_t kv_split_slots = 0;
  // Fused prefill with Dv above one warp's registers (256): the output
  // columns in this many slices, each of head_dim_v_bucket columns. The
  // mma.sync kernel computes two slices in one block, q.k once for both,
  // where that block's tiles fit the device's shared memory; otherwise each
  // slice is a block of its own that computes q.k again.
  int64_t num_v_slices = 1;
  int num_threads = 1;  // CPU backend
  size_t workspace_bytes = 0;
  std::string fallback_reason;  // why Auto did not take a fused path; empty otherwise
  int table_row = -1;           // selection-table row (internal)
  // The compiled kernel instance the row chose (internal: an opaque launch
  // function of its family; null for rows without generated instances). The
  // launch calls it, without looking the instance up again.
  void (*instance)() = nullptr;

  // Multi-line human-readable description.
  std::string explain() const;
};

// Chooses the kernel for a problem. Throws Unsupported when the policy cannot
// be honoured (ForceFused without a fused kernel, a backend not built).
Plan plan(const Problem& problem, const Options& options = {});

// Launches the planned kernel. Checks that the tensors match the plan; no
// allocation, no host synchronization on the GPU. workspace must hold
// plan.workspace_bytes (nullptr when that is 0), 16-byte aligned for a CUDA
// plan. stream is a cudaStream_t for CUDA plans (nullptr = default stream)
// and must be nullptr for CPU plans.
void run(const Plan& plan, const Tensors& tensors, void* workspace = nullptr,
         size_t workspace_bytes = 0, void* stream = nullptr);

// describe + plan + allocate workspace + run (+ free). On the GPU the
// workspace is freed stream-ordered; the call does not synchronize.
void attention(const Tensors& tensors, const Options& options = {}, void* stream = nullptr);

// Human-readable support matrix derived from the selection table.
std::string support_matrix();

// Library version string.
const char* version();

}  // namespace fsdpa
