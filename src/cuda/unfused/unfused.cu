// The CUDA unfused path: S = scale * Q K^T (cuBLAS, f32 scores), a
// masked-softmax kernel (soft cap, causal/window, array masks, sinks, LSE,
// fully masked rows) writing P in the input dtype, O = P V (cuBLAS). It
// materializes the scores: the A/B baseline and the rollback lever
// (Policy::Unfused). It does so for a chunk of query rows at a time, so its
// workspace stays under kChunkBudgetBytes plus cuBLAS's at any length.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/semantics.h"
#include "cuda/common/check.cuh"
#include "cuda/common/device.h"
#include "cuda/common/exact_row.cuh"
#include "cuda/common/params.h"
#include "cuda/common/softmax.cuh"
#include "cuda/unfused/unfused.h"

namespace fsdpa::detail::cuda {

namespace {

constexpr size_t kAlignment = 256;
// cuBLAS gets its workspace from ours, so a launch never allocates (and
// stays capturable in a CUDA graph).
constexpr size_t kCublasWorkspaceBytes = size_t{4} << 20;
constexpr int kSoftmaxThreads = 256;
// The scores and probabilities of one chunk of query rows: at most this many
// bytes, unless a single query row of a single (batch, head) needs more.
constexpr int64_t kChunkBudgetBytes = int64_t{768} << 20;
// (batch, head) matrices of one chunk at most: bounds the pointer arrays.
constexpr int64_t kChunkMatrices = 65536;

size_t align_up(size_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

// The work in chunks: `matrices` (batch, head) pairs x `rows` query rows
// each (the last chunk of either may be shorter).
struct Chunk {
  int64_t matrices = 1, rows = 1;
};

Chunk chunk_of(const Problem& p) {
  const int64_t matrices = p.batch * p.heads_q;
  const int64_t per_score =
      static_cast<int64_t>(sizeof(float) + (p.dtype == DType::F32 ? 0 : element_size(p.dtype)));
  const int64_t row_bytes = std::max<int64_t>(p.len_k, 1) * per_score;
  const int64_t rows_in_budget = std::max<int64_t>(kChunkBudgetBytes / row_bytes, 1);
  Chunk c;
  c.rows = std::max<int64_t>(std::min(p.len_q, rows_in_budget), 1);
  c.matrices = std::clamp<int64_t>(rows_in_budget / c.rows, 1, std::min(matrices, kChunkMatrices));
  return c;
}

struct Layout {
  size_t cublas = 0, pointers = 0, scores = 0, probabilities = 0, total = 0;
};

// [cuBLAS workspace][6 pointer arrays][f32 scores][P in the input dtype],
// each for one chunk (f32 inputs: P overwrites the scores in place).
Layout workspace_layout(const Problem& p) {
  const Chunk chunk = chunk_of(p);
  const size_t matrices = static_cast<size_t>(chunk.matrices);
  const size_t elements = matrices * static_cast<size_t>(chunk.rows) * static_cast<size_t>(p.len_k);
  Layout l;
  l.cublas = 0;
  l.pointers = align_up(kCublasWorkspaceBytes);
  l.scores = l.pointers + align_up(6 * matrices * sizeof(void*));
  l.probabilities = l.scores + align_up(elements * sizeof(float));
  l.total = p.dtype == DType::F32 ? l.probabilities
                                  : l.probabilities + align_up(elements * element_size(p.dtype));
  if (p.dtype == DType::F32) l.probabilities = l.scores;
  return l;
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(std::string("fsdpa: cuBLAS error in ") + call + ": " +
                    cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}

// One cuBLAS handle per (thread, device), created on first use.
cublasHandle_t cublas_handle(int device) {
  struct Handles {
    std::unordered_map<int, cublasHandle_t> by_device;
    ~Handles() {
      for (auto& entry : by_device) (void)cublasDestroy(entry.second);
    }
  };
  thread_local Handles handles;
  auto found = handles.by_device.find(device);
  if (found != handles.by_device.end()) return found->second;
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  handles.by_device.emplace(device, handle);
  return handle;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F32:
      return CUDA_R_32F;
    case DType::Bool:
    case DType::I32:
      break;
  }
  throw Error("fsdpa: internal: unfused path with dtype bool");
}

// A logical rows x cols matrix with element strides (row, col) as cuBLAS
// sees it: stored column-major either as X^T (col stride 1: "row major") or
// as X (row stride 1).
struct Operand {
  bool row_major = true;
  int64_t ld = 0;
};

bool describe_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                      Operand& operand) {
  const int64_t kIntMax = std::numeric_limits<int>::max();
  if (col_stride == 1 || cols <= 1) {
    operand.row_major = true;
    operand.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : row_stride;
    return operand.ld >= std::max<int64_t>(cols, 1) && operand.ld <= kIntMax;
  }
  if (row_stride == 1 || rows <= 1) {
    operand.row_major = false;
    operand.ld = cols <= 1 ? std::max<int64_t>(rows, 1) : col_stride;
    return operand.ld >= std::max<int64_t>(rows, 1) && operand.ld <= kIntMax;
  }
  return false;
}

Operand operand_or_throw(const char* name, const TensorView& t) {
  Operand operand;
  if (!describe_operand(t.sizes[2], t.sizes[3], t.strides[2], t.strides[3], operand))
    throw Unsupported(std::string("fsdpa: unfused cuda path: ") + name + " has row stride " +
                      std::to_string(t.strides[2]) + " and column stride " +
                      std::to_string(t.strides[3]) +
                      "; cuBLAS needs one of them to be 1 and the other at least the matching "
                      "size (and below 2^31)");
  return operand;
}

struct PointerArrays {
  const void** q;
  const void** k;
  const void** v;
  void** scores;
  void** probabilities;
  void** out;
};

// The matrices [matrix0, matrix0 + count) of a chunk, from query row row0.
struct PointerSources {
  const char* q;
  const char* k;
  const char* v;
  char* scores;
  char* probabilities;
  char* out;
  int64_t q_strides[3], k_strides[2], v_strides[2], out_strides[3];  // bytes: batch, head, row
  int64_t matrix_bytes_scores, matrix_bytes_probabilities;
  int64_t matrix0, row0;
  int heads_q, kv_group_size, count;
};

__global__ void build_pointers(PointerArrays a, PointerSources s) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= s.count) return;
  const int64_t matrix = s.matrix0 + i;
  const int64_t b = matrix / s.heads_q, h = matrix % s.heads_q, hk = h / s.kv_group_size;
  a.q[i] = s.q + b * s.q_strides[0] + h * s.q_strides[1] + s.row0 * s.q_strides[2];
  a.k[i] = s.k + b * s.k_strides[0] + hk * s.k_strides[1];
  a.v[i] = s.v + b * s.v_strides[0] + hk * s.v_strides[1];
  a.scores[i] = s.scores + i * s.matrix_bytes_scores;
  a.probabilities[i] = s.probabilities + i * s.matrix_bytes_probabilities;
  a.out[i] = s.out + b * s.out_strides[0] + h * s.out_strides[1] + s.row0 * s.out_strides[2];
}

