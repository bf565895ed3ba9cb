// The CUDA decode family (src/cuda/decode) against the float64 reference:
// head dims across the buckets, GQA packing, forced split counts, long keys,
// every semantic, poisoned outputs, LSE, and the error messages.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "cpu/cpu.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_config.h"
#include "fsdpa/fsdpa.h"
#include "select/table.h"

namespace {

using namespace fsdpa;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

enum class MaskCase {
  None,
  AdditiveF32,
  AdditiveF16,
  AdditiveBF16Broadcast,
  Boolean,
  BooleanFullyMaskedRow
};

struct Case {
  int64_t batch = 1, heads_q = 8, heads_kv = 2, len_q = 1, len_k = 97, dqk = 128, dv = 128;
  DType dtype = DType::BF16;
  bool causal = false;
  CausalAlign align = CausalAlign::BottomRight;
  std::optional<int64_t> window;
  MaskCase mask = MaskCase::None;
  bool sinks = false;
  bool lse = true;
  bool bshd = false;         // [B, L, H, D] memory, viewed as [B, H, L, D]
  bool v_aliases_k = false;  // v = first dv columns of k (MLA)
  int splits = 0;            // FSDPA_DECODE_SPLITS; 0 = automatic
  std::optional<double> scale;
  double softcap = 0.0;  // Options::softcap

