// Paged KV caches and ragged batches on the GPU decode kernels, against the
// dense per-sequence float64 expectation of tests/common/paged_case.h: every
// decode bucket, page sizes 1 to 256, shuffled block tables, lengths from 0
// to 131073 in one batch, GQA up to 128, Lq up to 16, the semantics, rows of
// narrow alignment, forced key splits; and each paged run bitwise equal to
// the dense ragged run on the same keys.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/env_guard.h"
#include "common/paged_case.h"
#include "cuda/common/device.h"
#include "cuda/common/shared_budget.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_config.h"
#include "paged_device.h"
#include "splits_guard.h"

namespace fsdpa::test {
namespace {

using gpu_test::cuda_ok;
using gpu_test::DeviceCopy;
using gpu_test::SplitsGuard;

// The bytes of out after a run of `tensors` (device views of d's buffers).
std::vector<std::byte> run_and_read(PagedData& d, DeviceCopy& device) {
  d.out.poison();
  d.lse.poison();
  cuda_ok(cudaMemcpy(device.tensors.out.data, d.out.bytes(), d.out.size_bytes(),
                     cudaMemcpyHostToDevice),
          "poison out");
  attention(device.tensors, d.options);
  device.download();
  return d.out.snapshot();
}

// The dense ragged twin of a paged case: the same q, lengths, mask and
// sinks, k and v gathered into [B, Hkv, Lk, D] (zeros past each length).
struct DenseTwin {
  Storage k, v;
  Tensors tensors;
};
DenseTwin dense_twin(const PagedData& d) {
  const PagedCase& c = d.c;
  DenseTwin twin;
  const int64_t lk = c.capacity();
  twin.k = Storage(c.dtype, c.batch * c.heads_kv * lk * c.dqk);
  twin.v = Storage(c.dtype, c.batch * c.heads_kv * lk * c.dv);
  std::memset(twin.k.bytes(), 0, twin.k.size_bytes());
  std::memset(twin.v.bytes(), 0, twin.v.size_bytes());
  const size_t es = element_size(c.dtype);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t g = 0; g < c.heads_kv; ++g)
      for (int64_t j = 0; j < d.seq_len[size_t(b)]; ++j) {
        const int64_t row = (b * c.heads_kv + g) * lk + j;
        const int64_t ko = d.key_offset(d.tensors.k, b, g, j),
                      vo = d.key_offset(d.tensors.v, b, g, j);
        for (int64_t e = 0; e < c.dqk; ++e)
          std::memcpy(twin.k.bytes() + (row * c.dqk + e) * es,
                      static_cast<const std::byte*>(d.tensors.k.data) + (ko + e) * es, es);
        for (int64_t e = 0; e < c.dv; ++e)
          std::memcpy(twin.v.bytes() + (row * c.dv + e) * es,
                      static_cast<const std::byte*>(d.tensors.v.data) + (vo + e) * es, es);
      }
  twin.tensors = d.tensors;
  twin.tensors.block_table.reset();
  twin.tensors.k = contiguous_view(twin.k.bytes(), c.dtype, {c.batch, c.heads_kv, lk, c.dqk});
  twin.tensors.v = contiguous_view(twin.v.bytes(), c.dtype, {c.batch, c.heads_kv, lk, c.dv});
  return twin;
}

// NaN in every row of k's and v's storage that no sequence's keys occupy
// (pool rows past a sequence's length or of no sequence; dense keys past a
// sequence's length): the NaN/Inf policy says they contribute nothing,
// though the kernels read the partial pages and tiles that hold them.
void poison_unused_rows(PagedData& d) {
  const PagedCase& c = d.c;
  const int64_t slabs = c.paged ? d.tensors.k.sizes[0] : c.batch;  // pages, or sequences
  const int64_t rows = c.paged ? c.page_size : c.capacity();
  std::vector<char> used(static_cast<size_t>(slabs * rows), 0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < d.seq_len[size_t(b)]; ++j) {
      const int64_t slab = c.paged ? d.pages[size_t(b * c.max_pages + j / c.page_size)] : b;
      used[size_t(slab * rows + (c.paged ? j % c.page_size : j))] = 1;
    }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const TensorView* t : {&d.tensors.k, &d.tensors.v}) {
    // Paged [pages, page_size, Hkv, D]; dense [B, Hkv, Lk, D].
    const int64_t slab_stride = t->strides[0], row_stride = t->strides[c.paged ? 1 : 2],
                  head_stride = t->strides[c.paged ? 2 : 1];
    for (int64_t slab = 0; slab < slabs; ++slab)
      for (int64_t r = 0; r < rows; ++r) {
        if (used[size_t(slab * rows + r)]) continue;
        for (int64_t g = 0; g < c.heads_kv; ++g)
          for (int64_t e = 0; e < t->sizes[3]; ++e)
            detail::store_from_float(
                t->data, c.dtype,
                slab * slab_stride + r * row_stride + g * head_stride + e * t->strides[3], nan);
      }
  }
}