template <typename T>
__device__ __forceinline__ T convert_probability(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else
    return __float2bfloat16_rn(x);
}

// Combines two (max, sum of exp(x - max)) pairs.
__device__ __forceinline__ void combine(float& max, float& sum, float other_max, float other_sum) {
  const float m = fmaxf(max, other_max);
  if (m == kMinusInf) return;
  sum = sum * expf(max - m) + other_sum * expf(other_max - m);
  max = m;
}

// The call (params.h) and one chunk's scores.
struct SoftmaxParams : AttentionParams {
  float* scores = nullptr;        // [chunk matrices, chunk rows, len_k], already scaled
  void* probabilities = nullptr;  // same shape, input dtype (aliases scores for f32)
  int64_t matrix0 = 0, row0 = 0;  // the chunk's first (batch, head) matrix and query row
  int64_t chunk_rows = 0;         // the row stride of a matrix in scores (rows of a full chunk)
  int64_t rows = 0;               // query rows of each matrix in this chunk
};

// One block per query row of the chunk: soft cap, mask, (max, sum) in one
// pass, P in a second.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads) masked_softmax(const SoftmaxParams p) {
  const MaskSemantics& sem = p.semantics;
  const int64_t len_k = sem.len_k;
  const int64_t local_matrix = blockIdx.x / p.rows, local_row = blockIdx.x % p.rows;
  const int64_t row_id = local_matrix * p.chunk_rows + local_row;
  const int64_t matrix = p.matrix0 + local_matrix, row = p.row0 + local_row;
  const int64_t batch = matrix / p.heads_q, head = matrix % p.heads_q;
  float* scores = p.scores + row_id * len_k;
  T* probabilities = static_cast<T*>(p.probabilities) + row_id * len_k;
  const DeviceKeyRange range = visible_key_range(sem, row);
  const int64_t mask_row = mask_row_offset(sem, batch, head, row);

  const float cap = sem.softcap, inverse_cap = 1.0f / cap;
  float max = kMinusInf, sum = 0.0f;
  for (int64_t j = threadIdx.x; j < len_k; j += kSoftmaxThreads) {
    float s = kMinusInf;
    if (j >= range.begin && j < range.end) {
      s = scores[j];
      if (cap > 0.0f) s = soft_cap(s, cap, inverse_cap);
      if (sem.mask_kind != 0)
        s += load_mask_value(sem.mask, sem.mask_dtype, mask_row + j * sem.mask_strides[3]);
    }
    scores[j] = s;
    combine(max, sum, s, 1.0f);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    combine(max, sum, other_max, other_sum);
  }
  __shared__ float warp_max[kSoftmaxThreads / 32], warp_sum[kSoftmaxThreads / 32];
  __shared__ float row_max, row_inverse;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) {
    warp_max[warp] = max;
    warp_sum[warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = kMinusInf, l = 0.0f;
    for (int w = 0; w < kSoftmaxThreads / 32; ++w) combine(m, l, warp_max[w], warp_sum[w]);
    if (sem.sinks != nullptr) combine(m, l, sem.sinks[head * sem.sink_stride], 1.0f);
    const bool empty = m == kMinusInf;
    row_max = empty ? 0.0f : m;
    row_inverse = empty ? 0.0f : 1.0f / l;
    if (p.lse != nullptr)
      p.lse[batch * p.lse_strides.batch + head * p.lse_strides.head + row * p.lse_strides.row] =
          empty ? kMinusInf : m + logf(l);
  }
  __syncthreads();
  const float m = row_max, inverse = row_inverse;
  for (int64_t j = threadIdx.x; j < len_k; j += kSoftmaxThreads)
    probabilities[j] = convert_probability<T>(expf(scores[j] - m) * inverse);
}