  std::string name() const {
    return "B=" + std::to_string(batch) + " Hq=" + std::to_string(heads_q) +
           " Hkv=" + std::to_string(heads_kv) + " Lq=" + std::to_string(len_q) +
           " Lk=" + std::to_string(len_k) + " D=" + std::to_string(dqk) + "/" + std::to_string(dv) +
           " " + to_string(dtype) + (causal ? " causal" : "") +
           (align == CausalAlign::TopLeft ? "-topleft" : "") +
           (window ? " window=" + std::to_string(*window) : "") +
           " mask=" + std::to_string(int(mask)) + (sinks ? " sinks" : "") + (bshd ? " bshd" : "") +
           (v_aliases_k ? " v=k" : "") +
           (softcap > 0 ? " softcap=" + std::to_string(softcap) : "") +
           " splits=" + std::to_string(splits);
  }
};

double tolerance(DType dtype) {
  return dtype == DType::BF16 ? 1e-2 : dtype == DType::F16 ? 2e-3 : 1e-5;
}

// Host buffer plus its device copy.
struct Buffer {
  std::vector<unsigned char> host;
  void* device = nullptr;
  explicit Buffer(size_t bytes) : host(bytes) {}
  ~Buffer() {
    if (device) cudaFree(device);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void upload() {
    if (host.empty()) return;
    ASSERT_EQ(cudaMalloc(&device, host.size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  void poison_device() {
    if (host.empty()) return;
    if (device == nullptr) {
      ASSERT_EQ(cudaMalloc(&device, host.size()), cudaSuccess);
    }
    ASSERT_EQ(cudaMemset(device, 0xff, host.size()), cudaSuccess);  // NaN in every dtype
  }
  void download() {
    if (host.empty()) return;
    ASSERT_EQ(cudaMemcpy(host.data(), device, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

void fill_random(Buffer& b, DType dtype, std::mt19937& rng, float amplitude = 1.f) {
  std::normal_distribution<float> normal(0.f, amplitude);
  const size_t n = b.host.size() / element_size(dtype);
  for (size_t i = 0; i < n; ++i)
    detail::store_from_float(b.host.data(), dtype, int64_t(i), normal(rng));
}

// A [B, H, L, D] view of memory laid out [B, H, L, D] or [B, L, H, D].
TensorView view4(void* data, DType dtype, int64_t b, int64_t h, int64_t l, int64_t d, bool bshd,
                 int64_t row_elems) {
  if (bshd)
    return strided_view(data, dtype, {b, h, l, d},
                        {l * h * row_elems, row_elems, h * row_elems, 1});
  return strided_view(data, dtype, {b, h, l, d}, {h * l * row_elems, l * row_elems, row_elems, 1});
}

void set_env_splits(int splits) {
  if (splits > 0)
    setenv("FSDPA_DECODE_SPLITS", std::to_string(splits).c_str(), 1);
  else
    unsetenv("FSDPA_DECODE_SPLITS");
}

// The plan of table row `row`, with the split count forced (0: automatic).
Plan plan_with_splits(const Problem& problem, const Options& options, int row, int splits) {
  set_env_splits(splits);
  try {
    Plan plan = detail::plan_for_row(problem, options, row);
    set_env_splits(0);
    return plan;
  } catch (...) {
    set_env_splits(0);
    throw;
  }
}

// out and lse (downloaded) against the float64 reference.
void compare(const Case& c, const Tensors& host_tensors, const detail::cpu::ReferenceResult& ref,
             const Buffer& out, const Buffer& lse, const Plan& plan) {
  const size_t rows = size_t(c.batch * c.heads_q * c.len_q);
  double err2 = 0, ref2 = 0, max_abs = 0;
  int64_t unwritten = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.len_q; ++i)
        for (int64_t d = 0; d < c.dv; ++d) {
          const double got = detail::load_as_float(out.host.data(), c.dtype,
                                                   detail::offset_of(host_tensors.out, b, h, i, d));
          const double want = ref.out[size_t(((b * c.heads_q + h) * c.len_q + i) * c.dv + d)];
          if (std::isnan(got)) ++unwritten;
          err2 += (got - want) * (got - want);
          ref2 += want * want;
          max_abs = std::max(max_abs, std::abs(got - want));
        }
  EXPECT_EQ(unwritten, 0) << "NaN (poison) left in out";
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(rel, tolerance(c.dtype)) << "max abs " << max_abs << "\n" << plan.explain();
  if (c.lse) {
    for (size_t r = 0; r < rows; ++r) {
      float got;
      std::memcpy(&got, lse.host.data() + r * 4, 4);
      const double want = ref.lse[r];
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(got) && got < 0) << "row " << r << " lse " << got;
      } else {
        EXPECT_NEAR(got, want, 1e-3 * std::max(1.0, std::abs(want))) << "row " << r;
      }
    }
  }
}

// Every decode row of the table that serves the problem here (the wgmma MLA
// row and the mma.sync row both take MLA shapes on sm_90): each must be right.
std::vector<int> decode_rows(const Problem& problem, const Options& options) {
  std::vector<int> rows;
  const auto table = detail::selection_table();
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].path == Path::FusedDecode && table[i].backend == Backend::CUDA &&
        table[i].supports(problem, options).ok)
      rows.push_back(int(i));
  return rows;
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  if (!detail::cuda::decode_bucket_compiled(c.dqk, c.dv))
    GTEST_SKIP() << "bucket not compiled (FSDPA_HEAD_DIMS)";
  std::mt19937 rng(std::random_device{}());
  const size_t es = element_size(c.dtype);
  const int64_t k_row = c.dqk;  // v aliasing k reads k's rows
  Buffer q(size_t(c.batch * c.heads_q * c.len_q * c.dqk) * es);
  Buffer k(size_t(c.batch * c.heads_kv * c.len_k * k_row) * es);
  Buffer v(c.v_aliases_k ? 0 : size_t(c.batch * c.heads_kv * c.len_k * c.dv) * es);
  Buffer out(size_t(c.batch * c.heads_q * c.len_q * c.dv) * es);
  Buffer lse(c.lse ? size_t(c.batch * c.heads_q * c.len_q) * 4 : 0);
  fill_random(q, c.dtype, rng);
  fill_random(k, c.dtype, rng);
  if (!c.v_aliases_k) fill_random(v, c.dtype, rng);

  std::optional<Buffer> mask, sinks;
  std::optional<TensorView> mask_host, mask_dev;
  if (c.mask != MaskCase::None) {
    const bool boolean = c.mask == MaskCase::Boolean || c.mask == MaskCase::BooleanFullyMaskedRow;
    const DType mdt = boolean                           ? DType::Bool
                      : c.mask == MaskCase::AdditiveF32 ? DType::F32
                      : c.mask == MaskCase::AdditiveF16 ? DType::F16
                                                        : DType::BF16;
    // Full [B, Hq, Lq, Lk] or broadcast [1, 1, Lq, Lk].
    const bool broadcast = c.mask == MaskCase::AdditiveBF16Broadcast;
    const int64_t mb = broadcast ? 1 : c.batch, mh = broadcast ? 1 : c.heads_q;
    mask.emplace(size_t(mb * mh * c.len_q * c.len_k) * element_size(mdt));
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    const int64_t n = mb * mh * c.len_q * c.len_k;
    for (int64_t i = 0; i < n; ++i) {
      const float u = uniform(rng);
      if (boolean) {
        bool keep = u < 0.7f;
        if (c.mask == MaskCase::BooleanFullyMaskedRow && (i / c.len_k) % 3 == 0) keep = false;
        mask->host[size_t(i)] = keep ? 1 : 0;
      } else {
        const float value = u < 0.1f ? -std::numeric_limits<float>::infinity() : 2.f * u - 1.f;
        detail::store_from_float(mask->host.data(), mdt, i, value);
      }
    }
    mask->upload();
    mask_host = contiguous_view(mask->host.data(), mdt, {mb, mh, c.len_q, c.len_k});
    mask_dev =
        contiguous_view(mask->device, mdt, {mb, mh, c.len_q, c.len_k}, {DeviceType::CUDA, 0});
  }
  if (c.sinks) {
    sinks.emplace(size_t(c.heads_q) * 4);
    std::normal_distribution<float> normal(0.f, 2.f);
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const float s = normal(rng);
      std::memcpy(sinks->host.data() + h * 4, &s, 4);
    }
    sinks->upload();
  }
  q.upload();
  k.upload();
  v.upload();
  out.poison_device();
  lse.poison_device();

  auto make = [&](bool device) {
    Tensors t;
    const Device dev = device ? Device{DeviceType::CUDA, 0} : Device{};
    auto data = [&](Buffer& b) -> void* { return device ? b.device : b.host.data(); };
    t.q = view4(data(q), c.dtype, c.batch, c.heads_q, c.len_q, c.dqk, c.bshd, c.dqk);
    t.k = view4(data(k), c.dtype, c.batch, c.heads_kv, c.len_k, c.dqk, c.bshd, k_row);
    t.v = c.v_aliases_k ? view4(data(k), c.dtype, c.batch, c.heads_kv, c.len_k, c.dv, c.bshd, k_row)
                        : view4(data(v), c.dtype, c.batch, c.heads_kv, c.len_k, c.dv, c.bshd, c.dv);
    t.out = view4(data(out), c.dtype, c.batch, c.heads_q, c.len_q, c.dv, c.bshd, c.dv);
    for (TensorView* view : {&t.q, &t.k, &t.v, &t.out}) view->device = dev;
    if (c.mask != MaskCase::None) t.mask = device ? *mask_dev : *mask_host;
    if (c.sinks) {
      t.sinks = contiguous_view(device ? sinks->device : sinks->host.data(), DType::F32,
                                {c.heads_q}, dev);
    }
    if (c.lse) t.lse = contiguous_view(data(lse), DType::F32, {c.batch, c.heads_q, c.len_q}, dev);
    return t;
  };
  Options options;
  options.causal = c.causal;
  options.causal_align = c.align;
  options.window_left = c.window;
  options.scale = c.scale;
  options.softcap = c.softcap;
  options.policy = Policy::ForceFused;

  const Tensors device_tensors = make(true);
  const Tensors host_tensors = make(false);
  // The reference reads the inputs; its own output views are ignored.
  const detail::cpu::ReferenceResult ref = detail::cpu::reference_attention(host_tensors, options);
  const Problem problem = describe(device_tensors, options);
  const std::vector<int> rows = decode_rows(problem, options);
  ASSERT_FALSE(rows.empty()) << "no decode row serves " << c.name();
  // plan() routes the problem to the first of them.
  EXPECT_EQ(fsdpa::plan(problem, options).kernel, detail::selection_table()[size_t(rows[0])].name);
  for (int row : rows) {
    SCOPED_TRACE(std::string(detail::selection_table()[size_t(row)].name));
    out.poison_device();
    lse.poison_device();
    const Plan plan = plan_with_splits(problem, options, row, c.splits);
    ASSERT_EQ(plan.path, Path::FusedDecode) << plan.explain();
    if (c.splits > 0) {
      ASSERT_EQ(plan.num_kv_splits, c.splits);
    }
    const size_t rows_total = size_t(c.batch * c.heads_q * c.len_q);
    EXPECT_LE(plan.workspace_bytes, rows_total * size_t(plan.num_kv_splits) * size_t(c.dv + 2) * 4);
    void* workspace = nullptr;
    if (plan.workspace_bytes) {
      CUDA_OK(cudaMalloc(&workspace, plan.workspace_bytes));
    }
    run(plan, device_tensors, workspace, plan.workspace_bytes, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    if (workspace) {
      CUDA_OK(cudaFree(workspace));
    }
    out.download();
    lse.download();
    compare(c, host_tensors, ref, out, lse, plan);
  }
}

// ------------------------------------------------------------ shapes

TEST(Decode, HeadDimsAcrossBuckets) {
  const std::pair<int64_t, int64_t> dims[] = {
      {64, 64},   {72, 72},   {96, 64}, {128, 128}, {192, 128}, {256, 256}, {288, 288},
      {512, 512}, {576, 512}, {8, 8},   {40, 40},   {200, 136}, {328, 264}, {520, 488}};
  for (auto [dqk, dv] : dims) {
    Case c;
    c.dqk = dqk;
    c.dv = dv;
    c.len_k = 577;
    run_case(c);
  }
}

TEST(Decode, Dtypes) {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (int64_t d : {64, 128, 512}) {
      Case c;
      c.dtype = dtype;
      c.dqk = c.dv = d;
      c.len_k = 577;
      run_case(c);
    }
}

TEST(Decode, GqaRatios) {
  // Packed rows per kv head 1, 2, 3, 4, 7, 8, 16, 20, 128: 16-row
  // tensor-core tiles partly filled, exactly filled, one and a part, and
  // eight (bf16); every compiled row count of the f32 kernel (1, 2, 4, the
  // bucket's maximum), partly filled.
  const std::pair<int64_t, int64_t> heads[] = {{8, 8},  {4, 2},  {24, 8},  {8, 2}, {16, 2},
                                               {16, 1}, {40, 2}, {128, 1}, {7, 1}};
  for (DType dtype : {DType::BF16, DType::F32})
    for (auto [hq, hkv] : heads) {
      Case c;
      c.dtype = dtype;
      c.heads_q = hq;
      c.heads_kv = hkv;
      c.len_k = 577;
      run_case(c);
    }
  for (DType dtype : {DType::F16, DType::F32}) {  // one row per kv head (MHA), two queries
    Case c;
    c.dtype = dtype;
    c.heads_q = c.heads_kv = 4;
    c.len_k = 577;
    run_case(c);
    c.len_q = 2;
    c.causal = true;
    run_case(c);
  }
}

TEST(Decode, KeyLengths) {
  for (int64_t lk : {1, 17, 577, 32768, 131073}) {
    Case c;
    c.len_k = lk;
    c.heads_q = 4;
    c.heads_kv = 1;
    run_case(c);
  }
}

TEST(Decode, EmptyKeys) {
  Case c;
  c.len_k = 0;
  run_case(c);
  c.sinks = true;
  run_case(c);
}

TEST(Decode, SplitsForced) {
  for (int splits : {1, 2, 7, 64}) {
    Case c;
    c.len_k = 577;
    c.splits = splits;
    c.sinks = splits % 2 == 0;
    run_case(c);
    c.len_k = 17;  // more splits than keys: empty splits
    run_case(c);
  }
}

// MLA: v is the first Dv columns of k. On sm_90 both the wgmma MLA row (64
// packed rows a block) and the mma.sync row serve it, and run_case runs each.
Case mla_case() {
  Case c;
  c.heads_q = 128;
  c.heads_kv = 1;
  c.dqk = 576;
  c.dv = 512;
  c.v_aliases_k = true;
  c.scale = 0.1;
  return c;
}

TEST(Decode, Mla) {
  for (int64_t lk : {1, 17, 577, 4099})
    for (int splits : {0, 1, 7}) {
      Case c = mla_case();
      c.len_k = lk;
      c.splits = splits;
      run_case(c);
    }
  Case c = mla_case();
  c.len_k = 577;
  for (DType dtype : {DType::F16, DType::F32}) {  // f32: the CUDA-core row only
    c.dtype = dtype;
    run_case(c);
  }
}

// Packed rows per kv head below, at and across the 64-row block: 16, 64,
// 96 (a partial second block), 256 (Lq 2 x 128 heads, causal).
TEST(Decode, MlaRowsPerKvHead) {
  for (int64_t heads : {16, 64, 96}) {
    Case c = mla_case();
    c.heads_q = heads;
    c.len_k = 1000;
    run_case(c);
  }
  Case c = mla_case();
  c.len_q = 2;
  c.causal = true;
  c.len_k = 1000;
  c.splits = 3;
  run_case(c);
}

// Lq 4 takes Q by TMA, Lq 3 and 9 (no box of 64 rows) by cp.async.
TEST(Decode, MlaSemantics) {
  for (MaskCase mask : {MaskCase::AdditiveF32, MaskCase::BooleanFullyMaskedRow}) {
    Case c = mla_case();
    c.heads_q = 16;
    c.len_q = 4;
    c.len_k = 700;
    c.causal = true;
    c.mask = mask;
    c.sinks = true;
    c.splits = 5;
    run_case(c);
  }
  Case c = mla_case();
  c.heads_q = 32;
  c.len_q = 3;
  c.len_k = 2000;
  c.causal = true;
  c.window = 100;
  c.sinks = true;
  run_case(c);
  c.window.reset();
  c.len_q = 9;  // bottom-right causal with Lq > Lk: the first rows see nothing
  c.len_k = 5;
  c.splits = 2;
  run_case(c);
}

// Batches and several latent heads: the TMA maps' batch and head
// coordinates (K's, and Q's boxes of 64 / Lq heads, BSHD too), and the
// packed rows of each kv group.
TEST(Decode, MlaBatchesAndHeads) {
  Case c = mla_case();
  c.batch = 2;
  c.heads_q = 32;
  c.heads_kv = 2;
  c.len_q = 2;
  c.causal = true;
  c.len_k = 700;
  c.splits = 3;
  run_case(c);
  c.bshd = true;
  c.splits = 0;
  run_case(c);
}

// Even split counts: split pairs merge through two-block clusters before the
// combine, each block half of the columns; with two splits the pair writes
// out and lse itself (no combine). Several batches and latent heads (the
// clusters' block order), a partial second row chunk, Dv below 512 with
// masks and sinks, and pairs of empty splits.
TEST(Decode, MlaSplitPairs) {
  for (int splits : {2, 4}) {
    Case c = mla_case();
    c.batch = 2;
    c.heads_q = 192;  // 96 rows a kv head: a full and a partial row chunk
    c.heads_kv = 2;
    c.len_k = 1000;
    c.splits = splits;
    run_case(c);
  }
  for (int splits : {2, 6}) {
    Case c = mla_case();
    c.heads_q = 16;
    c.len_q = 4;
    c.len_k = 700;
    c.dv = 504;
    c.causal = true;
    c.mask = MaskCase::AdditiveF32;
    c.sinks = true;
    c.splits = splits;
    run_case(c);
  }
  Case c = mla_case();
  c.len_k = 17;
  c.splits = 64;  // most splits empty
  run_case(c);
}

// Head dims the 576 bucket takes: a partial last panel (528), Dv below 512.
TEST(Decode, MlaHeadDims) {
  for (auto [dqk, dv] : {std::pair<int64_t, int64_t>{528, 512}, {576, 128}, {576, 504}}) {
    Case c = mla_case();
    c.heads_q = 64;
    c.dqk = dqk;
    c.dv = dv;
    c.len_k = 333;
    run_case(c);
  }
}

TEST(Decode, MlaLongKeys) {
  Case c = mla_case();
  c.heads_q = 16;
  c.len_k = 32768;
  run_case(c);
}

// Calls on one stream with no host sync between them, all with one
// workspace. Every decode kernel is launched with programmatic dependent
// launch, so a call's split kernel may be scheduled while the previous
// call's combine still reads the partials; it must wait before writing
// them, or the earlier outputs come out wrong. Each call has its own q and
// out, every row that serves the shape runs, with 7 splits.
TEST(Decode, BackToBackCallsShareTheWorkspace) {
  constexpr int kCalls = 3;
  for (const bool mla : {false, true}) {
    Case c = mla ? mla_case() : Case{};
    c.len_k = 4099;
    c.splits = 7;
    SCOPED_TRACE(c.name());
    if (!detail::cuda::decode_bucket_compiled(c.dqk, c.dv)) continue;
    std::mt19937 rng(std::random_device{}());
    const size_t es = element_size(c.dtype);
    Buffer k(size_t(c.batch * c.heads_kv * c.len_k * c.dqk) * es);
    Buffer v(mla ? 0 : size_t(c.batch * c.heads_kv * c.len_k * c.dv) * es);
    fill_random(k, c.dtype, rng);
    fill_random(v, c.dtype, rng);
    k.upload();
    v.upload();
    std::vector<std::unique_ptr<Buffer>> q, out, lse;
    std::vector<Tensors> device_tensors, host_tensors;
    for (int call = 0; call < kCalls; ++call) {
      q.push_back(std::make_unique<Buffer>(size_t(c.batch * c.heads_q * c.dqk) * es));
      out.push_back(std::make_unique<Buffer>(size_t(c.batch * c.heads_q * c.dv) * es));
      lse.push_back(std::make_unique<Buffer>(size_t(c.batch * c.heads_q) * 4));
      fill_random(*q.back(), c.dtype, rng);
      q.back()->upload();
      out.back()->poison_device();  // allocates: the views below need the device pointers
      lse.back()->poison_device();
      for (const bool device : {true, false}) {
        Tensors t;
        const Device dev = device ? Device{DeviceType::CUDA, 0} : Device{};
        auto data = [&](Buffer& b) -> void* { return device ? b.device : b.host.data(); };
        t.q = view4(data(*q.back()), c.dtype, c.batch, c.heads_q, 1, c.dqk, false, c.dqk);
        t.k = view4(data(k), c.dtype, c.batch, c.heads_kv, c.len_k, c.dqk, false, c.dqk);
        t.v = mla ? view4(data(k), c.dtype, c.batch, c.heads_kv, c.len_k, c.dv, false, c.dqk)
                  : view4(data(v), c.dtype, c.batch, c.heads_kv, c.len_k, c.dv, false, c.dv);
        t.out = view4(data(*out.back()), c.dtype, c.batch, c.heads_q, 1, c.dv, false, c.dv);
        t.lse = contiguous_view(data(*lse.back()), DType::F32, {c.batch, c.heads_q, 1}, dev);
        for (TensorView* view : {&t.q, &t.k, &t.v, &t.out}) view->device = dev;
        (device ? device_tensors : host_tensors).push_back(t);
      }
    }
    Options options;
    options.scale = c.scale;
    options.policy = Policy::ForceFused;
    const Problem problem = describe(device_tensors[0], options);
    for (const int row : decode_rows(problem, options)) {
      SCOPED_TRACE(std::string(detail::selection_table()[size_t(row)].name));
      const Plan plan = plan_with_splits(problem, options, row, c.splits);
      ASSERT_EQ(plan.num_kv_splits, c.splits);
      void* workspace = nullptr;
      CUDA_OK(cudaMalloc(&workspace, plan.workspace_bytes));
      cudaStream_t stream = nullptr;
      CUDA_OK(cudaStreamCreate(&stream));
      for (int call = 0; call < kCalls; ++call) {
        out[size_t(call)]->poison_device();
        lse[size_t(call)]->poison_device();
      }
      for (int call = 0; call < kCalls; ++call)
        run(plan, device_tensors[size_t(call)], workspace, plan.workspace_bytes, stream);
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaStreamDestroy(stream));
      CUDA_OK(cudaFree(workspace));
      for (int call = 0; call < kCalls; ++call) {
        SCOPED_TRACE("call " + std::to_string(call));
        out[size_t(call)]->download();
        lse[size_t(call)]->download();
        const detail::cpu::ReferenceResult ref =
            detail::cpu::reference_attention(host_tensors[size_t(call)], options);
        compare(c, host_tensors[size_t(call)], ref, *out[size_t(call)], *lse[size_t(call)], plan);
      }
    }
  }
}

// rows x splits x Dv odd (one row, 3 splits, MLA-style v = k[..., :59]):
// the (max, sum) pairs of the split partials stay 8-byte aligned (placed
// after the outputs they sat 4 bytes off, a misaligned float2 access).
TEST(Decode, OddPartialSizes) {
  for (int splits : {0, 3}) {
    Case c;
    c.heads_q = c.heads_kv = 1;
    c.dqk = 64;
    c.dv = 59;
    c.v_aliases_k = true;
    c.len_k = 700;
    c.splits = splits;
    c.sinks = true;
    run_case(c);
  }
}

// The combine's blocks (decode_combine.cu: combine_rows_log2): 1050 rows
// outnumber a wave of blocks, so a block holds 2, 4 or 8 rows (the last
// block's partly past the end), with one or two split subsets a row at 2
// and 3 splits and up to four at 24 (where Dv 59 and 512 keep a row a
// block). Dv 59 takes one float a column group, 72 a group count that is
// no power of two, 512 two column parts a row.
TEST(Decode, CombineLayouts) {
  for (int64_t dv : {59, 64, 72, 128, 512}) {
    for (int splits : {2, 3, 24}) {
      Case c;
      c.batch = 7;
      c.heads_q = 15;
      c.heads_kv = 3;
      c.len_q = 10;
      c.dqk = dv == 59 ? 64 : dv;
      c.dv = dv;
      c.v_aliases_k = dv == 59;
      c.len_k = 600;  // short: quick under racecheck
      c.splits = splits;
      c.sinks = splits != 3;
      run_case(c);
    }
  }
}

// ------------------------------------------------------------ semantics

TEST(Decode, CausalFewQueries) {
  for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft})
    for (int64_t lq : {int64_t{2}, int64_t{5}, detail::cuda::kDecodeMaxLenQ})
      for (int64_t lk : {3, 37, 577}) {
        Case c;
        c.causal = true;
        c.align = align;
        c.len_q = lq;
        c.len_k = lk;
        c.heads_q = 8;
        c.heads_kv = 1;
        c.splits = lk > 100 ? 3 : 0;
        run_case(c);
      }
}

TEST(Decode, SlidingWindow) {
  for (int64_t lq : {1, 4}) {
    Case c;
    c.len_q = lq;
    c.len_k = 4099;
    c.causal = true;
    c.window = 128;
    c.heads_q = 64;
    c.heads_kv = 8;
    c.dqk = c.dv = 64;
    c.sinks = true;  // gpt-oss
    run_case(c);
    c.causal = false;
    c.window = 0;
    run_case(c);
  }
}

TEST(Decode, Masks) {
  for (MaskCase mask :
       {MaskCase::AdditiveF32, MaskCase::AdditiveF16, MaskCase::AdditiveBF16Broadcast,
        MaskCase::Boolean, MaskCase::BooleanFullyMaskedRow})
    for (int splits : {1, 5}) {
      Case c;
      c.mask = mask;
      c.len_q = 3;
      c.len_k = 577;
      c.splits = splits;
      c.causal = mask == MaskCase::Boolean;
      run_case(c);
    }
}

// The soft cap in every decode kernel: the CUDA-core (f32) and tensor-core
// split kernels over the head-dim buckets, with masks, sinks, causal rows
// and forced splits, and the MLA kernel; a cap that bites (2 under scale 1)
// and Gemma 2's 50.
TEST(Decode, SoftCap) {
  const std::pair<int64_t, int64_t> dims[] = {{64, 64}, {128, 128}, {256, 256}, {512, 512}};
  int k = 0;
  for (auto [dqk, dv] : dims)
    for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      Case c;
      c.dqk = dqk;
      c.dv = dv;
      c.dtype = dtype;
      c.len_q = 1 + k % 3;
      c.len_k = 577;
      c.softcap = k % 2 ? 50.0 : 2.0;
      c.scale = 1.0 / std::sqrt(double(dqk)) * (k % 2 ? 1.0 : 4.0);
      c.causal = k % 3 == 1;
      c.mask = k % 4 == 2 ? MaskCase::BooleanFullyMaskedRow : MaskCase::None;
      c.sinks = k % 2 == 0;
      c.splits = k % 3 == 0 ? 4 : 0;
      run_case(c);
      ++k;
    }
  Case c = mla_case();
  c.heads_q = 16;
  c.len_q = 2;
  c.len_k = 700;
  c.causal = true;
  c.mask = MaskCase::AdditiveF32;
  c.softcap = 3.0;
  c.scale = 0.2;
  c.splits = 4;
  run_case(c);
}