void run_case(PagedCase c, int splits, bool poison_unused = false) {
  SCOPED_TRACE(c.name() + " splits " + std::to_string(splits) +
               (poison_unused ? " NaN in the unused rows" : ""));
  if (!detail::cuda::decode_bucket_compiled(c.dqk, c.dv))
    GTEST_SKIP() << "bucket not compiled (FSDPA_HEAD_DIMS)";
  Rng rng(base_seed() ^ name_hash(c.name()) ^ uint64_t(splits));
  PagedData d = make_paged(c, rng);
  if (poison_unused) poison_unused_rows(d);
  SplitsGuard guard(splits);
  DeviceCopy device(d);
  const Problem problem = describe(device.tensors, d.options);
  const Plan plan = fsdpa::plan(problem, d.options);
  // Past the decode limit only MLA's layout runs fused on a paged cache (the
  // MLA kernel, row cuda_fused_prefill_mla).
  EXPECT_EQ(plan.path,
            c.len_q <= detail::cuda::kDecodeMaxLenQ ? Path::FusedDecode : Path::FusedPrefill)
      << plan.explain();
  if (c.mla_alias && c.dqk > 512 && c.dtype != DType::F32) {
    // Where the MLA kernel runs at all (sm_90, a 90a build: its decode row
    // takes the case with one query row and pages of 64), it takes every
    // page size but those its boxes cannot tile.
    Problem probe = problem;
    probe.len_q = 1;
    probe.page_size = 64;
    const bool mla_pages =
        !c.paged || c.page_size == 8 || c.page_size == 16 || c.page_size % 32 == 0;
    if (detail::cuda::decode_mla_supports(probe, d.options).ok) {
      EXPECT_EQ(plan.kernel.find("_mla") != std::string::npos, mla_pages) << plan.explain();
    }
  }
  const std::vector<std::byte> paged = run_and_read(d, device);
  const PagedCheck check = check_paged(d);
  EXPECT_TRUE(check.ok) << plan.kernel << ", " << plan.num_kv_splits << " splits\n" << check.report;
  // (The dense twin of a poisoned case holds zeros where the pool holds NaN:
  // the rows that read them are recomputed, so the bits differ.)
  if (!c.paged || !c.ragged || poison_unused) return;
  // The same keys dense: the same kernel reads the same values, so the same bits.
  DenseTwin twin = dense_twin(d);
  PagedData dense_host;  // only its storages travel: q, out, lse, mask, sinks, lens
  dense_host.c = c;
  dense_host.q = std::move(d.q);
  dense_host.out = std::move(d.out);
  dense_host.lse = std::move(d.lse);
  dense_host.mask = std::move(d.mask);
  dense_host.sinks = std::move(d.sinks);
  dense_host.lens = std::move(d.lens);
  dense_host.k = std::move(twin.k);
  dense_host.v = std::move(twin.v);
  dense_host.tensors = twin.tensors;
  dense_host.tensors.k.data = dense_host.k.bytes();
  dense_host.tensors.v.data = c.mla_alias ? dense_host.k.bytes() : dense_host.v.bytes();
  if (c.mla_alias) dense_host.tensors.v.strides = dense_host.tensors.k.strides;
  dense_host.options = d.options;
  DeviceCopy dense_device(dense_host);
  const std::vector<std::byte> dense = run_and_read(dense_host, dense_device);
  // A page size the MLA kernel cannot tile runs the generic kernel, the dense
  // twin the MLA one: the reference check above is then the comparison.
  if (fsdpa::plan(describe(dense_device.tensors, d.options), d.options).kernel != plan.kernel) {
    EXPECT_TRUE(c.mla_alias) << plan.explain();
    return;
  }
  EXPECT_TRUE(dense == paged) << "the paged output differs from the dense output of the same keys";
}

