// Paged KV caches and ragged batches on the CPU backend: both CPU paths (the
// fused path and the float64 reference behind Policy::Unfused) against the
// dense per-sequence expectation of paged_case.h, and every error a bad block
// table, length or page pool raises.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "paged_case.h"

namespace fsdpa::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

Rng rng_for(const PagedCase& c) { return Rng(base_seed() ^ name_hash(c.name())); }

std::vector<PagedCase> paged_grid() {
  std::vector<PagedCase> cases;
  auto add = [&](auto&& edit) {
    PagedCase c;
    edit(c);
    cases.push_back(c);
  };
  // Page sizes below, at and above the fused path's key tile; one-key pages.
  for (int64_t page : {1, 3, 16, 64, 160})
    add([&](PagedCase& c) {
      c.page_size = page;
      c.max_pages = std::max<int64_t>(1, 300 / page);
    });
  for (DType dtype : {DType::BF16, DType::F32})
    add([&](PagedCase& c) {
      c.dtype = dtype;
      c.batch = 5;
    });
  // Semantics, each with ragged lengths: causal both ways, windows, masks,
  // sinks, the soft cap, no lse, several query rows (speculative decode) and
  // prefill-sized Lq on the CPU.
  add([](PagedCase& c) { c.causal = true, c.len_q = 4, c.batch = 4; });
  add([](PagedCase& c) {
    c.causal = true, c.align = CausalAlign::TopLeft, c.len_q = 7, c.batch = 3;
  });
  add([](PagedCase& c) { c.window = 5, c.causal = true, c.len_q = 3, c.batch = 4; });
  add([](PagedCase& c) { c.mask = true, c.len_q = 2, c.batch = 3; });
  add([](PagedCase& c) { c.sinks = true, c.batch = 3; });
  add([](PagedCase& c) { c.softcap = 30.0, c.len_q = 16; });
  add([](PagedCase& c) { c.lse = false, c.len_q = 5; });
  add([](PagedCase& c) { c.len_q = 37, c.causal = true, c.page_size = 8, c.max_pages = 9; });
  // GQA 1..16, head dims of every shape class, MLA's aliasing, padded
  // strides, a table without lengths (every sequence full).
  add([](PagedCase& c) { c.heads_q = c.heads_kv = 3; });
  add([](PagedCase& c) { c.heads_q = 16, c.heads_kv = 1, c.len_q = 2; });
  add([](PagedCase& c) { c.heads_q = 128, c.heads_kv = 1, c.dqk = c.dv = 16, c.max_pages = 2; });
  add([](PagedCase& c) { c.dqk = 72, c.dv = 72, c.padded = true; });
  add([](PagedCase& c) { c.dqk = 96, c.dv = 64; });
  add([](PagedCase& c) { c.dqk = 192, c.dv = 128, c.heads_q = c.heads_kv = 2; });
  add([](PagedCase& c) {
    c.dqk = 576, c.dv = 512, c.mla_alias = true, c.heads_q = 8, c.heads_kv = 1, c.page_size = 8;
    c.max_pages = 5;
  });
  add([](PagedCase& c) { c.ragged = false, c.batch = 3; });
  add([](PagedCase& c) { c.ragged = false, c.padded = true, c.causal = true, c.len_q = 3; });
  // Dense ragged batches.
  add([](PagedCase& c) { c.paged = false, c.batch = 4, c.causal = true, c.len_q = 2; });
  add([](PagedCase& c) { c.paged = false, c.batch = 3, c.mask = true, c.sinks = true; });
  // Lengths chosen: 1 key, a page edge, a page and one more, empty.
  add([](PagedCase& c) {
    c.batch = 5, c.page_size = 16, c.max_pages = 3, c.lengths = {1, 16, 17, 0, 48};
    c.causal = true, c.len_q = 2;
  });
  return cases;
}