// Rows that are not 16-byte aligned: contiguous D = 59, 90, 100 (2-, 4- and
// 8-byte aligned 16-bit rows; f32 rows 4- and 8-byte), through the split
// kernels' narrow copies and element stores, with and without splits, BSHD,
// masks and sinks; MLA at a width whose rows are 8-byte aligned declines the
// wgmma kernel for the split one.
TEST(Decode, UnalignedRows) {
  int k = 0;
  for (int64_t d : {59, 90, 100})
    for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      Case c;
      c.dqk = c.dv = d;
      c.dtype = dtype;
      c.len_q = 1 + k % 4;
      c.len_k = 1153;
      c.bshd = k % 2 == 1;
      c.causal = k % 3 == 0;
      c.mask = k % 4 == 1 ? MaskCase::AdditiveF32 : MaskCase::None;
      c.sinks = k % 2 == 0;
      c.splits = k % 3 == 1 ? 1 : 0;
      run_case(c);
      ++k;
    }
  Case c = mla_case();
  c.dqk = 572;  // 1144-byte rows: 8-byte aligned
  c.dv = 500;
  c.heads_q = 16;
  c.len_q = 2;
  c.len_k = 400;
  c.causal = true;
  run_case(c);
}

// Contiguous rows that are not 16-byte aligned in 16-byte aligned tensors
// (every buffer here is one cudaMalloc): the tensor-core kernel copies each
// stage's rows as one span and reads its fragments by 32- and 16-bit loads
// (KvLoad::Packed), the columns past the head dims being the next row's.
// Every bucket, Dqk != Dv, 8- and 4-byte rows, spans that start anywhere in
// their 16-byte block (odd Lk: each head starts elsewhere), forced splits,
// the semantics.
TEST(Decode, PackedRows) {
  const std::pair<int64_t, int64_t> dims[] = {{60, 60},   {76, 76},   {90, 90},
                                              {122, 122}, {180, 122}, {250, 250},
                                              {318, 318}, {500, 500}, {572, 500}};
  int k = 0;
  for (auto [dqk, dv] : dims) {
    Case c;
    c.dqk = dqk, c.dv = dv;
    c.dtype = k % 2 == 0 ? DType::BF16 : DType::F16;
    c.batch = 1 + k % 2;
    c.heads_q = 8, c.heads_kv = k % 3 == 0 ? 8 : 2;
    c.len_q = 1 + k % 3;
    c.len_k = 1153 + 2 * k;
    c.causal = k % 2 == 1;
    if (k % 4 == 2) c.window = 300;
    c.sinks = k % 3 == 1;
    c.mask = k % 4 == 3 ? MaskCase::AdditiveF32 : MaskCase::None;
    c.splits = k % 3 == 2 ? 5 : 0;
    run_case(c);
    ++k;
  }
}