PagedCase base() {
  PagedCase c;
  c.dtype = DType::BF16;
  c.batch = 4, c.heads_q = 8, c.heads_kv = 2, c.page_size = 16, c.max_pages = 40;
  return c;
}

TEST(PagedDecode, HeadDimBuckets) {
  const std::pair<int64_t, int64_t> dims[] = {{64, 64},   {80, 80},   {96, 64},   {128, 128},
                                              {192, 128}, {256, 256}, {288, 288}, {512, 512}};
  for (auto [dqk, dv] : dims) {
    PagedCase c = base();
    c.dqk = dqk, c.dv = dv;
    run_case(c, 0);
  }
  PagedCase mla = base();
  mla.dqk = 576, mla.dv = 512, mla.mla_alias = true, mla.heads_q = 16, mla.heads_kv = 1;
  mla.page_size = 64, mla.max_pages = 20;
  run_case(mla, 0);
}

// MLA's latent cache in pages on the MLA kernel: boxes of 8 and 16 rows (a
// tile spans 4 or 2 pages), whole pages of 32 and 128 rows, 48 (the generic
// kernel), key splits odd (staged partials) and even (split pairs), a window
// (tiles start below the first visible key), a dense ragged batch, a full
// table, and a paged prefill past the decode limit.
TEST(PagedDecode, MlaPages) {
  PagedCase mla = base();
  mla.dqk = 576, mla.dv = 512, mla.mla_alias = true, mla.heads_q = 16, mla.heads_kv = 1;
  mla.batch = 3;
  struct Run {
    int64_t page, pages;
    int splits;
  };
  for (const Run& r :
       {Run{8, 150, 0}, Run{16, 70, 5}, Run{32, 40, 4}, Run{128, 9, 0}, Run{48, 25, 0}}) {
    PagedCase c = mla;
    c.page_size = r.page, c.max_pages = r.pages;
    c.dtype = r.page == 16 ? DType::F16 : DType::BF16;
    run_case(c, r.splits);
  }
  {
    PagedCase c = mla;
    c.page_size = 16, c.max_pages = 60;
    c.window = 77, c.causal = true, c.len_q = 3, c.sinks = true;
    run_case(c, 3);
  }
  {
    PagedCase c = mla;
    c.paged = false, c.max_pages = 30;  // dense k with per-sequence lengths
    run_case(c, 2);
  }
  {
    PagedCase c = mla;
    c.ragged = false, c.page_size = 64, c.max_pages = 12, c.mask = true;
    run_case(c, 0);
  }
  {
    PagedCase c = mla;
    c.len_q = 37, c.causal = true, c.page_size = 16, c.max_pages = 40;
    run_case(c, 0);
  }
}

// One sequence plans no list, so even key splits run as split pairs
// (two-block clusters) also where its own length ends in a pair's first
// split: that pair's second block has no keys and still stages its empty rows
// for the partner's merge. Lengths 0, 40 (one split) and 300 (three) of a
// capacity of 480, dense and paged; two splits (the pair writes out) and four.
TEST(PagedDecode, MlaPairsPastTheLength) {
  PagedCase mla = base();
  mla.dqk = 576, mla.dv = 512, mla.mla_alias = true, mla.heads_q = 16, mla.heads_kv = 1;
  mla.batch = 1, mla.max_pages = 30;
  for (const bool paged : {false, true})
    for (const int splits : {2, 4})
      for (const int32_t length : {0, 40, 300}) {
        PagedCase c = mla;
        c.paged = paged, c.lengths = {length};
        run_case(c, splits);
      }
}

TEST(PagedDecode, PageSizes) {
  for (int64_t page : {1, 16, 64, 256, 48}) {
    PagedCase c = base();
    c.dqk = c.dv = 128;
    c.page_size = page, c.max_pages = std::max<int64_t>(1, 1200 / page);
    run_case(c, 0);
  }
}