class PagedVsExpectation : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedVsExpectation, BothCpuPathsMatch) {
  for (Policy policy : {Policy::ForceFused, Policy::Unfused}) {
    PagedCase c = GetParam();
    c.policy = policy;
    Rng rng = rng_for(c);
    PagedData d = make_paged(c, rng);
    const Plan plan = fsdpa::plan(describe(d.tensors, d.options), d.options);
    EXPECT_EQ(plan.problem.page_size, c.paged ? c.page_size : 0);
    EXPECT_EQ(plan.problem.has_seq_lens_k, c.ragged || !c.paged);
    if (c.paged) {
      EXPECT_THAT(plan.explain(), HasSubstr("paged: page_size="));
    }
    attention(d.tensors, d.options);
    const PagedCheck check = check_paged(d);
    EXPECT_TRUE(check.ok) << to_string(policy) << " " << plan.kernel << "\n" << check.report;
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, PagedVsExpectation, ::testing::ValuesIn(paged_grid()),
                         [](const ::testing::TestParamInfo<PagedCase>& param) {
                           return param.param.name();
                         });

// A paged call equals the dense call on the same keys: the reference on the
// pool against the reference on the gathered copy, exactly.
TEST(PagedReference, EqualsDenseOfTheSameKeys) {
  PagedCase c;
  c.batch = 3, c.page_size = 5, c.max_pages = 7, c.causal = true, c.len_q = 3, c.sinks = true;
  c.policy = Policy::Unfused;
  Rng rng = rng_for(c);
  PagedData d = make_paged(c, rng);
  const detail::cpu::ReferenceResult paged = detail::cpu::reference_attention(d.tensors, d.options);
  ASSERT_EQ(paged.out.size(), d.expected.out.size());
  for (size_t i = 0; i < paged.out.size(); ++i) ASSERT_EQ(paged.out[i], d.expected.out[i]) << i;
  for (size_t i = 0; i < paged.lse.size(); ++i) ASSERT_EQ(paged.lse[i], d.expected.lse[i]) << i;
}

// ------------------------------------------------------------------ errors

template <typename F>
void expect_invalid(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing \"" << text << "\"";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), StartsWith("fsdpa: "));
    EXPECT_THAT(e.what(), HasSubstr(text));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
  }
}

PagedData error_base(Rng& rng) {
  PagedCase c;
  c.batch = 3, c.page_size = 4, c.max_pages = 3, c.lengths = {12, 5, 0};
  return make_paged(c, rng);
}

void set_index(Storage& s, int64_t i, int32_t value) {
  s.set_bits(i, static_cast<uint32_t>(value));
}

TEST(PagedErrors, BlockTableIdOutOfThePool) {
  Rng rng(base_seed());
  PagedData d = error_base(rng);
  const int64_t pages = d.tensors.k.sizes[0];
  set_index(d.table, 1 * 3 + 1, static_cast<int32_t>(pages));  // sequence 1's second page
  expect_invalid([&] { attention(d.tensors, d.options); },
                 "block_table: element [1, 1] is " + std::to_string(pages) +
                     ", outside the pool's " + std::to_string(pages) + " pages");
  set_index(d.table, 1 * 3 + 1, -7);
  expect_invalid([&] { attention(d.tensors, d.options); }, "block_table: element [1, 1] is -7");
}

TEST(PagedErrors, UnusedTableEntriesAreNotRead) {
  Rng rng(base_seed());
  PagedData d = error_base(rng);
  set_index(d.table, 1 * 3 + 2, 1 << 30);  // past sequence 1's 5 keys (2 pages)
  set_index(d.table, 2 * 3 + 0, -1);       // sequence 2 is empty
  attention(d.tensors, d.options);
  EXPECT_TRUE(check_paged(d).ok);
}

// A table broadcast over 2^30 columns (stride 0: one id) is checked once,
// and a call on it costs its sequences' keys, not the capacity, in time and
// in memory.
TEST(PagedErrors, BroadcastTableIsCheckedOnce) {
  Rng rng(base_seed());
  PagedData d = error_base(rng);
  d.tensors.block_table->sizes[1] = int64_t{1} << 30;
  d.tensors.block_table->strides = {0, 0, 0, 0};
  set_index(d.table, 0, 1);
  for (int64_t b = 0; b < 3; ++b) set_index(d.lens, b, static_cast<int32_t>(2 + b));
  // Both paths: neither's workspace grows with the capacity (2^32 keys; the
  // reference's once held a score per key).
  for (Policy policy : {Policy::ForceFused, Policy::Unfused}) {
    d.options.policy = policy;
    attention(d.tensors, d.options);
    EXPECT_LT(plan(describe(d.tensors, d.options), d.options).workspace_bytes, size_t{1} << 24);
  }
  const Problem p = describe(d.tensors, d.options);
  EXPECT_EQ(p.len_k, int64_t{4} << 30);
  set_index(d.table, 0, -3);
  expect_invalid([&] { attention(d.tensors, d.options); }, "block_table: element [0, 0] is -3");
}