TEST(Decode, FullyMaskedRowsAndSinks) {
  // Bottom-right causal with Lq > Lk: the first rows see nothing.
  for (bool sinks : {false, true})
    for (int splits : {1, 4}) {
      Case c;
      c.causal = true;
      c.len_q = 9;
      c.len_k = 5;
      c.sinks = sinks;
      c.splits = splits;
      run_case(c);
    }
}

TEST(Decode, StridesAndLayouts) {
  Case c;
  c.bshd = true;
  c.len_q = 2;
  c.len_k = 577;
  run_case(c);
  c.dqk = 576;
  c.dv = 512;
  c.v_aliases_k = true;
  c.heads_q = 16;
  c.heads_kv = 1;
  run_case(c);
}

// ------------------------------------------------------------ errors

Problem decode_problem() {
  Problem p;
  p.batch = 1;
  p.heads_q = 8;
  p.heads_kv = 8;
  p.len_q = 1;
  p.len_k = 100;
  p.head_dim_qk = p.head_dim_v = 128;
  p.dtype = DType::BF16;
  p.device = {DeviceType::CUDA, 0};
  return p;
}

std::string decline(const Problem& p) {
  const detail::Verdict verdict = detail::cuda::decode_supports(p, {});
  EXPECT_FALSE(verdict.ok);
  return verdict.reason;
}