template <typename T>
__global__ void zero_output(T* out, int64_t heads, int64_t len_q, int64_t head_dim, int64_t s0,
                            int64_t s1, int64_t s2, int64_t s3, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % head_dim, r = (i / head_dim) % len_q, h = (i / head_dim / len_q) % heads,
                  b = i / head_dim / len_q / heads;
    out[b * s0 + h * s1 + r * s2 + d * s3] = convert_probability<T>(0.0f);
  }
}

// The NaN/Inf policy (cuda/common/exact_row.cuh) behind the GEMMs: a masked
// key's probability 0 times a NaN or infinite v makes a row's output NaN,
// an additive -inf plus a NaN score its lse. One warp per output row checks
// the row's out and lse and recomputes a row with a non-finite value.
struct RepairParams : AttentionParams {
  int64_t rows = 0;  // batch * heads_q * len_q
};

constexpr int kRepairWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kRepairWarps * 32, 1)
    repair_nonfinite_rows(const RepairParams p) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * kRepairWarps + threadIdx.x / 32;
  if (id >= p.rows) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = static_cast<int>(id % p.len_q);
  const int head = static_cast<int>(id / p.len_q % p.heads_q);
  const int batch = static_cast<int>(id / p.len_q / p.heads_q);
  const int kv_head = head / p.kv_group_size;
  T* out = static_cast<T*>(p.out) + batch * p.out_strides.batch + head * p.out_strides.head +
           row * p.out_strides.row;
  float* lse = p.lse != nullptr ? p.lse + batch * p.lse_strides.batch + head * p.lse_strides.head +
                                      row * p.lse_strides.row
                                : nullptr;
  bool bad = lane == 0 && lse != nullptr && *lse != *lse;
  for (int c = lane; c < p.head_dim_v; c += 32) bad |= non_finite(to_float(out[c]));
  if (!__any_sync(0xffffffffu, bad)) return;
  const DenseRowOperands<T> x{
      static_cast<const T*>(p.q) + batch * p.q_strides.batch + head * p.q_strides.head +
          row * p.q_strides.row,
      static_cast<const T*>(p.k) + batch * p.k_strides.outer + kv_head * p.k_strides.head,
      static_cast<const T*>(p.v) + batch * p.v_strides.outer + kv_head * p.v_strides.head,
      p.q_strides.col,
      p.k_strides.row,
      p.k_strides.col,
      p.v_strides.row,
      p.v_strides.col};
  exact_row<T, 256>(x, p.semantics, batch, head, row, p.head_dim_qk, p.scale_log2, out,
                    p.head_dim_v, lse);
}