// The fuzzer's find: the index checks looped over a batch of 2^59 (q with
// no query rows, so no memory) although the call had neither table nor
// lengths. A call without them, or one that writes nothing, checks nothing.
TEST(PagedErrors, HugeBatchWithoutRowsDescribesAtOnce) {
  const int64_t batch = int64_t{1} << 59;
  Tensors t;
  t.q = strided_view(nullptr, DType::F16, {batch, 10, 0, 5}, {50, 5, 5, 1});
  t.k = strided_view(nullptr, DType::F16, {batch, 5, 0, 5}, {25, 5, 5, 1});
  t.v = t.k;
  t.out = t.q;
  Options o;
  o.policy = Policy::ForceFused;
  attention(t, o);
  EXPECT_EQ(describe(t, o).batch, batch);
}

// The fuzzer's second find: a k without elements (Dqk = 0) may carry any
// strides; the reference formed key offsets from them (signed overflow).
// Both paths give the mean of v (every score is 0).
TEST(PagedErrors, KeysWithoutColumnsAndHugeStrides) {
  std::vector<float> v(4 * 3 * 4 * 3, 0.5f), out(4 * 6 * 6 * 3, -1.0f), lse(4 * 6 * 6, 0.0f);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) * 0.25f;
  Tensors t;
  t.q = strided_view(nullptr, DType::F32, {4, 6, 6, 0}, {42, 0, 7, 7});
  t.k = strided_view(nullptr, DType::F32, {4, 3, 4, 0}, {3, 1, INT64_MAX, 1});
  t.v = contiguous_view(v.data(), DType::F32, {4, 3, 4, 3});
  t.out = contiguous_view(out.data(), DType::F32, {4, 6, 6, 3});
  t.lse = contiguous_view(lse.data(), DType::F32, {4, 6, 6});
  for (Policy policy : {Policy::Unfused, Policy::ForceFused}) {
    Options o;
    o.policy = policy;
    attention(t, o);
    // out[b, h, i, d] = mean over the 4 keys of kv head h / 2.
    const int64_t b = 3, h = 5, d = 2;
    double mean = 0;
    for (int64_t j = 0; j < 4; ++j)
      mean += v[static_cast<size_t>(((b * 3 + h / 2) * 4 + j) * 3 + d)];
    EXPECT_NEAR(out[static_cast<size_t>(((b * 6 + h) * 6 + 5) * 3 + d)], mean / 4, 1e-6)
        << to_string(policy);
  }
}

TEST(PagedErrors, LengthsOutOfRange) {
  Rng rng(base_seed());
  PagedData d = error_base(rng);
  set_index(d.lens, 2, 13);
  expect_invalid([&] { attention(d.tensors, d.options); },
                 "seq_lens_k: element 2 is 13, expected 0..12 (max_pages * page_size)");
  set_index(d.lens, 2, -1);
  expect_invalid([&] { attention(d.tensors, d.options); }, "seq_lens_k: element 2 is -1");
}

TEST(PagedErrors, LengthsPastDenseKeys) {
  PagedCase c;
  c.paged = false, c.batch = 2, c.page_size = 4, c.max_pages = 2;
  Rng rng = rng_for(c);
  PagedData d = make_paged(c, rng);
  set_index(d.lens, 1, 9);
  expect_invalid([&] { attention(d.tensors, d.options); },
                 "seq_lens_k: element 1 is 9, expected 0..8 (k's len_k)");
}