TEST(DecodeErrors, Reasons) {
  Problem p = decode_problem();
  EXPECT_TRUE(detail::cuda::decode_supports(p, {}).ok);
  p.len_q = 4096;
  EXPECT_EQ(decline(p), "len_q=4096 exceeds the decode limit " +
                            std::to_string(detail::cuda::kDecodeMaxLenQ) + " (prefill family)");
  p = decode_problem();
  p.head_dim_qk = 1040;
  EXPECT_EQ(decline(p), "head_dim_qk=1040 exceeds the largest fused size 576");
  p = decode_problem();
  p.head_dim_v = 600;
  EXPECT_EQ(decline(p), "head_dim_v=600 exceeds the largest fused size 512");
  p = decode_problem();
  p.row_alignment = 2;  // served: narrow copies
  EXPECT_TRUE(detail::cuda::decode_supports(p, {}).ok);
  p.row_alignment = 0;
  EXPECT_EQ(decline(p), "rows must have stride 1 (q, k, v, out)");
}

// The MLA row's reasons for declining; on an sm_90 device of a 90a build
// it takes the MLA problem itself.
TEST(DecodeErrors, MlaReasons) {
  if (!detail::cuda::decode_bucket_compiled(576, 512))
    GTEST_SKIP() << "bucket not compiled (FSDPA_HEAD_DIMS)";
  Problem mla = decode_problem();
  mla.heads_q = 128;
  mla.heads_kv = 1;
  mla.head_dim_qk = 576;
  mla.head_dim_v = 512;
  mla.v_aliases_k = true;
  auto reason = [](const Problem& p) { return detail::cuda::decode_mla_supports(p, {}).reason; };
  Problem p = mla;
  p.v_aliases_k = false;
  EXPECT_EQ(reason(p), "v is not a view of the first head_dim_v columns of k (MLA aliasing)");
  p = mla;
  p.dtype = DType::F32;
  EXPECT_EQ(reason(p), "dtype f32 is not one of f16, bf16");
  p = mla;
  p.head_dim_qk = 512;
  EXPECT_EQ(reason(p), "head_dim_qk=512: the MLA kernel serves 512 < head_dim_qk <= 576");
  p = mla;
  p.row_alignment = 8;
  EXPECT_EQ(reason(p), "rows are 8-byte aligned; the MLA kernel's TMA loads need 16 (q, k, out)");
  p = mla;
  p.len_q = 4096;  // the decode family's own limits come first
  EXPECT_EQ(reason(p), "len_q=4096 exceeds the decode limit " +
                           std::to_string(detail::cuda::kDecodeMaxLenQ) + " (prefill family)");
  int device = 0;
  cudaDeviceProp properties{};
  CUDA_OK(cudaGetDeviceProperties(&properties, device));
  const detail::Verdict verdict = detail::cuda::decode_mla_supports(mla, {});
  if (properties.major == 9 && properties.minor == 0) {
    EXPECT_TRUE(verdict.ok) << verdict.reason;  // device.sh builds FSDPA_CUDA_ARCHS=90a
  } else {
    EXPECT_EQ(verdict.reason, "compute capability " +
                                  std::to_string(properties.major * 10 + properties.minor) +
                                  " of device 0: the wgmma kernel runs on sm_90 (Hopper) only");
  }
}