template <typename T>
void launch_repair(const Plan& plan, const Tensors& t, cudaStream_t stream) {
  const Problem& problem = plan.problem;
  RepairParams p;
  static_cast<AttentionParams&>(p) = make_attention_params(plan, t);
  p.rows = problem.batch * problem.heads_q * problem.len_q;
  prepare_launch(reinterpret_cast<const void*>(&repair_nonfinite_rows<T>), kRepairWarps * 32, 0,
                 "cuda_unfused_cublas (non-finite rows)");
  repair_nonfinite_rows<T><<<static_cast<unsigned>((p.rows + kRepairWarps - 1) / kRepairWarps),
                             kRepairWarps * 32, 0, stream>>>(p);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_softmax(const SoftmaxParams& params, int64_t rows, cudaStream_t stream) {
  if (rows == 0) return;
  prepare_launch(reinterpret_cast<const void*>(&masked_softmax<T>), kSoftmaxThreads, 0,
                 "cuda_unfused_cublas (softmax)");
  masked_softmax<T><<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(params);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_zero(const Problem& problem, const Tensors& t, cudaStream_t stream) {
  const int64_t count = problem.batch * problem.heads_q * problem.len_q * problem.head_dim_v;
  if (count == 0) return;
  const int64_t blocks = std::min<int64_t>((count + 255) / 256, 65535);
  prepare_launch(reinterpret_cast<const void*>(&zero_output<T>), 256, 0,
                 "cuda_unfused_cublas (zero output)");
  zero_output<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<T*>(t.out.data), problem.heads_q, problem.len_q, problem.head_dim_v,
      t.out.strides[0], t.out.strides[1], t.out.strides[2], t.out.strides[3], count);
  FSDPA_CUDA_CHECK(cudaGetLastError());
}

// Calls f.template operator()<T>() for the storage type of the call's dtype.
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F16:
      return f.template operator()<__half>();
    case DType::BF16:
      return f.template operator()<__nv_bfloat16>();
    case DType::F32:
      return f.template operator()<float>();
    case DType::Bool:
    case DType::I32:
      break;
  }
  throw Error(std::string("fsdpa: internal: unfused path for dtype ") + to_string(dtype));
}

}  // namespace