// Pages of a multiple of 16 rows on sm_90 arrive as TMA boxes (in every
// bucket of whole 64-column panels: 128, and 320 for D=288), others by the
// row gather; the plan says which.
TEST(PagedDecode, PlanNamesTheLoads) {
  const bool sm90 = detail::cuda::device_info(0).compute_capability >= 90;
  bool ran = false;
  for (int64_t dim : {128, 288}) {
    if (!detail::cuda::decode_bucket_compiled(dim, dim)) continue;
    ran = true;
    for (int64_t page : {1, 16, 48, 64}) {
      PagedCase c = base();
      c.dqk = c.dv = dim;
      c.page_size = page, c.max_pages = std::max<int64_t>(1, 1200 / page);
      Rng rng(base_seed() ^ uint64_t(page));
      PagedData d = make_paged(c, rng);
      DeviceCopy device(d);
      const Plan plan = fsdpa::plan(describe(device.tensors, d.options), d.options);
      const bool boxes = sm90 && page % 16 == 0;
      EXPECT_EQ(plan.loads.rfind("TMA boxes of 16 rows of a page", 0) == 0, boxes)
          << "D " << dim << ", page " << page << ": " << plan.loads;
    }
  }
  if (!ran) GTEST_SKIP() << "buckets 128 and 320 not compiled (FSDPA_HEAD_DIMS)";
}

TEST(PagedDecode, DtypesAndSplits) {
  for (DType dtype : {DType::F16, DType::BF16, DType::F32})
    for (int splits : {1, 5}) {
      PagedCase c = base();
      c.dtype = dtype;
      c.dqk = c.dv = 128;
      run_case(c, splits);
    }
}

TEST(PagedDecode, GqaAndQueries) {
  for (auto [hq, hkv] : {std::pair{4, 4}, {32, 8}, {128, 1}}) {
    PagedCase c = base();
    c.heads_q = hq, c.heads_kv = hkv;
    run_case(c, 0);
  }
  for (int64_t lq : {2, 4, 8, 16}) {
    PagedCase c = base();
    c.len_q = lq, c.causal = true, c.dqk = c.dv = 128;
    run_case(c, 0);
  }
}

TEST(PagedDecode, Semantics) {
  {
    PagedCase c = base();
    c.causal = true, c.align = CausalAlign::TopLeft, c.len_q = 3;
    run_case(c, 0);
  }
  {
    PagedCase c = base();
    c.window = 37, c.causal = true, c.len_q = 2;
    run_case(c, 3);
  }
  {
    PagedCase c = base();
    c.mask = true, c.sinks = true, c.len_q = 2;
    run_case(c, 0);
  }
  {
    PagedCase c = base();
    c.softcap = 30.0, c.lse = false;
    run_case(c, 0);
  }
  {
    PagedCase c = base();
    c.ragged = false;  // every sequence its table's full capacity
    run_case(c, 0);
  }
  {
    PagedCase c = base();
    c.paged = false, c.causal = true, c.len_q = 4;  // a dense ragged batch
    run_case(c, 0);
  }
}

TEST(PagedDecode, UnusedRowsContributeNothing) {
  for (int64_t page_size : {16, 64}) {
    PagedCase c = base();
    c.page_size = page_size, c.max_pages = 2048 / page_size;
    for (int splits : {1, 4}) run_case(c, splits, true);
    c.dtype = DType::F32;
    run_case(c, 0, true);
  }
  // Boxes of the buckets whose warps start inside a 64-column panel of V
  // (192/128: 32 columns a warp; 320: 80), with tail columns in the 320's.
  for (auto [dqk, dv] : {std::pair<int64_t, int64_t>{192, 128}, {288, 288}}) {
    PagedCase c = base();
    c.dqk = dqk, c.dv = dv, c.max_pages = 60;
    run_case(c, 3, true);
  }
  PagedCase c = base();
  c.paged = false, c.len_q = 2;  // a dense ragged batch
  run_case(c, 0, true);
  c = base();
  c.mla_alias = true, c.dqk = 576, c.dv = 512, c.heads_kv = 1, c.heads_q = 16, c.page_size = 64;
  run_case(c, 0, true);
}

TEST(PagedDecode, NarrowRowsAndPaddedPools) {
  PagedCase c = base();
  c.dtype = DType::F16;
  c.dqk = c.dv = 90;  // 180-byte rows: 4-byte aligned
  run_case(c, 0);
  c.dqk = c.dv = 128;
  c.padded = true;  // pages and rows padded by 3 elements: 2-byte aligned
  run_case(c, 0);
}