TEST(DecodeErrors, ForceFusedNamesTheConstraint) {
  Problem p = decode_problem();
  p.head_dim_qk = 1040;
  Options options;
  options.policy = Policy::ForceFused;
  try {
    (void)plan(p, options);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim_qk=1040 exceeds the largest fused size 576"),
              std::string::npos)
        << e.what();
  }
}

TEST(DecodeErrors, SplitsVariable) {
  setenv("FSDPA_DECODE_SPLITS", "zero", 1);
  try {
    (void)plan(decode_problem(), {});
    unsetenv("FSDPA_DECODE_SPLITS");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    unsetenv("FSDPA_DECODE_SPLITS");
    EXPECT_NE(std::string(e.what()).find(
                  "FSDPA_DECODE_SPLITS: expected an integer from 1 to 4096, got 'zero'"),
              std::string::npos)
        << e.what();
  }
}

TEST(DecodePlan, SplitsFillTheGpu) {
  Problem p = decode_problem();
  p.heads_q = 32;
  p.len_k = 131072;
  const Plan plan = fsdpa::plan(p, {});
  EXPECT_EQ(plan.path, Path::FusedDecode);
  EXPECT_GT(plan.num_kv_splits, 8);
  EXPECT_EQ(plan.workspace_bytes,
            size_t(32) * size_t(plan.num_kv_splits) * size_t(128 + 2) * sizeof(float));
}

// Splits that merge in a cluster (a short key range on sm_90) need no
// workspace: the planner asks the launch's own rule of the device's binary.
TEST(DecodePlan, ClusterMergedSplitsNeedNoWorkspace) {
  Problem p = decode_problem();
  p.heads_q = 32;
  p.len_k = 384;
  const Plan plan = fsdpa::plan(p, {});
  EXPECT_EQ(plan.path, Path::FusedDecode);
  int device = 0, major = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) GTEST_SKIP() << "no clusters before sm_90";
  EXPECT_GE(plan.num_kv_splits, 2);
  EXPECT_LE(plan.num_kv_splits, 8);
  EXPECT_EQ(plan.workspace_bytes, 0u);
}

}  // namespace