Verdict unfused_supports(const Problem& p, const Options&) {
  if (Verdict dense = dense_kv_only(p); !dense.ok) return dense;
  if (!p.matrices_blas_compatible)
    return Verdict::no(
        "cuBLAS needs each [L, D] matrix of q, k, v with stride 1 in one dim and the other "
        "stride at least that dim's size, and out with stride 1 in its last dim");
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (p.batch * p.heads_q > kIntMax || p.len_q > kIntMax || p.len_k > kIntMax ||
      p.batch * p.heads_q * p.len_q > kIntMax)
    return Verdict::no("batch*heads_q=" + std::to_string(p.batch * p.heads_q) +
                       ", len_q=" + std::to_string(p.len_q) + ", len_k=" + std::to_string(p.len_k) +
                       ": cuBLAS and the softmax grid take 32-bit sizes");
  return Verdict::yes();
}

void unfused_configure(const Problem& problem, Plan& plan) {
  plan.workspace_bytes = workspace_layout(problem).total;
  plan.num_kv_splits = 1;
}

void unfused_launch(const Plan& plan, const Tensors& t, void* workspace, void* stream_pointer) {
  const Problem& p = plan.problem;
  const int64_t matrices = p.batch * p.heads_q;
  const int64_t rows = matrices * p.len_q;
  if (rows == 0) return;
  const auto stream = static_cast<cudaStream_t>(stream_pointer);
  const Layout layout = workspace_layout(p);
  const Chunk chunk = chunk_of(p);
  char* base = static_cast<char*>(workspace);
  float* scores = reinterpret_cast<float*>(base + layout.scores);
  void* probabilities = base + layout.probabilities;
  const size_t elt = element_size(p.dtype);

  const bool scores_gemm = p.len_k > 0 && p.head_dim_qk > 0;
  const bool output_gemm = p.len_k > 0 && p.head_dim_v > 0;
  Operand q_op, k_op, v_op, out_op;
  if (scores_gemm) {
    q_op = operand_or_throw("q", t.q);
    k_op = operand_or_throw("k", t.k);
  }
  if (output_gemm) {
    v_op = operand_or_throw("v", t.v);
    out_op = operand_or_throw("out", t.out);
    if (!out_op.row_major)
      throw Unsupported("fsdpa: unfused cuda path: out must have column stride 1, got " +
                        std::to_string(t.out.strides[3]));
  }

  // cuBLAS state and the per-matrix pointer arrays (one chunk's), when a GEMM runs.
  cublasHandle_t handle = nullptr;
  PointerArrays arrays{};
  PointerSources sources{};
  cudaDataType_t type = cuda_type(p.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const float alpha_scores = static_cast<float>(plan.scale), one = 1.0f, zero = 0.0f;
  if (scores_gemm || output_gemm) {
    int device = 0;
    FSDPA_CUDA_CHECK(cudaGetDevice(&device));
    auto** slots = reinterpret_cast<void**>(base + layout.pointers);
    const int64_t m = chunk.matrices;
    arrays.q = const_cast<const void**>(slots);
    arrays.k = const_cast<const void**>(slots + m);
    arrays.v = const_cast<const void**>(slots + 2 * m);
    arrays.scores = slots + 3 * m;
    arrays.probabilities = slots + 4 * m;
    arrays.out = slots + 5 * m;
    sources.q = static_cast<const char*>(t.q.data);
    sources.k = static_cast<const char*>(t.k.data);
    sources.v = static_cast<const char*>(t.v.data);
    sources.scores = reinterpret_cast<char*>(scores);
    sources.probabilities = static_cast<char*>(probabilities);
    sources.out = static_cast<char*>(t.out.data);
    for (int d = 0; d < 3; ++d) {
      sources.q_strides[d] = t.q.strides[d] * static_cast<int64_t>(elt);
      sources.out_strides[d] = t.out.strides[d] * static_cast<int64_t>(elt);
    }
    for (int d = 0; d < 2; ++d) {
      sources.k_strides[d] = t.k.strides[d] * static_cast<int64_t>(elt);
      sources.v_strides[d] = t.v.strides[d] * static_cast<int64_t>(elt);
    }
    sources.matrix_bytes_scores = chunk.rows * p.len_k * static_cast<int64_t>(sizeof(float));
    sources.matrix_bytes_probabilities = chunk.rows * p.len_k * static_cast<int64_t>(elt);
    sources.heads_q = static_cast<int>(p.heads_q);
    sources.kv_group_size = static_cast<int>(p.heads_q / p.heads_kv);
    prepare_launch(reinterpret_cast<const void*>(&build_pointers), 256, 0,
                   "cuda_unfused_cublas (pointers)");
    handle = cublas_handle(device);
    check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
    check_cublas(cublasSetWorkspace(handle, base + layout.cublas, kCublasWorkspaceBytes),
                 "cublasSetWorkspace");
    if (p.dtype == DType::F32 && plan.options.allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }

  SoftmaxParams softmax;
  static_cast<AttentionParams&>(softmax) = make_attention_params(plan, t);
  softmax.scores = scores;
  softmax.probabilities = probabilities;
  softmax.chunk_rows = chunk.rows;

  // Chunk by chunk, in stream order: the next chunk's pointers and scores
  // reuse this one's workspace only after its GEMMs and softmax ran.
  for (int64_t matrix0 = 0; matrix0 < matrices; matrix0 += chunk.matrices)
    for (int64_t row0 = 0; row0 < p.len_q; row0 += chunk.rows) {
      const int64_t count = std::min(chunk.matrices, matrices - matrix0);
      const int64_t chunk_len_q = std::min(chunk.rows, p.len_q - row0);
      if (scores_gemm || output_gemm) {
        sources.matrix0 = matrix0;
        sources.row0 = row0;
        sources.count = static_cast<int>(count);
        build_pointers<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(arrays,
                                                                                       sources);
        FSDPA_CUDA_CHECK(cudaGetLastError());
      }
      if (scores_gemm) {
        // Column-major view: S^T [Lk x Lq] = K [Lk x Dqk] * Q^T [Dqk x Lq].
        check_cublas(cublasGemmBatchedEx(handle, k_op.row_major ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         q_op.row_major ? CUBLAS_OP_N : CUBLAS_OP_T,
                                         static_cast<int>(p.len_k), static_cast<int>(chunk_len_q),
                                         static_cast<int>(p.head_dim_qk), &alpha_scores, arrays.k,
                                         type, static_cast<int>(k_op.ld), arrays.q, type,
                                         static_cast<int>(q_op.ld), &zero, arrays.scores,
                                         CUDA_R_32F, static_cast<int>(p.len_k),
                                         static_cast<int>(count), compute, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmBatchedEx(scores)");
      } else if (p.len_k > 0) {
        // No q.k to compute (Dqk == 0): every visible score is 0.
        FSDPA_CUDA_CHECK(cudaMemsetAsync(
            scores, 0, static_cast<size_t>(count * chunk.rows * p.len_k) * sizeof(float), stream));
      }
      softmax.matrix0 = matrix0;
      softmax.row0 = row0;
      softmax.rows = chunk_len_q;
      with_type(p.dtype,
                [&]<typename T>() { launch_softmax<T>(softmax, count * chunk_len_q, stream); });
      if (output_gemm) {
        // Column-major view: O^T [Dv x Lq] = V^T [Dv x Lk] * P^T [Lk x Lq].
        check_cublas(cublasGemmBatchedEx(handle, v_op.row_major ? CUBLAS_OP_N : CUBLAS_OP_T,
                                         CUBLAS_OP_N, static_cast<int>(p.head_dim_v),
                                         static_cast<int>(chunk_len_q), static_cast<int>(p.len_k),
                                         &one, arrays.v, type, static_cast<int>(v_op.ld),
                                         arrays.probabilities, type, static_cast<int>(p.len_k),
                                         &zero, arrays.out, type, static_cast<int>(out_op.ld),
                                         static_cast<int>(count), compute, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmBatchedEx(output)");
      }
    }
  // Without the second GEMM (Lk == 0 or Dv == 0) nothing writes out: zero it.
  if (!output_gemm) with_type(p.dtype, [&]<typename T>() { launch_zero<T>(p, t, stream); });
  with_type(p.dtype, [&]<typename T>() { launch_repair<T>(plan, t, stream); });
}

}  // namespace fsdpa::detail::cuda