TEST(PagedDecode, MixedLengthsToLongContext) {
  PagedCase c = base();
  c.dqk = c.dv = 128, c.heads_q = 8, c.heads_kv = 1, c.batch = 5, c.page_size = 64;
  c.max_pages = 2049;  // 131136 keys
  c.lengths = {1, 131073, 4097, 0, 64};
  run_case(c, 0);
}

// --------------------------------------------------------------- smaller GPUs

// The tensor-core decode kernel under the shared memory of an A100 (163 KB a
// block) and of sm_86/sm_89 (99 KB): every bucket takes its tiling for that
// budget (decode_config.h's decode_mma_config), fused and right, paged and
// dense, MLA's aliased cache (which the wgmma MLA kernel, sized for sm_90,
// then leaves to it) and the unaliased 576/512 among them.
struct BudgetCase {
  int shared_class;
  PagedCase c;
  int splits;
};

std::vector<BudgetCase> budget_cases() {
  const std::pair<int64_t, int64_t> dims[] = {{64, 64},   {96, 64},   {128, 128}, {192, 128},
                                              {256, 256}, {288, 288}, {320, 320}, {512, 512},
                                              {576, 512}, {576, 512}};
  std::vector<BudgetCase> cases;
  int k = 0;
  for (int shared_class = 1; shared_class < detail::cuda::kSharedClasses; ++shared_class)
    for (size_t i = 0; i < std::size(dims); ++i) {
      PagedCase c = base();
      c.dqk = dims[i].first, c.dv = dims[i].second;
      c.dtype = k % 2 ? DType::F16 : DType::BF16;
      c.mla_alias = i == std::size(dims) - 1;
      if (c.dqk == 576) c.heads_q = 16, c.heads_kv = 1;
      c.paged = k % 3 != 2;  // else a dense ragged batch
      c.page_size = k % 4 == 1 ? 64 : (k % 4 == 3 ? 1 : 16);
      c.max_pages = std::max<int64_t>(1, 640 / c.page_size);
      c.len_q = k % 5 == 3 ? 4 : 1;
      c.causal = c.len_q > 1;
      c.window = k % 7 == 4 ? std::optional<int64_t>(100) : std::nullopt;
      c.sinks = k % 3 == 1;
      c.softcap = k % 6 == 5 ? 30.0 : 0.0;
      cases.push_back({shared_class, c, k % 2 ? 3 : 0});
      ++k;
    }
  return cases;
}

class PagedSharedBudgets : public ::testing::TestWithParam<BudgetCase> {};
TEST_P(PagedSharedBudgets, MatchesReference) {
  const BudgetCase& b = GetParam();
  const PagedCase& c = b.c;
  if (!detail::cuda::decode_bucket_compiled(c.dqk, c.dv))
    GTEST_SKIP() << "bucket not compiled (FSDPA_HEAD_DIMS)";
  const EnvGuard limit("FSDPA_SHARED_MEMORY_LIMIT",
                       std::to_string(detail::cuda::kSharedBudgets[b.shared_class]).c_str());
  Rng rng(base_seed() ^ name_hash(c.name()));
  PagedData d = make_paged(c, rng);
  DeviceCopy device(d);
  const Plan plan = fsdpa::plan(describe(device.tensors, d.options), d.options);
  EXPECT_EQ(plan.kernel, "cuda_fused_decode") << plan.explain();
  const detail::cuda::DecodeMmaConfig tiling = detail::cuda::decode_mma_config(
      int(plan.head_dim_qk_bucket), int(plan.head_dim_v_bucket), b.shared_class);
  EXPECT_EQ(plan.tile_k, tiling.keys_per_stage) << plan.explain();
  run_case(c, b.splits);
}
INSTANTIATE_TEST_SUITE_P(
    Grid, PagedSharedBudgets, ::testing::ValuesIn(budget_cases()), [](const auto& test_info) {
      return test_info.param.c.name() + "_splits" + std::to_string(test_info.param.splits) +
             "_smem" +
             std::to_string(detail::cuda::kSharedBudgets[test_info.param.shared_class] / 1024) +
             "k";
    });

}  // namespace
}  // namespace fsdpa::test
