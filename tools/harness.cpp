#include "harness.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/semantics.h"
#include "core/tensor.h"
#include "cpu/cpu.h"
#include "select/table.h"
#include "sgemm_baseline.h"
#include "usage_error.h"

#if FSDPA_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/common/device.h"
#endif

namespace fsdpa::tool {

double median(std::vector<double> samples) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

#if FSDPA_WITH_CUDA
void cuda_check(int status, const std::string& call) {
  if (status == cudaSuccess) return;
  const auto error = static_cast<cudaError_t>(status);
  throw DeviceError("fsdpa: CUDA error in " + call + ": " + cudaGetErrorName(error) + " (" +
                    cudaGetErrorString(error) + ")");
}
#endif

namespace {

// Work budgets of the float64 reference, in multiply-adds (it runs one core,
// roughly 1e8-3e8 per second).
constexpr double kCheckBudget = 1e8;    // the error sample
constexpr double kUnfusedBudget = 4e7;  // the CPU unfused (reference) timing sample
constexpr double kSgemmBudget = 4e9;    // the CPU sgemm baseline's timing sample
// LSE is accumulated in float32 by every path: absolute error allowed.
constexpr double kLseTolerance = 1e-3;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// ------------------------------------------------------------- memory

// Bytes on a device: host memory (64-byte aligned) for the CPU, cudaMalloc
// for CUDA. Never null, even for 0 bytes.
class Memory {
 public:
  Memory() = default;
  Memory(size_t bytes, Device device) : bytes_(bytes), device_(device) {
    const size_t size = round_up(std::max<size_t>(bytes, 1), 64);
    if (device.type == DeviceType::CPU) {
      data_ = std::aligned_alloc(64, size);
      if (data_ == nullptr) throw std::bad_alloc();
      return;
    }
#if FSDPA_WITH_CUDA
    cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
    cuda_check(cudaMalloc(&data_, size), "cudaMalloc(" + std::to_string(size) + " bytes)");
#else
    throw Unsupported("fsdpa: the CUDA backend is not built into this library");
#endif
  }
  ~Memory() { release(); }
  Memory(Memory&& other) noexcept { *this = std::move(other); }
  Memory& operator=(Memory&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      device_ = other.device_;
    }
    return *this;
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    if (device_.type == DeviceType::CPU) {
      std::free(data_);
    } else {
#if FSDPA_WITH_CUDA
      (void)cudaFree(data_);
#endif
    }
    data_ = nullptr;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
};

// Copies between a host Memory and a device Memory of the same size.
void upload(const Memory& host, const Memory& device) {
#if FSDPA_WITH_CUDA
  cuda_check(cudaMemcpy(device.data(), host.data(), host.bytes(), cudaMemcpyHostToDevice),
             "cudaMemcpy(host to device)");
#else
  (void)host;
  (void)device;
#endif
}

void download(const Memory& device, const Memory& host) {
#if FSDPA_WITH_CUDA
  cuda_check(cudaMemcpy(host.data(), device.data(), host.bytes(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(device to host)");
#else
  (void)host;
  (void)device;
#endif
}

// Fills with 0xff bytes: NaN in f16, bf16 and f32.
void poison(const Memory& memory, Device device) {
  if (device.type == DeviceType::CPU) {
    std::memset(memory.data(), 0xff, memory.bytes());
    return;
  }
#if FSDPA_WITH_CUDA
  cuda_check(cudaMemset(memory.data(), 0xff, memory.bytes()), "cudaMemset");
#endif
}

// ------------------------------------------------------------- random

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Runs body(begin, end, chunk_seed) over [0, count) in chunks, on all cores.
void parallel_chunks(size_t count, uint64_t seed,
                     const std::function<void(size_t, size_t, uint64_t)>& body) {
  constexpr size_t kChunk = size_t{1} << 20;
  const size_t chunks = (count + kChunk - 1) / kChunk;
  const size_t workers = std::min<size_t>(
      chunks, std::max<size_t>(1, static_cast<size_t>(std::thread::hardware_concurrency())));
  auto work = [&](size_t worker) {
    for (size_t c = worker; c < chunks; c += workers) {
      uint64_t state = seed ^ (0xd1b54a32d192ed03ull * (c + 1));
      body(c * kChunk, std::min(count, (c + 1) * kChunk), splitmix64(state));
    }
  };
  if (workers <= 1) {
    if (chunks == 1) work(0);
    return;
  }
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
  work(0);
  for (std::thread& t : threads) t.join();
}

// Uniform in [lo, hi) (24-bit grid), stored in `dtype`.
void fill_uniform(const Memory& memory, DType dtype, size_t count, uint64_t seed, float lo,
                  float hi) {
  parallel_chunks(count, seed, [&](size_t begin, size_t end, uint64_t chunk_seed) {
    uint64_t state = chunk_seed;
    for (size_t i = begin; i < end; ++i) {
      const float u = static_cast<float>(splitmix64(state) >> 40) * 0x1p-24f;
      detail::store_from_float(memory.data(), dtype, static_cast<int64_t>(i), lo + (hi - lo) * u);
    }
  });
}

void fill_bool(const Memory& memory, size_t count, uint64_t seed, double keep) {
  parallel_chunks(count, seed, [&](size_t begin, size_t end, uint64_t chunk_seed) {
    uint64_t state = chunk_seed;
    bool* data = static_cast<bool*>(memory.data());
    for (size_t i = begin; i < end; ++i)
      data[i] = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53 < keep;
  });
}

// ------------------------------------------------------------- views

struct Pointers {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;  // unused when v aliases k
  void* out = nullptr;
  void* mask = nullptr;
  void* sinks = nullptr;
  void* lse = nullptr;
  void* table = nullptr;  // block_table (paged)
  void* lens = nullptr;   // seq_lens_k (ragged)
};

struct ByteSizes {
  size_t q = 0, k = 0, v = 0, out = 0, mask = 0, sinks = 0, lse = 0, table = 0, lens = 0;
};

DType mask_dtype(const CaseSpec& c) { return c.mask == MaskKind::Boolean ? DType::Bool : c.dtype; }

size_t count_of(std::initializer_list<int64_t> sizes) {
  size_t n = 1;
  for (int64_t s : sizes) n *= static_cast<size_t>(s);
  return n;
}

// Elements between rows of a [B, H, L, D] tensor: D, or D rounded up to 16
// bytes with pad_rows.
int64_t row_stride(const CaseSpec& c, int64_t dim) {
  if (!c.pad_rows) return dim;
  const int64_t per_16_bytes =
      std::max<int64_t>(1, 16 / static_cast<int64_t>(element_size(c.dtype)));
  return (dim + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
}

ByteSizes byte_sizes(const CaseSpec& c) {
  const size_t e = element_size(c.dtype);
  const int64_t qk = row_stride(c, c.head_dim_qk), v = row_stride(c, c.head_dim_v);
  ByteSizes s;
  s.q = count_of({c.batch, c.heads_q, c.len_q, qk}) * e;
  s.k = count_of({c.batch, c.heads_kv, c.key_capacity(), qk}) * e;
  s.v = c.v_aliases_k ? 0 : count_of({c.batch, c.heads_kv, c.key_capacity(), v}) * e;
  s.table = count_of({c.batch, c.pages_per_sequence()}) * sizeof(int32_t);
  if (!c.seq_lens.empty()) s.lens = count_of({c.batch}) * sizeof(int32_t);
  s.out = count_of({c.batch, c.heads_q, c.len_q, v}) * e;
  if (c.mask != MaskKind::None)
    s.mask = count_of({c.len_q, c.key_capacity()}) * element_size(mask_dtype(c));
  if (c.sinks) s.sinks = count_of({c.heads_q}) * sizeof(float);
  if (c.lse) s.lse = count_of({c.batch, c.heads_q, c.len_q}) * sizeof(float);
  return s;
}

// x * y, or INT64_MAX when that overflows: strides of sizes past any memory
// reach the library, which names them, instead of wrapping here.
int64_t saturating_product(int64_t x, int64_t y) {
  int64_t product = 0;
  return __builtin_mul_overflow(x, y, &product) ? std::numeric_limits<int64_t>::max() : product;
}

// A [B, H, L, D] view whose rows are `row` elements apart.
TensorView bhld_view(void* data, DType dtype, int64_t b, int64_t h, int64_t l, int64_t d,
                     int64_t row, Device device) {
  const int64_t head = saturating_product(l, row);
  return strided_view(data, dtype, {b, h, l, d}, {saturating_product(h, head), head, row, 1},
                      device);
}

// A page pool [B * pages, page_size, Hkv, D] whose rows are `row` elements apart.
TensorView pool_view(void* data, DType dtype, const CaseSpec& c, int64_t d, int64_t row,
                     Device device) {
  const int64_t pages = saturating_product(c.batch, c.pages_per_sequence());
  const int64_t key = saturating_product(c.heads_kv, row);
  return strided_view(data, dtype, {pages, c.page_size, c.heads_kv, d},
                      {saturating_product(c.page_size, key), key, row, 1}, device);
}

Tensors make_views(const CaseSpec& c, const Pointers& p, Device device) {
  const int64_t qk = row_stride(c, c.head_dim_qk), v = row_stride(c, c.head_dim_v);
  const int64_t lk = c.key_capacity();
  Tensors t;
  t.q = bhld_view(p.q, c.dtype, c.batch, c.heads_q, c.len_q, c.head_dim_qk, qk, device);
  // With v_aliases_k, v is the first Dv columns of k's rows.
  if (c.page_size > 0) {
    t.k = pool_view(p.k, c.dtype, c, c.head_dim_qk, qk, device);
    t.v = c.v_aliases_k ? pool_view(p.k, c.dtype, c, c.head_dim_v, qk, device)
                        : pool_view(p.v, c.dtype, c, c.head_dim_v, v, device);
    t.block_table = contiguous_view(p.table, DType::I32, {c.batch, c.pages_per_sequence()}, device);
  } else {
    t.k = bhld_view(p.k, c.dtype, c.batch, c.heads_kv, lk, c.head_dim_qk, qk, device);
    t.v = c.v_aliases_k ? bhld_view(p.k, c.dtype, c.batch, c.heads_kv, lk, c.head_dim_v, qk, device)
                        : bhld_view(p.v, c.dtype, c.batch, c.heads_kv, lk, c.head_dim_v, v, device);
  }
  if (!c.seq_lens.empty()) t.seq_lens_k = contiguous_view(p.lens, DType::I32, {c.batch}, device);
  t.out = bhld_view(p.out, c.dtype, c.batch, c.heads_q, c.len_q, c.head_dim_v, v, device);
  if (c.mask != MaskKind::None)
    t.mask = contiguous_view(p.mask, mask_dtype(c), {1, 1, c.len_q, lk}, device);
  if (c.sinks) t.sinks = contiguous_view(p.sinks, DType::F32, {c.heads_q}, device);
  if (c.lse) t.lse = contiguous_view(p.lse, DType::F32, {c.batch, c.heads_q, c.len_q}, device);
  return t;
}

// A sub-view: `start` and `size` per dimension (rank of t).
TensorView sub_view(const TensorView& t, std::array<int64_t, kMaxRank> start,
                    std::array<int64_t, kMaxRank> size) {
  TensorView s = t;
  int64_t offset = 0;
  for (int d = 0; d < t.rank; ++d) {
    offset += start[d] * t.strides[d];
    s.sizes[d] = size[d];
  }
  s.data = static_cast<std::byte*>(t.data) + offset * static_cast<int64_t>(element_size(t.dtype));
  return s;
}

// A part of the problem whose output rows equal rows of the full output:
// batches [0, batches), query heads [head_begin, head_begin + heads) within
// one kv group (or all heads), query rows [row_begin, row_begin + rows) with
// every key, chosen so causal / window alignment is unchanged (see rows_for).
struct Slice {
  int64_t batches = 0;
  int64_t head_begin = 0;
  int64_t heads = 0;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

// Keeping every key, a run over `rows` query rows sees the same masks as
// those rows of the full problem when they are the last rows (bottom-right
// alignment: the diagonal offset Lk - Lq is preserved) or the first rows
// (top-left: offset 0). Without causal masking or a window any rows do.
int64_t first_row_for(const CaseSpec& c, int64_t rows) {
  const bool aligned_top_left = c.options.causal_align == CausalAlign::TopLeft &&
                                (c.options.causal || c.options.window_left.has_value());
  return aligned_top_left ? 0 : c.len_q - rows;
}

Tensors slice_tensors(const Tensors& t, const CaseSpec& c, const Slice& s) {
  const bool all_heads = s.heads == c.heads_q;
  const int64_t group = c.heads_q / c.heads_kv;
  const int64_t kv_begin = all_heads ? 0 : s.head_begin / group;
  const int64_t kv_heads = all_heads ? c.heads_kv : 1;
  Tensors r;
  r.q =
      sub_view(t.q, {0, s.head_begin, s.row_begin, 0}, {s.batches, s.heads, s.rows, c.head_dim_qk});
  if (c.page_size > 0) {  // the whole pool, its kv heads [kv_begin, + kv_heads)
    r.k = sub_view(t.k, {0, 0, kv_begin, 0}, {t.k.sizes[0], c.page_size, kv_heads, c.head_dim_qk});
    r.v = sub_view(t.v, {0, 0, kv_begin, 0}, {t.v.sizes[0], c.page_size, kv_heads, c.head_dim_v});
    r.block_table = sub_view(*t.block_table, {0, 0}, {s.batches, t.block_table->sizes[1]});
  } else {
    r.k = sub_view(t.k, {0, kv_begin, 0, 0}, {s.batches, kv_heads, t.k.sizes[2], c.head_dim_qk});
    r.v = sub_view(t.v, {0, kv_begin, 0, 0}, {s.batches, kv_heads, t.v.sizes[2], c.head_dim_v});
  }
  if (t.seq_lens_k) r.seq_lens_k = sub_view(*t.seq_lens_k, {0}, {s.batches});
  r.out = sub_view(t.out, {0, s.head_begin, s.row_begin, 0},
                   {s.batches, s.heads, s.rows, c.head_dim_v});
  if (t.mask) {
    const TensorView& m = *t.mask;
    const bool per_batch = m.sizes[0] > 1, per_head = m.sizes[1] > 1;
    r.mask = sub_view(m, {0, per_head ? s.head_begin : 0, s.row_begin, 0},
                      {per_batch ? s.batches : 1, per_head ? s.heads : 1, s.rows, m.sizes[3]});
  }
  if (t.sinks) r.sinks = sub_view(*t.sinks, {s.head_begin}, {s.heads});
  if (t.lse) r.lse = sub_view(*t.lse, {0, s.head_begin, s.row_begin}, {s.batches, s.heads, s.rows});
  return r;
}

std::string describe_slice(const CaseSpec& c, const Slice& s) {
  if (s.batches == c.batch && s.heads == c.heads_q && s.rows == c.len_q) return "all of out";
  std::ostringstream o;
  if (c.batch > 1) o << (s.batches == c.batch ? "all batches" : "batch 0") << ", ";
  if (s.heads == c.heads_q)
    o << "all " << c.heads_q << " heads";
  else if (s.heads == 1)
    o << "head " << s.head_begin << " of " << c.heads_q;
  else
    o << "heads " << s.head_begin << "-" << s.head_begin + s.heads - 1 << " of " << c.heads_q;
  o << ", ";
  if (s.rows == c.len_q)
    o << "all " << c.len_q << " rows";
  else if (s.rows == 1)
    o << "row " << s.row_begin << " of " << c.len_q;
  else
    o << "rows " << s.row_begin << "-" << s.row_begin + s.rows - 1 << " of " << c.len_q;
  return o.str();
}

// The error sample: everything when the reference can afford it, else batch
// 0, the first heads of kv group 0 and a handful of rows.
Slice error_slice(const CaseSpec& c) {
  const double width = static_cast<double>(c.head_dim_qk + c.head_dim_v);
  const double per_row = static_cast<double>(c.len_k) * width;
  Slice s{c.batch, 0, c.heads_q, 0, c.len_q};
  if (static_cast<double>(c.batch * c.heads_q * c.len_q) * per_row <= kCheckBudget) return s;
  s.batches = std::min<int64_t>(c.batch, 1);
  s.heads = std::min<int64_t>(c.heads_q / c.heads_kv, 8);
  s.rows = std::min<int64_t>(c.len_q, 8);
  auto cost = [&] { return static_cast<double>(s.heads * s.rows) * per_row; };
  while (cost() > kCheckBudget && s.rows > 1) s.rows = (s.rows + 1) / 2;
  while (cost() > kCheckBudget && s.heads > 1) s.heads = (s.heads + 1) / 2;
  s.row_begin = first_row_for(c, s.rows);
  return s;
}

// ------------------------------------------------------------- timing

bool enough(const std::vector<double>& samples_ms, int min_runs, int max_runs, double target_s,
            int repeat) {
  const int n = static_cast<int>(samples_ms.size());
  if (repeat > 0) return n >= repeat;
  if (n >= max_runs) return true;
  double total_ms = 0;
  for (double t : samples_ms) total_ms += t;
  return n >= min_runs && total_ms >= target_s * 1e3;
}

struct TimingPlan {
  int warmup;
  int min_runs;
  int max_runs;
  double target_s;
  int repeat;
};

// Milliseconds per launch, one sample per timed run.
std::vector<double> time_launches(const std::function<void()>& launch, Device device,
                                  [[maybe_unused]] void* stream,
                                  [[maybe_unused]] const Memory* l2_flush, const TimingPlan& t) {
  std::vector<double> samples;
  if (device.type == DeviceType::CPU) {
    for (int i = 0; i < t.warmup; ++i) launch();
    while (!enough(samples, t.min_runs, t.max_runs, t.target_s, t.repeat)) {
      const auto start = std::chrono::steady_clock::now();
      launch();
      const auto stop = std::chrono::steady_clock::now();
      samples.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    return samples;
  }
#if FSDPA_WITH_CUDA
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (int i = 0; i < t.warmup; ++i) launch();
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (warm-up)");
  cudaEvent_t start = nullptr, stop = nullptr;
  cuda_check(cudaEventCreate(&start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  try {
    while (!enough(samples, t.min_runs, t.max_runs, t.target_s, t.repeat)) {
      // Evict the inputs from L2 so every run reads them from device memory.
      if (l2_flush != nullptr && *l2_flush)
        cuda_check(cudaMemsetAsync(l2_flush->data(), static_cast<int>(samples.size() & 0xff),
                                   l2_flush->bytes(), s),
                   "cudaMemsetAsync (L2 flush)");
      cuda_check(cudaEventRecord(start, s), "cudaEventRecord");
      launch();
      cuda_check(cudaEventRecord(stop, s), "cudaEventRecord");
      cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      samples.push_back(static_cast<double>(ms));
    }
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    throw;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
#endif
  return samples;
}

// ------------------------------------------------------------- the case

// A block table of distinct pool pages in a shuffled order (from `seed`):
// the pool has exactly the table's pages.
void fill_block_table(const CaseSpec& c, uint64_t seed, const Memory& table) {
  const int64_t pages = c.batch * c.pages_per_sequence();
  auto* ids = static_cast<int32_t*>(table.data());
  for (int64_t i = 0; i < pages; ++i) ids[i] = static_cast<int32_t>(i);
  uint64_t state = seed ^ 0x66;
  for (int64_t i = pages - 1; i > 0; --i)
    std::swap(ids[i], ids[static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1))]);
}

void fill_seq_lens(const CaseSpec& c, const Memory& lens) {
  auto* out = static_cast<int32_t*>(lens.data());
  for (int64_t b = 0; b < c.batch; ++b) out[b] = static_cast<int32_t>(c.seq_lens[size_t(b)]);
}

// Every buffer of one case. Inputs are generated on the host; on CUDA they
// are copied to the device and the outputs copied back for checking.
struct CaseData {
  Memory q, k, v, mask, sinks, table, lens;         // host inputs
  Memory dq, dk, dv, dmask, dsinks, dtable, dlens;  // their device copies (CUDA)
  Memory out, lse;                                  // outputs on the case's device
  Memory out_host, lse_host;                        // CUDA: the outputs copied back
  Tensors tensors;                                  // views on the case's device
  Tensors host;                                     // views of the host inputs and outputs
};

void make_data(const CaseSpec& c, uint64_t seed, CaseData& d) {
  const ByteSizes bytes = byte_sizes(c);
  const Device host_device{};
  const bool on_cuda = c.device.type == DeviceType::CUDA;
  const float r3 = std::sqrt(3.0f);  // uniform on [-sqrt 3, sqrt 3): mean 0, variance 1

  d.q = Memory(bytes.q, host_device);
  fill_uniform(d.q, c.dtype, bytes.q / element_size(c.dtype), seed ^ 0x11, -r3, r3);
  d.k = Memory(bytes.k, host_device);
  fill_uniform(d.k, c.dtype, bytes.k / element_size(c.dtype), seed ^ 0x22, -r3, r3);
  if (!c.v_aliases_k) {
    d.v = Memory(bytes.v, host_device);
    fill_uniform(d.v, c.dtype, bytes.v / element_size(c.dtype), seed ^ 0x33, -r3, r3);
  }
  if (c.mask == MaskKind::Additive) {
    d.mask = Memory(bytes.mask, host_device);
    fill_uniform(d.mask, c.dtype, bytes.mask / element_size(c.dtype), seed ^ 0x44, -4.0f, 0.0f);
  } else if (c.mask == MaskKind::Boolean) {
    d.mask = Memory(bytes.mask, host_device);
    fill_bool(d.mask, bytes.mask, seed ^ 0x44, 0.85);
  }
  if (c.sinks) {
    d.sinks = Memory(bytes.sinks, host_device);
    fill_uniform(d.sinks, DType::F32, static_cast<size_t>(c.heads_q), seed ^ 0x55, -1.0f, 3.0f);
  }
  if (c.page_size > 0) {
    d.table = Memory(bytes.table, host_device);
    fill_block_table(c, seed, d.table);
  }
  if (!c.seq_lens.empty()) {
    d.lens = Memory(bytes.lens, host_device);
    fill_seq_lens(c, d.lens);
  }
  d.out = Memory(bytes.out, c.device);
  if (c.lse) d.lse = Memory(bytes.lse, c.device);

  Pointers host{d.q.data(),     d.k.data(),   d.v.data(),     d.out.data(), d.mask.data(),
                d.sinks.data(), d.lse.data(), d.table.data(), d.lens.data()};
  if (!on_cuda) {
    d.tensors = make_views(c, host, c.device);
    d.host = d.tensors;
    return;
  }
  auto to_device = [&](const Memory& h, Memory& dev) {
    if (!h) return;
    dev = Memory(h.bytes(), c.device);
    upload(h, dev);
  };
  to_device(d.q, d.dq);
  to_device(d.k, d.dk);
  to_device(d.v, d.dv);
  to_device(d.mask, d.dmask);
  to_device(d.sinks, d.dsinks);
  to_device(d.table, d.dtable);
  to_device(d.lens, d.dlens);
  d.out_host = Memory(bytes.out, host_device);
  if (c.lse) d.lse_host = Memory(bytes.lse, host_device);
  Pointers dev{d.dq.data(),     d.dk.data(),  d.dv.data(),     d.out.data(),  d.dmask.data(),
               d.dsinks.data(), d.lse.data(), d.dtable.data(), d.dlens.data()};
  d.tensors = make_views(c, dev, c.device);
  host.out = d.out_host.data();
  host.lse = d.lse_host.data();
  d.host = make_views(c, host, host_device);
}

// The stream a case runs on (nullptr on the CPU).
class Stream {
 public:
  explicit Stream([[maybe_unused]] Device device) {
#if FSDPA_WITH_CUDA
    if (device.type == DeviceType::CUDA) {
      cudaStream_t s = nullptr;
      cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      stream_ = s;
    }
#endif
  }
  ~Stream() {
#if FSDPA_WITH_CUDA
    if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

void synchronize([[maybe_unused]] void* stream) {
#if FSDPA_WITH_CUDA
  if (stream != nullptr)
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
#endif
}

// NaN among the elements of a view (rank 1 to 4; padding between rows is
// not part of the view and not counted).
int64_t count_nan(const TensorView& t) {
  std::array<int64_t, kMaxRank> size{1, 1, 1, 1};
  for (int d = 0; d < t.rank; ++d) size[kMaxRank - t.rank + d] = t.sizes[d];
  std::array<int64_t, kMaxRank> stride{0, 0, 0, 0};
  for (int d = 0; d < t.rank; ++d) stride[kMaxRank - t.rank + d] = t.strides[d];
  int64_t n = 0;
  for (int64_t a = 0; a < size[0]; ++a)
    for (int64_t b = 0; b < size[1]; ++b)
      for (int64_t c = 0; c < size[2]; ++c) {
        const int64_t row = a * stride[0] + b * stride[1] + c * stride[2];
        for (int64_t e = 0; e < size[3]; ++e)
          if (std::isnan(detail::load_as_float(t.data, t.dtype, row + e * stride[3]))) ++n;
      }
  return n;
}

void check_error(const CaseSpec& c, const CaseData& d, CaseResult& r) {
  const Slice s = error_slice(c);
  const Tensors part = slice_tensors(d.host, c, s);
  const detail::cpu::ReferenceResult ref = detail::cpu::reference_attention(part, c.options);
  double max_abs = 0, diff2 = 0, ref2 = 0, lse_max = 0;
  for (int64_t b = 0; b < s.batches; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t row = (b * s.heads + h) * s.rows + i;
        for (int64_t e = 0; e < c.head_dim_v; ++e) {
          const double got = detail::load_as_float(part.out.data, c.dtype,
                                                   detail::offset_of(part.out, b, h, i, e));
          const double want = ref.out[static_cast<size_t>(row * c.head_dim_v + e)];
          const double diff =
              std::isnan(got) ? std::numeric_limits<double>::infinity() : std::abs(got - want);
          max_abs = std::max(max_abs, diff);
          diff2 += diff * diff;
          ref2 += want * want;
        }
        if (part.lse) {
          const double got = detail::load_as_float(part.lse->data, DType::F32,
                                                   detail::offset_of(*part.lse, b, h, i));
          const double want = ref.lse[static_cast<size_t>(row)];
          const double diff = got == want ? 0.0 : std::abs(got - want);
          lse_max =
              std::max(lse_max, std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff);
        }
      }
  r.checked = true;
  r.sample = describe_slice(c, s);
  r.max_abs_err = max_abs;
  r.rel_err = ref2 > 0 ? std::sqrt(diff2 / ref2) : max_abs;
  if (c.lse) r.lse_max_abs_err = lse_max;
  r.tolerance = tolerance_for(c.dtype, c.device.type, c.options.allow_tf32);
}

Options with_policy(Options options, Policy policy) {
  options.policy = policy;
  return options;
}

// CPU: the unfused baseline is a materializing attention on OpenBLAS sgemm
// (sgemm_baseline.h), or without OpenBLAS the library's unfused path (the
// float64 reference on one thread). Time it on the whole problem when it is
// small enough, else on the first heads of kv group 0 of batch 0 (and, when
// one head is still too much, on fewer rows), scaled by the query-key pairs
// left out.
void time_unfused_cpu(const CaseSpec& c, const CaseData& d, CaseResult& r) {
  const bool sgemm = sgemm_baseline_built();
  const double budget = sgemm ? kSgemmBudget : kUnfusedBudget;
  const int64_t group = c.heads_q / c.heads_kv;
  const double width = static_cast<double>(c.head_dim_qk + c.head_dim_v);
  auto cost = [&](int64_t rows) {
    if (sgemm) return static_cast<double>(rows * c.len_k) * width;  // sgemm computes every pair
    const int64_t first = first_row_for(c, rows);
    return static_cast<double>(visible_pairs(c.options, c.len_q, c.len_k, first, rows)) * width +
           static_cast<double>(rows * c.len_k);
  };
  Slice s{std::min<int64_t>(c.batch, 1), 0, 1, 0, c.len_q};
  const double head_cost = cost(c.len_q);
  if (static_cast<double>(c.batch * c.heads_q) * head_cost <= budget) {
    s = Slice{c.batch, 0, c.heads_q, 0, c.len_q};  // the whole problem
  } else if (head_cost <= budget) {
    s.heads =
        std::clamp<int64_t>(static_cast<int64_t>(budget / std::max(head_cost, 1.0)), 1, group);
  } else {
    while (s.rows > 1 && cost(s.rows) > budget) s.rows = (s.rows + 1) / 2;
    s.row_begin = first_row_for(c, s.rows);
  }
  const Tensors part = slice_tensors(d.host, c, s);
  std::vector<double> samples;
  if (sgemm) {
    samples = time_launches([&] { r.unfused_workspace_bytes = sgemm_attention(part, c.options); },
                            Device{}, nullptr, nullptr, TimingPlan{0, 1, 3, 0.3, 0});
    r.unfused_baseline = "OpenBLAS sgemm (materializing)";
  } else {
    const Options options = with_policy(c.options, Policy::Unfused);
    const Plan p = plan(describe(part, options), options);
    Memory workspace(p.workspace_bytes, Device{});
    samples = time_launches([&] { run(p, part, workspace.data(), p.workspace_bytes); }, Device{},
                            nullptr, nullptr, TimingPlan{0, 1, 3, 0.3, 0});
    r.unfused_workspace_bytes = p.workspace_bytes;
    r.unfused_baseline = p.kernel;
  }
  // The sgemm baseline's work is the same for every row; the reference's is
  // proportional to the visible pairs.
  const double all_pairs =
      sgemm ? static_cast<double>(c.len_q)
            : static_cast<double>(visible_pairs(c.options, c.len_q, c.len_k, 0, c.len_q));
  const double part_pairs =
      sgemm ? static_cast<double>(s.rows)
            : static_cast<double>(visible_pairs(c.options, c.len_q, c.len_k, s.row_begin, s.rows));
  const double row_factor =
      s.rows == c.len_q ? 1.0
      : part_pairs > 0
          ? all_pairs / part_pairs
          : static_cast<double>(c.len_q) / static_cast<double>(std::max<int64_t>(s.rows, 1));
  const double factor = static_cast<double>(c.batch * c.heads_q) /
                        static_cast<double>(std::max<int64_t>(s.batches * s.heads, 1)) * row_factor;
  r.unfused_ms = median(samples) * factor;
  r.unfused_status = factor == 1.0 ? "measured" : "estimated";
  r.unfused_sample = factor == 1.0 ? "all" : describe_slice(c, s);
}

void time_unfused_cuda([[maybe_unused]] const CaseSpec& c, [[maybe_unused]] const CaseData& d,
                       [[maybe_unused]] void* stream, [[maybe_unused]] const Memory* l2_flush,
                       [[maybe_unused]] CaseResult& r) {
#if FSDPA_WITH_CUDA
  const Options options = with_policy(c.options, Policy::Unfused);
  const Plan p = plan(describe(d.tensors, options), options);
  r.unfused_workspace_bytes = p.workspace_bytes;
  r.unfused_baseline = p.kernel;
  size_t free_bytes = 0, total_bytes = 0;
  cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const size_t margin = size_t{256} << 20;
  if (p.workspace_bytes + margin > free_bytes) {
    r.unfused_status = "skipped: needs " + std::to_string(p.workspace_bytes) +
                       " bytes of workspace, " + std::to_string(free_bytes) + " free";
    return;
  }
  Memory workspace(p.workspace_bytes, c.device);
  const std::vector<double> samples =
      time_launches([&] { run(p, d.tensors, workspace.data(), p.workspace_bytes, stream); },
                    c.device, stream, l2_flush, TimingPlan{1, 3, 20, 0.5, 0});
  r.unfused_ms = median(samples);
  r.unfused_status = "measured";
  r.unfused_sample = "all";
#endif
}

}  // namespace

// ----------------------------------------------------------------- CaseSpec

std::string CaseSpec::shape_label() const {
  std::ostringstream o;
  if (kind == "prefill" && len_q == len_k)
    o << "prefill L=" << len_q;
  else if (kind == "decode" && len_q == 1)
    o << "decode Lk=" << len_k;
  else
    o << (kind == "shape" ? "" : kind + " ") << "Lq=" << len_q << " Lk=" << len_k;
  if (batch != 1) o << " B=" << batch;
  return o.str();
}

std::string CaseSpec::feature_label() const {
  std::string s;
  auto add = [&](const std::string& f) { s += (s.empty() ? "" : " ") + f; };
  if (options.causal) add(options.causal_align == CausalAlign::TopLeft ? "causal-tl" : "causal");
  if (options.window_left) add("w" + std::to_string(*options.window_left));
  if (options.softcap > 0.0) {
    std::ostringstream cap;
    cap << "cap" << options.softcap;
    add(cap.str());
  }
  if (mask == MaskKind::Additive) add("mask+");
  if (mask == MaskKind::Boolean) add("mask01");
  if (sinks) add("sinks");
  if (lse) add("lse");
  if (v_aliases_k) add("mla");
  if (pad_rows) add("padded");
  if (page_size > 0) add("paged" + std::to_string(page_size));
  if (!seq_lens.empty()) add("ragged");
  return s.empty() ? "-" : s;
}

int64_t CaseSpec::pages_per_sequence() const {
  return page_size > 0 ? (len_k + page_size - 1) / page_size : 0;
}

int64_t CaseSpec::key_capacity() const {
  return page_size > 0 ? pages_per_sequence() * page_size : len_k;
}

int64_t CaseSpec::sequence_len(int64_t b) const {
  return seq_lens.empty() ? key_capacity() : seq_lens[static_cast<size_t>(b)];
}

bool CaseSpec::bandwidth_bound() const {
  if (kind == "decode") return true;
  if (kind == "prefill") return false;
  return len_q <= 16;
}

namespace {

// The plan of the selection-table row named `name` (plan_for_row; the
// command's --row takes only the table's names), which must be of the
// problem's backend and serve the problem: else Unsupported with the row's
// reason. A decline that only routes the problem to another row counts as
// one too: it may be a capability (a dtype, MLA's layout), and the MLA row
// forced on an unaliased 128/128 problem ran.
Plan plan_on_row(const Problem& problem, const Options& options, const std::string& name) {
  const auto table = detail::selection_table();
  for (size_t i = 0; i < table.size(); ++i) {
    const detail::KernelRow& row = table[i];
    if (name != row.name) continue;
    const Backend backend = problem.device.type == DeviceType::CUDA ? Backend::CUDA : Backend::CPU;
    if (row.backend != backend)
      throw Unsupported("fsdpa: row " + name + " is a " + to_string(row.backend) +
                        " row; the problem is on " + to_string(backend));
    const detail::Verdict verdict = row.supports(problem, options);
    if (!verdict.ok)
      throw Unsupported("fsdpa: row " + name + " does not serve the problem: " + verdict.reason);
    return detail::plan_for_row(problem, options, static_cast<int>(i));
  }
  throw Error("fsdpa: internal: no selection-table row named '" + name + "'");
}

}  // namespace

// ----------------------------------------------------------------- public

Problem describe_case(const CaseSpec& c) {
  const ByteSizes bytes = byte_sizes(c);
  uintptr_t next = uintptr_t{1} << 32;
  // Distinct addresses even for empty tensors, as run() would see them.
  auto place = [&](size_t n) -> void* {
    void* p = reinterpret_cast<void*>(next);
    next += round_up(n, 4096) + 4096;
    return p;
  };
  Pointers p;
  p.q = place(bytes.q);
  p.k = place(bytes.k);
  p.v = place(bytes.v);
  p.out = place(bytes.out);
  p.mask = place(bytes.mask);
  p.sinks = place(bytes.sinks);
  p.lse = place(bytes.lse);
  p.table = place(bytes.table);
  p.lens = place(bytes.lens);
  // A CPU call's block table and lengths are read by describe(): real ones.
  Memory table, lens;
  if (c.device.type == DeviceType::CPU && c.page_size > 0) {
    table = Memory(bytes.table, Device{});
    fill_block_table(c, 0, table);
    p.table = table.data();
  }
  if (c.device.type == DeviceType::CPU && !c.seq_lens.empty()) {
    lens = Memory(bytes.lens, Device{});
    fill_seq_lens(c, lens);
    p.lens = lens.data();
  }
  return describe(make_views(c, p, c.device), c.options);
}

int64_t visible_pairs(const Options& options, int64_t len_q, int64_t len_k, int64_t row_begin,
                      int64_t rows) {
  int64_t pairs = 0;
  for (int64_t i = row_begin; i < row_begin + rows; ++i) {
    const detail::KeyRange range = detail::visible_keys(options, len_q, len_k, i);
    pairs += std::max<int64_t>(0, range.end - range.begin);
  }
  return pairs;
}

Settings default_settings(DeviceType device) {
  Settings s;
  if (device == DeviceType::CUDA) {
    s.warmup = 3;
    s.min_runs = 10;
    s.max_runs = 100;
    s.target_seconds = 0.3;
  }
  return s;
}

double tolerance_for(DType dtype, DeviceType device, bool allow_tf32) {
  switch (dtype) {
    case DType::BF16:
      return 1e-2;
    case DType::F16:
      return 2e-3;
    case DType::F32:
      return device == DeviceType::CUDA && allow_tf32 ? 1e-3 : 1e-5;
    case DType::Bool:
    case DType::I32:
      break;
  }
  return 0.0;
}

CaseResult run_case(const CaseSpec& c, const Settings& settings) {
  CaseResult r;
  try {
    // The work the case does, from the masks alone (array masks aside),
    // over each sequence's own keys.
    double pairs = 0, keys_read = 0;
    for (int64_t b = 0; b < (c.seq_lens.empty() ? 1 : c.batch); ++b) {
      const int64_t len = c.sequence_len(b), copies = c.seq_lens.empty() ? c.batch : 1;
      pairs += static_cast<double>(copies) *  // in double: sizes may be past any memory
               static_cast<double>(visible_pairs(c.options, c.len_q, len, 0, c.len_q));
      int64_t key_begin = len, key_end = 0;
      for (int64_t i = 0; i < c.len_q; ++i) {
        const detail::KeyRange range = detail::visible_keys(c.options, c.len_q, len, i);
        if (range.end <= range.begin) continue;
        key_begin = std::min(key_begin, range.begin);
        key_end = std::max(key_end, range.end);
      }
      keys_read += static_cast<double>(copies) *
                   static_cast<double>(std::max<int64_t>(0, key_end - key_begin));
    }
    r.flops = 2.0 * static_cast<double>(c.heads_q) * pairs *
              static_cast<double>(c.head_dim_qk + c.head_dim_v);
    r.kv_bytes = static_cast<double>(c.heads_kv) * keys_read *
                 static_cast<double>(c.head_dim_qk + (c.v_aliases_k ? 0 : c.head_dim_v)) *
                 static_cast<double>(element_size(c.dtype));

    // Plan first: an unsupported shape allocates nothing.
    const Problem problem = describe_case(c);
    r.plan = c.row.empty() ? plan(problem, c.options) : plan_on_row(problem, c.options, c.row);
    const Plan& p = *r.plan;

    CaseData d;
    make_data(c, settings.seed, d);
    Stream stream(c.device);
    Memory workspace(p.workspace_bytes, c.device);
    Memory l2_flush;
#if FSDPA_WITH_CUDA
    if (c.device.type == DeviceType::CUDA)
      l2_flush = Memory(
          2 * std::max<size_t>(detail::cuda::device_info(c.device.index).l2_bytes, size_t{1} << 20),
          c.device);
#endif
    poison(d.out, c.device);
    if (c.lse) poison(d.lse, c.device);

    auto launch = [&] { run(p, d.tensors, workspace.data(), p.workspace_bytes, stream.get()); };
    const TimingPlan timing{settings.warmup, settings.min_runs, settings.max_runs,
                            settings.target_seconds, settings.repeat};
    // Every run writes the same elements, so one that no run writes is
    // still NaN afterwards.
    const std::vector<double> samples =
        time_launches(launch, c.device, stream.get(), &l2_flush, timing);
    synchronize(stream.get());
    r.time_ms = median(samples);
    r.runs = static_cast<int>(samples.size());
    r.warmup = settings.warmup;

    if (c.device.type == DeviceType::CUDA) {
      download(d.out, d.out_host);
      if (c.lse) download(d.lse, d.lse_host);
    }
    const int64_t out_nan = count_nan(d.host.out);
    const int64_t lse_nan = c.lse ? count_nan(*d.host.lse) : 0;

    if (settings.check) check_error(c, d, r);

    if (settings.unfused) {
      try {
        if (p.path == Path::Unfused) {
          r.unfused_ms = r.time_ms;
          r.unfused_workspace_bytes = p.workspace_bytes;
          r.unfused_status = "same";
          r.unfused_baseline = p.kernel;
          r.unfused_sample = "all";
        } else if (c.page_size > 0 || !c.seq_lens.empty()) {
          r.unfused_status = "n/a: the materializing baselines take dense, equal-length keys";
        } else if (c.device.type == DeviceType::CPU) {
          time_unfused_cpu(c, d, r);
        } else {
          time_unfused_cuda(c, d, stream.get(), &l2_flush, r);
        }
      } catch (const std::exception& e) {
        r.unfused_status = std::string("failed: ") + e.what();
      }
    }

    if (out_nan > 0 || lse_nan > 0) {
      r.status = "nan";
      r.message = std::to_string(out_nan) + " NaN left in out" +
                  (c.lse ? ", " + std::to_string(lse_nan) + " in lse" : std::string()) +
                  " (poisoned before the first run)";
    } else if (r.checked && !(r.rel_err <= r.tolerance)) {
      r.status = "inaccurate";
      std::ostringstream o;
      o << "relative error " << r.rel_err << " above the tolerance " << r.tolerance;
      r.message = o.str();
    } else if (r.checked && c.lse && !(r.lse_max_abs_err <= kLseTolerance)) {
      r.status = "inaccurate";
      std::ostringstream o;
      o << "lse error " << r.lse_max_abs_err << " above the tolerance " << kLseTolerance;
      r.message = o.str();
    } else {
      r.status = "ok";
    }
  } catch (const Unsupported& e) {
    r.status = "unsupported";
    r.message = e.what();
  } catch (const std::bad_alloc&) {
    r.status = "error";
    r.message = "fsdpa: out of host memory";
  } catch (const std::exception& e) {
    r.status = "error";
    r.message = e.what();
  }
  return r;
}

// ----------------------------------------------------------------- devices

namespace {

std::string cpu_name() {
  return "cpu (" + std::to_string(detail::cpu::default_num_threads()) + " threads)";
}

#if FSDPA_WITH_CUDA
std::string cuda_name(int index) {
  const detail::cuda::DeviceInfo& info = detail::cuda::device_info(index);
  std::ostringstream o;
  o << "cuda:" << index << " " << info.name << " (" << info.multiprocessors << " SMs, sm_"
    << info.compute_capability << ", " << std::fixed;
  o.precision(1);
  o << static_cast<double>(info.global_memory_bytes) / double(1ull << 30) << " GiB)";
  return o.str();
}

// A small case through plan() and run() on the device; empty when it worked.
std::string cuda_probe(int index) {
  CaseSpec c;
  c.kind = "shape";
  c.heads_q = 2;
  c.heads_kv = 2;
  c.len_q = 64;
  c.len_k = 64;
  c.head_dim_qk = 64;
  c.head_dim_v = 64;
  c.device = {DeviceType::CUDA, index};
  Settings s;
  s.warmup = 0;
  s.repeat = 1;
  s.unfused = false;
  const CaseResult r = run_case(c, s);
  if (r.ok()) return "";
  return r.status + ": " + r.message;
}
#endif

}  // namespace

DeviceChoice choose_device(const std::string& requested, bool probe) {
  DeviceChoice choice;
  if (requested == "cpu") {
    choice.name = cpu_name();
    choice.reason = "--device cpu";
    return choice;
  }
#if FSDPA_WITH_CUDA
  const int count = detail::cuda::device_count();
  if (requested == "cuda") {
    if (count == 0) throw Unsupported("fsdpa: --device cuda: no CUDA device found");
    choice.device = {DeviceType::CUDA, 0};
    choice.name = cuda_name(0);
    choice.reason = "--device cuda";
    return choice;
  }
  if (count == 0) {
    choice.name = cpu_name();
    choice.reason = "no CUDA device found (device_count() = 0)";
    return choice;
  }
  if (probe) {
    const std::string failure = cuda_probe(0);
    if (!failure.empty()) {
      choice.name = cpu_name();
      choice.reason = "CUDA probe on cuda:0 failed: " + failure;
      return choice;
    }
  }
  choice.device = {DeviceType::CUDA, 0};
  choice.name = cuda_name(0);
  choice.reason =
      probe ? "CUDA backend built, device found, probe ran" : "CUDA backend built, device found";
  return choice;
#else
  (void)probe;
  if (requested == "cuda")
    throw Unsupported(
        "fsdpa: --device cuda: the CUDA backend is not built into this library (configure "
        "with FSDPA_CUDA=ON and nvcc)");
  choice.name = cpu_name();
  choice.reason = "the CUDA backend is not built into this library";
  return choice;
#endif
}

std::string offline_arch_list() {
  std::string list;
  const size_t n = std::size(kOfflineTargets);
  for (size_t i = 0; i < n; ++i)
    list += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + kOfflineTargets[i].arch;
  return list;
}

DeviceChoice planning_device(const std::string& requested, const std::optional<std::string>& arch) {
  if (arch && requested != "cuda") throw UsageError("--arch needs --device cuda");
#if FSDPA_WITH_CUDA
  if (requested == "cuda") {
    DeviceChoice choice;
    choice.device = {DeviceType::CUDA, 0};
    if (detail::cuda::device_count() == 0) {
      const std::string target = arch ? *arch : kOfflineArch;
      const OfflineTarget* offline = nullptr;
      for (const OfflineTarget& t : kOfflineTargets)
        if (target == t.arch) offline = &t;
      if (offline == nullptr)
        throw UsageError("--arch " + target + ": without a CUDA device fsdpa plans for " +
                         offline_arch_list() + " only");
      if (offline->compute_capability != 0) {
        static detail::cuda::DeviceInfo info;
        info.name = offline->device;
        info.compute_capability = offline->compute_capability;
        info.multiprocessors = offline->multiprocessors;
        info.shared_memory_per_block_optin = static_cast<size_t>(offline->shared_memory_per_block);
        detail::cuda::set_offline_target(&info);
      }
      choice.name = "no CUDA device: planned offline for " + target +
                    (offline->compute_capability != 0 ? std::string(" as ") + offline->device
                                                      : std::string());
      choice.reason = "--device cuda without a device";
      return choice;
    }
    const std::string present =
        "sm_" + std::to_string(detail::cuda::device_info(0).compute_capability);
    if (arch && *arch != present)
      throw UsageError("--arch " + *arch + ": device cuda:0 is " + present +
                       "; planning for another architecture needs no device present");
    choice.name = cuda_name(0);
    choice.reason = "--device cuda";
    return choice;
  }
#endif
  return choose_device(requested, false);
}

}  // namespace fsdpa::tool