TEST(PagedErrors, Layouts) {
  Rng rng(base_seed());
  {
    PagedData d = error_base(rng);
    d.tensors.block_table->dtype = DType::F32;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "block_table: dtype must be i32, got f32");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.seq_lens_k->dtype = DType::BF16;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "seq_lens_k: dtype must be i32, got bf16");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.block_table->sizes[0] = 2;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "block_table: size 0 (batch) is 2, expected 3 (q's batch)");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.seq_lens_k->sizes[0] = 4;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "seq_lens_k: size 0 (batch) is 4, expected 3 (q's batch)");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.v.sizes[1] = 2;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "v: size 1 (page_size) is 2, expected 4 (k's page_size)");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.v.sizes[0] -= 1;
    expect_invalid([&] { attention(d.tensors, d.options); }, "v: size 0 (num_pages) is");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.k.sizes[1] = d.tensors.v.sizes[1] = 0;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "k: page_size (size 1) is 0; a page holds at least one key");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.block_table->rank = 1;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "block_table: expected rank 2 [B, max_pages], got rank 1");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.q.dtype = d.tensors.k.dtype = d.tensors.v.dtype = d.tensors.out.dtype = DType::I32;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "q: dtype i32 is not supported; use f16, bf16 or f32");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.out.data = d.table.bytes();
    d.tensors.out.dtype = DType::F16;
    expect_invalid([&] { attention(d.tensors, d.options); },
                   "out: overlaps the memory of block_table");
  }
  {
    PagedData d = error_base(rng);
    d.tensors.k.device = d.tensors.v.device = d.tensors.q.device =
        d.tensors.out.device = {DeviceType::CUDA, 0};
    if (d.tensors.lse) d.tensors.lse->device = {DeviceType::CUDA, 0};
    d.tensors.block_table->device = {DeviceType::CUDA, 0};
    expect_invalid([&] { describe(d.tensors, d.options); },
                   "seq_lens_k: on device cpu:0, expected q's device cuda:0");
    d.tensors.seq_lens_k->device = {DeviceType::CUDA, 0};
    d.tensors.block_table->data = static_cast<char*>(d.tensors.block_table->data) + 2;
    expect_invalid([&] { describe(d.tensors, d.options); },
                   "block_table: a CUDA i32 tensor must be 4-byte aligned");
  }
}

TEST(PagedErrors, MaskSpansTheCapacity) {
  PagedCase c;
  c.batch = 2, c.page_size = 4, c.max_pages = 3, c.mask = true;
  Rng rng = rng_for(c);
  PagedData d = make_paged(c, rng);
  d.tensors.mask->sizes[3] = 11;
  expect_invalid([&] { attention(d.tensors, d.options); },
                 "mask: size 3 (len_k) is 11, expected 1 or 12 (k's len_k)");
}

TEST(PagedErrors, RunChecksThePagedLayoutAgainstThePlan) {
  PagedCase c;
  c.batch = 3, c.page_size = 4, c.max_pages = 3, c.lengths = {12, 12, 12};
  Rng rng = rng_for(c);
  PagedData d = make_paged(c, rng);
  const Plan plan = fsdpa::plan(describe(d.tensors, d.options), d.options);
  std::vector<std::byte> workspace(plan.workspace_bytes + 1);
  Tensors other = d.tensors;
  other.seq_lens_k.reset();
  expect_invalid([&] { run(plan, other, workspace.data(), workspace.size()); },
                 "tensors do not match the plan: seq_lens_k is missing");
  // The same shape as a dense ragged batch.
  c.paged = false;
  PagedData dense = make_paged(c, rng);
  expect_invalid([&] { run(plan, dense.tensors, workspace.data(), workspace.size()); },
                 "tensors do not match the plan: page_size is 0, the plan was made for 4");
}

TEST(PagedPlan, ProblemChecks) {
  Problem p;
  p.batch = 1, p.heads_q = 1, p.heads_kv = 1, p.len_q = 1, p.len_k = 10;
  p.head_dim_qk = p.head_dim_v = 8, p.page_size = 4, p.num_pages = 3;
  expect_invalid([&] { plan(p); }, "problem: len_k=10 is not a multiple of page_size=4");
  p.page_size = 0;
  expect_invalid([&] { plan(p); }, "problem: num_pages=3 without a page_size");
}

#if FSDPA_WITH_CUDA
// On the GPU a paged cache runs the decode kernels; beyond their query limit
// nothing can serve it, and plan() says why (no GPU needed to plan).
TEST(PagedPlan, CudaPrefillOnPagesIsUnsupported) {
  Problem p;
  p.batch = 1, p.heads_q = 8, p.heads_kv = 8, p.len_q = 512, p.len_k = 1024;
  p.head_dim_qk = p.head_dim_v = 128, p.dtype = DType::BF16, p.device = {DeviceType::CUDA, 0};
  p.page_size = 16, p.num_pages = 64, p.has_seq_lens_k = true;
  p.matrices_blas_compatible = false;
  try {
    (void)plan(p);
    ADD_FAILURE() << "planned a paged prefill on the GPU";
  } catch (const Unsupported& e) {
    EXPECT_THAT(e.what(), HasSubstr("a paged KV cache (page_size=16) runs the decode kernels"));
  }
  p.len_q = 4;
  const Plan decode = plan(p);
  EXPECT_EQ(decode.kernel, "cuda_fused_decode");
  EXPECT_THAT(decode.explain(), HasSubstr("paged: page_size=16, 64 pages, 64 per sequence"));
}
#endif

}  // namespace
}  // namespace fsdpa::test
