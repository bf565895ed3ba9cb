// The fused prefill family on the GPU against the float64 CPU reference:
// every compiled bucket and head dims between buckets, every semantic,
// poisoned outputs, LSE, and the messages of the constraints it declines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/env_guard.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_config.h"
#include "cuda/prefill/config.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/simt_f32.h"
#include "gpu_case.h"

namespace fsdpa::gpu_test {
namespace {

bool compiled_bucket(int64_t qk_bucket, int64_t dv_bucket) {
  for (const auto& pair : detail::cuda::prefill_bucket_pairs())
    if (pair.compiled && pair.head_dim_qk_bucket >= qk_bucket &&
        pair.head_dim_v_bucket >= dv_bucket)
      return true;
  return false;
}

bool compiled_exactly(int64_t qk_bucket, int64_t dv_bucket) {
  for (const auto& pair : detail::cuda::prefill_bucket_pairs())
    if (pair.compiled && pair.head_dim_qk_bucket == qk_bucket &&
        pair.head_dim_v_bucket == dv_bucket)
      return true;
  return false;
}

int64_t bucket(int64_t d) { return std::max<int64_t>(16, (d + 15) / 16 * 16); }

// Whether the build has a 16-bit kernel for the head dims: a Dv above 256
// runs in column slices, so the pair's Dv bucket is that of a slice.
bool compiled_for(int64_t dqk, int64_t dv) {
  return compiled_bucket(bucket(dqk), bucket(detail::cuda::v_slice_columns(dv)));
}

// Whether the MLA kernel (cuda_fused_prefill_mla) is built for the case's layout.
bool mla_kernel_for(const Case& c) {
  return c.layout == Layout::MlaAlias && c.head_dim_qk > 512 &&
         detail::cuda::decode_bucket_compiled(576, 512);
}

void expect_case(const Case& c) {
  const bool buckets_compiled = c.dtype == DType::F32 || compiled_for(c.head_dim_qk, c.head_dim_v);
  if (!buckets_compiled && !mla_kernel_for(c))
    GTEST_SKIP() << "bucket not compiled into this build (FSDPA_HEAD_DIMS)";
  std::mt19937_64& rng = test_rng();
  const std::mt19937_64 inputs = rng;  // every run below draws the very same inputs
  const double tol = tolerance(c.dtype, c.allow_tf32);
  Case unfused_case = c;
  unfused_case.policy = Policy::Unfused;
  std::mt19937_64 unfused_inputs = inputs;
  const Outcome unfused = run_case(unfused_case, unfused_inputs);
  EXPECT_EQ(unfused.unwritten, 0);
  EXPECT_LE(unfused.relative_error, tol);
  int rows_run = 0;  // the wgmma row declines head dims above its buckets
  for (const std::string& row : prefill_rows(c.dtype)) {
    Case fused_case = c;
    fused_case.row = row;
    std::mt19937_64 fused_inputs = inputs;
    const Outcome fused = run_case(fused_case, fused_inputs);
    if (!fused.declined.empty()) {
      // The last row serves every case its build has the buckets for.
      if (buckets_compiled) {
        EXPECT_NE(row, prefill_rows(c.dtype).back()) << fused.declined;
      }
      continue;
    }
    ++rows_run;
    SCOPED_TRACE(c.name() + "\n" + fused.plan.explain());
    EXPECT_EQ(fused.plan.path, Path::FusedPrefill);
    EXPECT_EQ(fused.unwritten, 0);
    EXPECT_EQ(fused.padding_touched, 0);
    EXPECT_LE(fused.relative_error, tol);
    EXPECT_LE(fused.lse_error, c.dtype == DType::F32 ? 1e-5 : 1e-3);
    // No more than 2x the error of the unfused path at the same precision,
    // with a floor of one unit roundoff u of the dtype, widened where the
    // outputs are few: the fused kernel rounds P and the output to the
    // dtype, and the norm of n such roundings strays by ~1/sqrt(n) of itself
    // (a D=1 case of 34 outputs passed u, bench/NOTES.md, session 26).
    const double unit = c.dtype == DType::BF16 ? 0x1p-8 : c.dtype == DType::F16 ? 0x1p-11 : 0x1p-24;
    const double outputs = std::max<double>(1.0, static_cast<double>(fused.out.size()));
    const double roundoff = unit * (1.0 + 2.0 / std::sqrt(outputs));
    EXPECT_LE(fused.relative_error, std::max({2.0 * unfused.relative_error, tol / 4, roundoff}));
  }
  EXPECT_GE(rows_run, 1);
  rng = unfused_inputs;  // the next case draws fresh inputs
}

// A causal chunk of MLA's absorbed prefill: 576/512 with v a view of k's
// first 512 columns, one kv head, 97 queries on 333 keys.
Case mla_chunk_case(int64_t heads_q) {
  Case c;
  c.head_dim_qk = 576;
  c.head_dim_v = 512;
  c.layout = Layout::MlaAlias;
  c.heads_q = heads_q;
  c.heads_kv = 1;
  c.len_q = 97;
  c.len_k = 333;
  c.causal = true;
  return c;
}

// --------------------------------------------------------------- buckets

std::vector<Case> bucket_cases() {
  std::vector<Case> cases;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const auto& pair : detail::cuda::prefill_bucket_pairs()) {
    for (int64_t delta : {0, 5}) {
      Case c;
      c.head_dim_qk = std::max<int64_t>(1, pair.head_dim_qk_bucket - delta);
      c.head_dim_v = std::max<int64_t>(1, pair.head_dim_v_bucket - delta);
      if (!seen.insert({c.head_dim_qk, c.head_dim_v}).second) continue;
      c.dtype = delta == 0 ? DType::BF16 : DType::F16;
      c.len_q = 97;
      c.len_k = 131;
      cases.push_back(c);
    }
  }
  return cases;
}

class PrefillBuckets : public ::testing::TestWithParam<Case> {};
TEST_P(PrefillBuckets, MatchesReference) { expect_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Grid, PrefillBuckets, ::testing::ValuesIn(bucket_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

// --------------------------------------------------------------- awkward sizes

std::vector<Case> awkward_cases() {
  std::vector<Case> cases;
  for (int64_t d : {1, 8, 59, 72, 90, 111, 200, 256})
    for (DType dtype : {DType::BF16, DType::F16}) {
      Case c;
      c.head_dim_qk = c.head_dim_v = d;
      c.dtype = dtype;
      c.len_q = 17;
      c.len_k = 577;
      cases.push_back(c);
    }
  // Lengths: 1, odd, Lq > Lk, one tile, many tiles.
  for (auto [lq, lk] :
       {std::pair<int64_t, int64_t>{1, 1}, {1, 577}, {37, 1}, {577, 97}, {4099, 17}, {129, 4099}})
    for (bool causal : {false, true}) {
      Case c;
      c.len_q = lq;
      c.len_k = lk;
      c.causal = causal;
      c.head_dim_qk = c.head_dim_v = 128;
      cases.push_back(c);
    }
  // Asymmetric pairs and a pair with no compiled bucket of its own.
  for (auto [qk, dv] : {std::pair<int64_t, int64_t>{96, 64}, {192, 128}, {72, 40}, {40, 200}}) {
    Case c;
    c.head_dim_qk = qk;
    c.head_dim_v = dv;
    cases.push_back(c);
  }
  // Above 256: Dv in column slices, head dims on and between the buckets
  // (300 and 440 pad to 320 and 448), Dqk > 256 with a narrow Dv, Dv > 256
  // with a narrow Dqk, GQA, causal, the soft cap, f16 and bf16.
  {
    const std::pair<int64_t, int64_t> large[] = {{288, 288}, {300, 300}, {320, 320}, {384, 384},
                                                 {440, 440}, {512, 512}, {576, 512}, {576, 64},
                                                 {64, 512},  {288, 200}};
    int k = 0;
    for (auto [qk, dv] : large) {
      Case c;
      c.head_dim_qk = qk;
      c.head_dim_v = dv;
      c.dtype = k % 2 ? DType::F16 : DType::BF16;
      c.len_q = k % 3 ? 131 : 17;
      c.len_k = k % 3 ? 211 : 577;
      c.heads_q = 4;
      c.heads_kv = k % 2 ? 4 : 1;
      c.causal = k % 2 == 0;
      c.sinks = k % 3 == 1;
      c.softcap = k % 4 == 3 ? 30.0 : 0.0;
      cases.push_back(c);
      ++k;
    }
  }
  {  // MLA's absorbed prefill chunk: v a view of k's first 512 columns
    Case c = mla_chunk_case(16);
    cases.push_back(c);
    c.mask = MaskKind::Boolean;  // and every semantic at once
    c.fully_masked_rows = true;
    c.sinks = true;
    c.window = 50;
    c.dtype = DType::F16;
    cases.push_back(c);
  }
  // The MLA kernel past the decode limit (cuda_fused_prefill_mla): position
  // blocks of one head (Lq a multiple of 64: the causal grid runs the late
  // rows first), blocks of several heads (Lq = 33), Lq > Lk bottom-right
  // (fully masked rows, whole blocks without keys), top-left, many heads on
  // few keys (key splits, split pairs), windows, masks, the soft cap, no lse;
  // Lq = 64 and 32, whose Q comes by TMA (a box of 64 / Lq heads).
  {
    struct Mla {
      int64_t heads_q, len_q, len_k;
      bool causal;
      CausalAlign align;
    };
    const Mla mla[] = {{16, 256, 256, true, CausalAlign::BottomRight},
                       {4, 200, 1000, true, CausalAlign::TopLeft},
                       {2, 320, 100, true, CausalAlign::BottomRight},
                       {128, 33, 1031, false, CausalAlign::BottomRight},
                       {8, 192, 700, true, CausalAlign::BottomRight},
                       {8, 64, 300, true, CausalAlign::BottomRight},
                       {6, 32, 130, false, CausalAlign::BottomRight}};
    int k = 0;
    for (const Mla& m : mla) {
      Case c;
      c.head_dim_qk = 576;
      c.head_dim_v = 512;
      c.layout = Layout::MlaAlias;
      c.heads_q = m.heads_q;
      c.heads_kv = 1;
      c.len_q = m.len_q;
      c.len_k = m.len_k;
      c.causal = m.causal;
      c.align = m.align;
      c.dtype = k % 2 ? DType::F16 : DType::BF16;
      c.lse = k != 3;
      if (k == 1) c.window = 90;
      if (k == 3) c.mask = MaskKind::Additive, c.mask_dtype = DType::BF16;
      if (k == 4) c.softcap = 30.0, c.sinks = true;
      cases.push_back(c);
      ++k;
    }
  }
  // The wide row (the MLA kernel with V tiles of its own) where the cases
  // above do not take it: Q by TMA (Lq = 64 and 32: a box of 64 / Lq heads),
  // the causal grid's late rows first (Lq a multiple of 64), few rows on
  // many keys (key splits and split pairs), 330/330 padded into the 384
  // shape, a window and a mask, the soft cap with sinks.
  {
    struct Wide {
      int64_t qk, dv, heads_q, heads_kv, len_q, len_k;
      bool causal;
    };
    const Wide wide[] = {{384, 384, 4, 2, 64, 300, true},   {576, 512, 8, 4, 32, 130, false},
                         {330, 330, 2, 1, 128, 700, true},  {576, 512, 2, 2, 40, 3000, false},
                         {384, 300, 4, 4, 100, 900, false}, {520, 400, 2, 1, 192, 500, true}};
    int k = 0;
    for (const Wide& w : wide) {
      Case c;
      c.head_dim_qk = w.qk;
      c.head_dim_v = w.dv;
      c.heads_q = w.heads_q;
      c.heads_kv = w.heads_kv;
      c.len_q = w.len_q;
      c.len_k = w.len_k;
      c.causal = w.causal;
      c.dtype = k % 2 ? DType::F16 : DType::BF16;
      if (k == 3) c.window = 200;
      if (k == 4) c.mask = MaskKind::Additive, c.mask_dtype = DType::F16;
      if (k == 5) c.softcap = 30.0, c.sinks = true;
      cases.push_back(c);
      ++k;
    }
  }
  // Layouts: contiguous BHSD/BSHD where aligned, K/V interleaved in one buffer.
  for (Layout layout : {Layout::BHSD, Layout::BSHD, Layout::Interleaved}) {
    Case c;
    c.layout = layout;
    c.head_dim_qk = c.head_dim_v = 64;
    c.batch = 2;
    cases.push_back(c);
  }
  // Rows that are not 16-byte aligned, fused through narrow copies: contiguous
  // BHSD at D = 59, 76, 90, 100 (118-, 152-, 180-, 200-byte bf16 rows: 2-,
  // 8-, 4-, 8-byte aligned), base pointers one element off (2 bytes), BSHD
  // slices of an odd width; causal, GQA, the soft cap on some.
  {
    int k = 0;
    for (int64_t d : {59, 76, 90, 100})
      for (DType dtype : {DType::BF16, DType::F16}) {
        Case c;
        c.layout = Layout::BHSD;
        c.head_dim_qk = c.head_dim_v = d;
        c.dtype = dtype;
        c.len_q = 131;
        c.len_k = 257;
        c.heads_q = 4;
        c.heads_kv = k % 2 ? 2 : 4;
        c.causal = k % 2 == 0;
        c.softcap = k % 3 == 2 ? 20.0 : 0.0;
        cases.push_back(c);
        ++k;
      }
    // The narrow load stage under every masking rule: tails of the query and
    // key tiles, top-left and bottom-right causal, a window with sinks, an
    // additive mask with the soft cap, a boolean mask with empty rows, Lq >
    // Lk, GQA, column slices (300/300: 600-byte rows). The buckets up to 176
    // take the staged load stage, 204 (408-byte rows, bucket 208) and 300
    // the cp.async pieces.
    struct Narrow {
      int64_t d, len_q, len_k;
      DType dtype;
    };
    const Narrow narrow[] = {{90, 200, 388, DType::BF16},  {76, 130, 258, DType::F16},
                             {100, 256, 512, DType::BF16}, {90, 300, 100, DType::F16},
                             {300, 130, 260, DType::BF16}, {90, 128, 1000, DType::BF16},
                             {204, 150, 300, DType::F16}};
    int n = 0;
    for (const Narrow& x : narrow) {
      Case c;
      c.layout = Layout::BHSD;
      c.head_dim_qk = c.head_dim_v = x.d;
      c.dtype = x.dtype;
      c.len_q = x.len_q;
      c.len_k = x.len_k;
      c.heads_q = 4;
      c.heads_kv = n % 2 ? 4 : 2;
      c.causal = n != 5;
      c.align = n == 1 ? CausalAlign::TopLeft : CausalAlign::BottomRight;
      if (n == 1) c.window = 70, c.sinks = true;
      if (n == 2) c.mask = MaskKind::Additive, c.softcap = 30.0;
      if (n == 5) c.mask = MaskKind::Boolean, c.fully_masked_rows = true;
      cases.push_back(c);
      ++n;
    }
    for (Layout layout : {Layout::BHSD, Layout::BSHD, Layout::PaddedBSHD}) {
      Case c;
      c.layout = layout;
      c.offset_base = true;
      c.head_dim_qk = c.head_dim_v = layout == Layout::BSHD ? 90 : 128;
      c.causal = true;
      c.sinks = true;
      cases.push_back(c);
    }
    Case c;  // f32 at odd widths and offsets (the SIMT path takes any alignment)
    c.dtype = DType::F32;
    c.layout = Layout::BHSD;
    c.offset_base = true;
    c.head_dim_qk = c.head_dim_v = 59;
    cases.push_back(c);
  }
  {  // K and V broadcast over batch and kv heads with stride 0
    Case c;
    c.layout = Layout::BHSD;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.head_dim_qk = c.head_dim_v = 128;
    c.kv_broadcast = true;
    cases.push_back(c);
  }
  // f32: the exact SIMT path, Dv above 256 in column slices too.
  for (auto [qk, dv] : {std::pair<int64_t, int64_t>{1, 1},
                        {64, 64},
                        {72, 72},
                        {256, 256},
                        {288, 288},
                        {576, 512},
                        {100, 300}}) {
    Case c;
    c.dtype = DType::F32;
    c.head_dim_qk = qk;
    c.head_dim_v = dv;
    c.causal = qk == 72 || qk == 576;
    c.sinks = qk == 288;
    cases.push_back(c);
  }
  return cases;
}

class PrefillAwkward : public ::testing::TestWithParam<Case> {};
TEST_P(PrefillAwkward, MatchesReference) { expect_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Grid, PrefillAwkward, ::testing::ValuesIn(awkward_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

// --------------------------------------------------------------- semantics

std::vector<Case> semantic_cases() {
  std::vector<Case> cases;
  for (int64_t d : {64, 128, 256}) {
    Case base;
    base.head_dim_qk = base.head_dim_v = d;
    base.len_q = 131;
    base.len_k = 211;
    for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft}) {
      Case c = base;
      c.causal = true;
      c.align = align;
      cases.push_back(c);
      c.len_q = 211;  // Lq > Lk: bottom-right leaves the first rows empty
      c.len_k = 97;
      cases.push_back(c);
    }
    {
      Case c = base;
      c.window = 40;
      cases.push_back(c);
      c.causal = true;
      cases.push_back(c);
      c.window = 0;
      cases.push_back(c);
    }
    for (DType mdt : {DType::F32, DType::BF16, DType::F16}) {
      Case c = base;
      c.mask = MaskKind::Additive;
      c.mask_dtype = mdt;
      c.mask_per_head = mdt == DType::F32;
      cases.push_back(c);
    }
    {
      Case c = base;
      c.mask = MaskKind::Boolean;
      c.fully_masked_rows = true;
      cases.push_back(c);
      c.causal = true;
      c.sinks = true;
      cases.push_back(c);
    }
    {
      Case c = base;
      c.sinks = true;
      cases.push_back(c);
    }
    {  // the soft cap: one that bites (2), Gemma 2's (50), with the masks on top
      Case c = base;
      c.softcap = 2.0;
      cases.push_back(c);
      c.causal = true;
      c.mask = MaskKind::Boolean;
      c.fully_masked_rows = true;
      c.sinks = true;
      cases.push_back(c);
      c = base;
      c.softcap = 50.0;
      c.window = 40;
      c.mask = MaskKind::Additive;
      c.heads_q = 8;
      c.heads_kv = 2;
      cases.push_back(c);
    }
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {8, 2}, {7, 1}}) {
      Case c = base;
      c.heads_q = hq;
      c.heads_kv = hkv;
      c.batch = 2;
      c.len_q = 65;
      c.causal = hq == 7;
      cases.push_back(c);
    }
  }
  {
    Case c;  // no keys at all: out 0, lse -inf
    c.len_k = 0;
    cases.push_back(c);
    c.sinks = true;  // ... or lse = sink
    cases.push_back(c);
  }
  return cases;
}

class PrefillSemantics : public ::testing::TestWithParam<Case> {};
TEST_P(PrefillSemantics, MatchesReference) { expect_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Grid, PrefillSemantics, ::testing::ValuesIn(semantic_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

// --------------------------------------------------------------- smaller GPUs

// The mma.sync row (the kernel of sm_80-sm_89 GPUs) under the shared memory
// of an A100 (163 KB a block) and of sm_86/sm_89 (99 KB): every bucket above
// 128 takes its tile for that budget (config.h's prefill_tile), fused and
// right, with every semantic on some case; and the f32 row its tile
// (simt_f32.h) at the head dims where sm_90's does not fit.
struct BudgetCase {
  int budget;  // bytes a block may opt into
  Case c;
};

std::vector<BudgetCase> budget_cases() {
  const std::pair<int64_t, int64_t> dims[] = {{144, 144}, {200, 200}, {256, 256}, {192, 128},
                                              {288, 288}, {320, 320}, {384, 384}, {440, 440},
                                              {512, 512}, {576, 512}};
  std::vector<BudgetCase> cases;
  int k = 0;
  for (int class_index = 1; class_index < detail::cuda::kSharedClasses; ++class_index)
    for (auto [qk, dv] : dims) {
      Case c;
      c.head_dim_qk = qk;
      c.head_dim_v = dv;
      c.dtype = k % 2 ? DType::F16 : DType::BF16;
      c.len_q = k % 3 ? 131 : 70;
      c.len_k = k % 3 ? 211 : 300;
      c.heads_q = 4;
      c.heads_kv = k % 2 ? 4 : 2;
      c.causal = k % 2 == 0;
      c.align = k % 4 == 2 ? CausalAlign::TopLeft : CausalAlign::BottomRight;
      c.sinks = k % 3 == 1;
      c.softcap = k % 4 == 3 ? 30.0 : 0.0;
      c.window = k % 5 == 4 ? 60 : 0;
      if (k % 7 == 5) c.mask = MaskKind::Boolean, c.fully_masked_rows = true;
      c.lse = k % 2 == 0;
      c.row = "cuda_fused_prefill";
      cases.push_back({detail::cuda::kSharedBudgets[class_index], c});
      ++k;
    }
  // f32 (the exact SIMT row): 16 keys, then 16 rows a tile where 32 x 32
  // does not fit (simt_f32.h's kSimtF32Tiles).
  const std::pair<int64_t, int64_t> f32_dims[] = {{256, 256}, {320, 320}, {440, 440}, {576, 512}};
  for (int class_index = 1; class_index < detail::cuda::kSharedClasses; ++class_index)
    for (auto [qk, dv] : f32_dims) {
      Case c;
      c.head_dim_qk = qk;
      c.head_dim_v = dv;
      c.dtype = DType::F32;
      c.len_q = k % 2 ? 45 : 70;
      c.len_k = k % 2 ? 211 : 100;
      c.heads_q = 2;
      c.heads_kv = k % 2 ? 2 : 1;
      c.causal = k % 2 == 0;
      c.sinks = k % 3 == 1;
      c.softcap = k % 4 == 3 ? 30.0 : 0.0;
      c.lse = true;
      c.row = "cuda_fused_prefill_f32";
      cases.push_back({detail::cuda::kSharedBudgets[class_index], c});
      ++k;
    }
  return cases;
}

class PrefillSharedBudgets : public ::testing::TestWithParam<BudgetCase> {};
TEST_P(PrefillSharedBudgets, MatchesReference) {
  const BudgetCase& b = GetParam();
  const Case& c = b.c;
  if (c.dtype != DType::F32 && !compiled_for(c.head_dim_qk, c.head_dim_v))
    GTEST_SKIP() << "bucket not compiled into this build (FSDPA_HEAD_DIMS)";
  if (detail::cuda::device_info(0).compute_capability < 80) GTEST_SKIP() << "below sm_80";
  const test::EnvGuard limit("FSDPA_SHARED_MEMORY_LIMIT", std::to_string(b.budget).c_str());
  std::mt19937_64& rng = test_rng();
  const Outcome fused = run_case(c, rng);
  ASSERT_TRUE(fused.declined.empty()) << fused.declined;
  SCOPED_TRACE(c.name() + "\n" + fused.plan.explain());
  if (c.dtype == DType::F32) {
    const int index = detail::cuda::simt_f32_tile(c.head_dim_qk, c.head_dim_v, size_t(b.budget));
    ASSERT_GE(index, 0);
    const detail::cuda::SimtF32Tile tile = detail::cuda::kSimtF32Tiles[index];
    EXPECT_EQ(fused.plan.tile_q, tile.rows);
    EXPECT_EQ(fused.plan.tile_k, tile.keys);
    EXPECT_LE(detail::cuda::simt_f32_shared_bytes(tile, c.head_dim_qk,
                                                  detail::cuda::v_slice_columns(c.head_dim_v)),
              size_t(b.budget));
  } else {
    // Two column slices take the pair kernel where its tile fits the budget.
    const int qk = static_cast<int>(fused.plan.head_dim_qk_bucket);
    const int dv = static_cast<int>(fused.plan.head_dim_v_bucket);
    const detail::cuda::PairTile pair = detail::cuda::prefill_pair_tile(qk, dv, b.budget);
    if (fused.plan.num_v_slices == 2 && pair.tile_k > 0) {
      EXPECT_EQ(fused.plan.tile_q, detail::cuda::kPairTileQ);
      EXPECT_EQ(fused.plan.tile_k, pair.tile_k);
      EXPECT_LE(detail::cuda::pair_shared_bytes(pair, qk, dv), b.budget);
    } else {
      const detail::cuda::PrefillTile tile = detail::cuda::prefill_tile(qk, dv, b.budget);
      EXPECT_EQ(fused.plan.tile_q, detail::cuda::prefill_tile_q(tile));
      EXPECT_EQ(fused.plan.tile_k, tile.tile_k);
      EXPECT_LE(detail::cuda::prefill_shared_bytes(tile, qk, dv, 2), b.budget);
    }
  }
  EXPECT_EQ(fused.unwritten, 0);
  EXPECT_EQ(fused.padding_touched, 0);
  EXPECT_LE(fused.relative_error, tolerance(c.dtype, c.allow_tf32));
  EXPECT_LE(fused.lse_error, 1e-3);
}
INSTANTIATE_TEST_SUITE_P(Grid, PrefillSharedBudgets, ::testing::ValuesIn(budget_cases()),
                         [](const auto& test_info) {
                           return test_info.param.c.name() + "_smem" +
                                  std::to_string(test_info.param.budget / 1024) + "k";
                         });

// The pair kernel (pair_kernel.cuh: two column slices in one block, Q K^T once), forced on the
// mma.sync row under sm_90's budget: every bucket above 256 and two of the symmetric ones a Dv
// above 256 takes (256 and 208), head dims on and between buckets, Dv wider than Dqk, every
// semantic on some case (the two warps of a row tile split each key tile, so the masks, windows
// and causal edges fall in either half), lengths below one row block and one key tile, odd rows
// (8-, 4- and 2-byte aligned rows take the narrow copies), v a view of k, and the plan's tile
// and work ratio.
std::vector<Case> pair_cases() {
  struct Dims {
    int64_t qk, dv;
  };
  const Dims dims[] = {{288, 288}, {300, 300}, {320, 320}, {384, 384}, {440, 440},
                       {512, 512}, {576, 512}, {64, 512},  {200, 300}, {511, 509}};
  std::vector<Case> cases;
  int k = 0;
  for (const Dims& d : dims) {
    Case c;
    c.head_dim_qk = d.qk;
    c.head_dim_v = d.dv;
    c.dtype = k % 2 ? DType::F16 : DType::BF16;
    c.len_q = k % 3 == 0 ? 131 : k % 3 == 1 ? 40 : 64;
    c.len_k = k % 3 == 0 ? 211 : k % 3 == 1 ? 17 : 300;
    c.heads_q = 4;
    c.heads_kv = k % 2 ? 4 : 2;
    c.causal = k % 4 != 1;
    c.align = k % 4 == 2 ? CausalAlign::TopLeft : CausalAlign::BottomRight;
    c.sinks = k % 3 == 1;
    c.softcap = k % 4 == 3 ? 30.0 : 0.0;
    c.window = k % 5 == 4 ? std::optional<int64_t>(45) : std::nullopt;
    if (k % 5 == 2) c.mask = MaskKind::Boolean, c.fully_masked_rows = true;
    if (k % 5 == 3) c.mask = MaskKind::Additive, c.mask_dtype = DType::BF16;
    c.lse = k % 3 != 2;
    c.layout = d.qk % 8 != 0 || d.dv % 8 != 0 ? Layout::BSHD : Layout::PaddedBSHD;
    c.offset_base = k == 7;
    c.row = "cuda_fused_prefill";
    cases.push_back(c);
    ++k;
  }
  Case alias = mla_chunk_case(8);  // v a view of k
  alias.row = "cuda_fused_prefill";
  cases.push_back(alias);
  return cases;
}

class PrefillPairKernel : public ::testing::TestWithParam<Case> {};
TEST_P(PrefillPairKernel, MatchesReference) {
  const Case& c = GetParam();
  if (!compiled_for(c.head_dim_qk, c.head_dim_v))
    GTEST_SKIP() << "bucket not compiled into this build (FSDPA_HEAD_DIMS)";
  if (detail::cuda::device_info(0).compute_capability < 80) GTEST_SKIP() << "below sm_80";
  if (detail::cuda::block_shared_memory(detail::cuda::device_info(0)) <
      detail::cuda::kSm90SharedBytes)
    GTEST_SKIP() << "the device's shared memory is below sm_90's budget";
  std::mt19937_64& rng = test_rng();
  const Outcome fused = run_case(c, rng);
  ASSERT_TRUE(fused.declined.empty()) << fused.declined;
  SCOPED_TRACE(c.name() + "\n" + fused.plan.explain());
  const int qk = static_cast<int>(fused.plan.head_dim_qk_bucket);
  const int dv = static_cast<int>(fused.plan.head_dim_v_bucket);
  EXPECT_EQ(fused.plan.num_v_slices, 2);
  EXPECT_EQ(fused.plan.tile_q, detail::cuda::kPairTileQ);
  EXPECT_EQ(fused.plan.tile_k, detail::cuda::prefill_pair_tile(qk, dv).tile_k);
  EXPECT_NEAR(fused.plan.pad_ratio,
              static_cast<double>(qk + 2 * dv) / static_cast<double>(c.head_dim_qk + c.head_dim_v),
              1e-12);
  EXPECT_EQ(fused.unwritten, 0);
  EXPECT_EQ(fused.padding_touched, 0);
  EXPECT_LE(fused.relative_error, tolerance(c.dtype, c.allow_tf32));
  EXPECT_LE(fused.lse_error, 1e-3);
}
INSTANTIATE_TEST_SUITE_P(Grid, PrefillPairKernel, ::testing::ValuesIn(pair_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

// Below the smallest budget the mma.sync row declines with the bytes it
// needs and the limit that denied them.
TEST(PrefillSharedBudgets, BelowTheSmallestBudgetNamesTheLimit) {
  if (!compiled_exactly(128, 128)) GTEST_SKIP() << "128 bucket not compiled";
  const test::EnvGuard limit("FSDPA_SHARED_MEMORY_LIMIT", "49152");
  Case c;
  c.head_dim_qk = c.head_dim_v = 128;
  c.row = "cuda_fused_prefill";
  const Outcome fused = run_case(c, test_rng());
  EXPECT_NE(fused.declined.find("bucket 128/128 needs " +
                                std::to_string(detail::cuda::prefill_shared_bytes(128, 128, 2, 2)) +
                                " bytes of shared memory a block, device cuda:0 allows 49152 "
                                "(FSDPA_SHARED_MEMORY_LIMIT)"),
            std::string::npos)
      << fused.declined;
}

// --------------------------------------------------------------- selection

Problem problem_of(int64_t dqk, int64_t dv, int row_alignment = 16) {
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 8;
  p.len_q = p.len_k = 4096;
  p.head_dim_qk = dqk;
  p.head_dim_v = dv;
  p.dtype = DType::BF16;
  p.device = {DeviceType::CUDA, 0};
  p.row_alignment = row_alignment;
  return p;
}

Options forced() {
  Options o;
  o.policy = Policy::ForceFused;
  return o;
}

TEST(PrefillSelection, HeadDimAboveLargestFusedSizeNamesTheLimit) {
  try {
    (void)plan(problem_of(1040, 1040), forced());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim_qk=1040 exceeds the largest fused size 576"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)plan(problem_of(128, 520), forced());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim_v=520 exceeds the largest fused size 512"),
              std::string::npos)
        << e.what();
  }
}

// Dv above 256 runs in column slices where the wide row declines (Dqk up
// to 320 on sm_90; every pair elsewhere); the wgmma row takes every pair but
// 576/256 and names why; the plan shows the slices and the work ratio.
TEST(PrefillSelection, LargeHeadDimsRunInColumnSlices) {
  if (!compiled_exactly(512, 256) || !compiled_exactly(320, 160))
    GTEST_SKIP() << "512/256 or 320/160 not compiled";
  const bool wgmma = prefill_rows(DType::BF16).size() > 1;
  const Plan p = plan(problem_of(320, 320), forced());
  EXPECT_EQ(p.path, Path::FusedPrefill);
  EXPECT_EQ(p.kernel, wgmma ? "cuda_fused_prefill_hopper" : "cuda_fused_prefill");
  EXPECT_EQ(p.head_dim_qk_bucket, 320);
  EXPECT_EQ(p.head_dim_v_bucket, 160);
  EXPECT_EQ(p.num_v_slices, 2);
  // The wgmma kernel's slices compute Q K^T each; the mma.sync row's pair
  // kernel once for both.
  const bool slices_share_scores = p.kernel == "cuda_fused_prefill";
  EXPECT_NEAR(p.pad_ratio, slices_share_scores ? 1.0 : 1.5, 1e-12);
  EXPECT_NE(p.explain().find("320/160 x 2 column slices"), std::string::npos) << p.explain();
  EXPECT_EQ(p.workspace_bytes, 0u);
  // 512/512: the wide row where the wgmma rows run (S once for both halves
  // of O), else the mma.sync row's pair kernel in two slices.
  const Plan large = plan(problem_of(512, 512), forced());
  EXPECT_EQ(large.kernel, wgmma ? "cuda_fused_prefill_wide" : "cuda_fused_prefill");
  EXPECT_EQ(large.head_dim_qk_bucket, 512);
  EXPECT_EQ(large.head_dim_v_bucket, wgmma ? 512 : 256);
  EXPECT_NEAR(large.pad_ratio, 1.0, 1e-12);
  EXPECT_EQ(large.workspace_bytes, 0u);
  const Plan between = plan(problem_of(300, 300), forced());
  EXPECT_EQ(between.head_dim_qk_bucket, 320);
  EXPECT_EQ(between.head_dim_v_bucket, 160);
  EXPECT_NEAR(between.pad_ratio, (slices_share_scores ? 640.0 : 960.0) / 600, 1e-12);
  if (compiled_exactly(576, 256) && detail::cuda::block_shared_memory(detail::cuda::device_info(
                                        0)) >= detail::cuda::kSm90SharedBytes) {
    // 576/512 without MLA's aliasing: the wide kernel where the wgmma rows
    // run (S once for both halves of O), else the mma.sync row's pair kernel.
    const Plan unaliased = plan(problem_of(576, 512), forced());
    EXPECT_EQ(unaliased.kernel, wgmma ? "cuda_fused_prefill_wide" : "cuda_fused_prefill");
    EXPECT_EQ(unaliased.tile_q, wgmma ? 64 : detail::cuda::kPairTileQ);
    EXPECT_EQ(unaliased.tile_k, 32);
    EXPECT_NEAR(unaliased.pad_ratio, 1.0, 1e-12);
  }
  for (const detail::KernelRow& row : detail::selection_table()) {
    if (std::string(row.name) != "cuda_fused_prefill_hopper") continue;
    const std::string reason = row.supports(problem_of(576, 512), forced()).reason;
    EXPECT_NE(reason.find("bucket 576/256: the wgmma kernel's 128-row Q tile and two K/V "
                          "stages need"),
              std::string::npos)
        << reason;
  }
}

// MLA's absorbed prefill (576/512, v a view of k) runs the MLA kernel past
// the decode limit on sm_90, and the row names what it declines.
TEST(PrefillSelection, MlaPrefillRunsTheMlaKernel) {
  Problem mla = problem_of(576, 512);
  mla.heads_q = 128;
  mla.heads_kv = 1;
  mla.v_aliases_k = true;
  auto reason = [](const Problem& p) { return detail::cuda::prefill_mla_supports(p, {}).reason; };
  Problem p = mla;
  p.len_q = detail::cuda::kDecodeMaxLenQ;
  EXPECT_EQ(reason(p), "len_q=" + std::to_string(p.len_q) + " is within the decode limit " +
                           std::to_string(p.len_q) + " (decode family)");
  EXPECT_TRUE(detail::cuda::prefill_mla_supports(p, {}).routed);
  // The reasons below come after the bucket's: a build without it says so.
  if (!detail::cuda::decode_bucket_compiled(576, 512)) GTEST_SKIP() << "576/512 not compiled";
  p = mla;
  p.v_aliases_k = false;
  EXPECT_EQ(reason(p), "v is not a view of the first head_dim_v columns of k (MLA aliasing)");
  p = mla;
  p.row_alignment = 4;
  EXPECT_EQ(reason(p), "rows are 4-byte aligned; the MLA kernel's TMA loads need 16 (q, k, out)");
  if (prefill_rows(DType::BF16).size() == 1) GTEST_SKIP() << "no wgmma kernels on this device";
  const Plan chunk = plan(mla, forced());
  EXPECT_EQ(chunk.path, Path::FusedPrefill);
  EXPECT_EQ(chunk.kernel, "cuda_fused_prefill_mla_alternating");
  EXPECT_EQ(chunk.num_kv_splits, 1);  // 8192 row chunks of 64 fill the GPU
  EXPECT_EQ(chunk.workspace_bytes, 0u);
  EXPECT_EQ(chunk.tile_q, 64);
  p = mla;
  p.len_q = detail::cuda::kDecodeMaxLenQ;
  EXPECT_EQ(plan(p, forced()).kernel, "cuda_fused_decode_mla");
}

// The wide row (the MLA kernel with V tiles of its own) takes prefill with
// Dv above 256 where it measured faster than the column slices (Dqk above
// 320), and names what it declines.
TEST(PrefillSelection, WideRowNamesWhatItDeclines) {
  auto verdict = [](const Problem& p) { return detail::cuda::prefill_wide_supports(p, {}); };
  Problem p = problem_of(576, 512);
  p.len_q = detail::cuda::kDecodeMaxLenQ;
  EXPECT_EQ(verdict(p).reason, "len_q=" + std::to_string(p.len_q) + " is within the decode limit " +
                                   std::to_string(p.len_q) + " (decode family)");
  EXPECT_TRUE(verdict(p).routed);
  p = problem_of(576, 512);
  p.dtype = DType::F32;
  EXPECT_EQ(verdict(p).reason, "dtype f32 is not one of f16, bf16");
  p = problem_of(576, 256);
  EXPECT_EQ(verdict(p).reason,
            "head_dim_v=256 is one column slice: the slice kernels compute Q K^T once");
  p = problem_of(320, 512);
  EXPECT_EQ(verdict(p).reason,
            "head_dim_qk=320, head_dim_v=512: the wide kernel serves Dqk above 320 (up to 576, Dv "
            "up to 512); at 288 and 320 the wgmma kernel's column slices measured faster");
  p = problem_of(288, 288);
  EXPECT_FALSE(verdict(p).ok);
  EXPECT_TRUE(verdict(p).routed);
  p = problem_of(576, 512);
  p.page_size = 16;
  EXPECT_EQ(verdict(p).reason,
            "a paged KV cache (page_size=16) runs the decode kernels only (len_q up to their "
            "limit; MLA's layout at any len_q)");
  p = problem_of(576, 512);
  p.len_k = int64_t{1} << 31;
  EXPECT_EQ(verdict(p).reason,
            "len_k=2147483648, page_size=0, num_pages=0, rows=32768 exceed the decode limit "
            "2147483647 (32-bit indices)");
  p = problem_of(384, 384);
  p.row_alignment = 8;
  EXPECT_EQ(verdict(p).reason,
            "rows are 8-byte aligned; the wide kernel's TMA loads need 16 (q, k, v, out)");
  // The shapes: the smallest of 384/384, 512/512 and 576/512 that covers.
  const std::pair<int64_t, int64_t> dims[][2] = {
      {{330, 330}, {384, 384}}, {{384, 320}, {384, 384}}, {{384, 384}, {384, 384}},
      {{330, 400}, {512, 512}}, {{440, 440}, {512, 512}}, {{512, 512}, {512, 512}},
      {{520, 300}, {576, 512}}, {{576, 512}, {576, 512}}};
  for (const auto& [problem_dims, buckets] : dims) {
    Plan wide;
    detail::cuda::prefill_wide_configure(problem_of(problem_dims.first, problem_dims.second), wide);
    EXPECT_EQ(wide.head_dim_qk_bucket, buckets.first) << problem_dims.first;
    EXPECT_EQ(wide.head_dim_v_bucket, buckets.second) << problem_dims.first;
    EXPECT_EQ(wide.tile_q, 64);
    EXPECT_EQ(wide.tile_k, 32);
    EXPECT_EQ(wide.loads, "TMA boxes");
  }
}

// Rows aligned below 16 bytes run fused: on sm_90 the wgmma row (staged rows
// where the bucket's staging fits, down to 2 bytes; cp.async pieces of at
// least 4 bytes above), the mma.sync row for the rest (and everywhere on
// other GPUs); the wgmma row names its rule; a last dimension without
// stride 1 runs unfused.
TEST(PrefillSelection, UnalignedRowsRunFusedAndNameTheConstraint) {
  if (!compiled_exactly(96, 96) || !compiled_exactly(256, 256))
    GTEST_SKIP() << "96 or 256 bucket not compiled (its tiles are what this test expects)";
  const bool hopper = plan(problem_of(96, 96, 16), forced()).kernel == "cuda_fused_prefill_hopper";
  for (int alignment : {8, 4, 2}) {
    const Plan p = plan(problem_of(96, 96, alignment), forced());
    EXPECT_EQ(p.path, Path::FusedPrefill);
    EXPECT_EQ(p.kernel, hopper ? "cuda_fused_prefill_hopper" : "cuda_fused_prefill") << alignment;
    // The staged stage's consumers keep fewer registers: 112 keys at 96.
    if (hopper) {
      EXPECT_EQ(p.tile_k, 112) << alignment;
    }
    const Plan wide = plan(problem_of(256, 256, alignment), forced());
    EXPECT_EQ(wide.kernel,
              hopper && alignment >= 4 ? "cuda_fused_prefill_hopper" : "cuda_fused_prefill")
        << alignment;
  }
  if (hopper) {
    EXPECT_EQ(plan(problem_of(96, 96, 16), forced()).tile_k, 128);
  }
  for (const detail::KernelRow& row : detail::selection_table()) {
    if (std::string(row.name) != "cuda_fused_prefill_hopper") continue;
    EXPECT_TRUE(row.supports(problem_of(90, 90, 2), forced()).ok);
    const std::string reason = row.supports(problem_of(256, 256, 2), forced()).reason;
    EXPECT_NE(reason.find("rows are 2-byte aligned; bucket 256/256 copies them only through "
                          "staging buffers, and its tiles and staging need "),
              std::string::npos)
        << reason;
  }
  try {  // a byte-aligned bf16 row: no kernel loads half elements
    (void)plan(problem_of(64, 64, 1), forced());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_fused_prefill: rows are 1-byte aligned, below the "
                                         "2-byte elements the kernels load whole"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)plan(problem_of(64, 64, 0), forced());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("rows must have stride 1 (q, k, v and out"),
              std::string::npos)
        << e.what();
  }
  Options automatic;
  automatic.policy = Policy::Auto;
  const Plan p = plan(problem_of(64, 64, 0), automatic);
  EXPECT_EQ(p.path, Path::Unfused);
  EXPECT_NE(p.fallback_reason.find("rows must have stride 1"), std::string::npos);
}

// Dv = 0 with an LSE: the prefill kernels would write nothing, so the rows
// decline and the unfused path writes the LSE.
TEST(PrefillSelection, ZeroValueDimWithLseRunsUnfused) {
  Problem p = problem_of(64, 0);
  p.has_lse = true;
  Options automatic;
  automatic.policy = Policy::Auto;
  const Plan chosen = plan(p, automatic);
  EXPECT_EQ(chosen.path, Path::Unfused);
  EXPECT_NE(chosen.fallback_reason.find("head_dim_v=0 with lse"), std::string::npos)
      << chosen.fallback_reason;
}

TEST(PrefillSelection, BucketsAndPadRatio) {
  if (!compiled_exactly(80, 80)) GTEST_SKIP() << "80 bucket not compiled";
  const Plan p = plan(problem_of(72, 72), forced());
  EXPECT_EQ(p.path, Path::FusedPrefill);
  EXPECT_EQ(p.head_dim_qk_bucket, 80);
  EXPECT_EQ(p.head_dim_v_bucket, 80);
  EXPECT_NEAR(p.pad_ratio, 160.0 / 144.0, 1e-12);
  EXPECT_EQ(p.workspace_bytes, 0u);
}

TEST(PrefillSelection, WgmmaRowFirstOnSm90) {
  // On sm_90 with a 90a build the wgmma row serves 16-bit prefill; elsewhere
  // the mma.sync row does (prefill_rows lists the rows in table order; the
  // MLA row before them serves MLA's layout only).
  const Plan p = plan(problem_of(128, 128), forced());
  EXPECT_EQ(p.kernel, prefill_rows(DType::BF16).size() > 1 ? "cuda_fused_prefill_hopper"
                                                           : "cuda_fused_prefill");
}

TEST(PrefillSelection, UncompiledBucketSaysSo) {
  bool all = true;
  for (const auto& pair : detail::cuda::prefill_bucket_pairs()) all = all && pair.compiled;
  if (all) GTEST_SKIP() << "every bucket is compiled (FSDPA_HEAD_DIMS=all)";
  // Find a symmetric bucket that nothing compiled covers, if any.
  for (int64_t d = 256; d >= 16; d -= 16) {
    if (compiled_bucket(d, d)) continue;
    try {
      (void)plan(problem_of(d, d), forced());
      FAIL() << "expected Unsupported for " << d;
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("not compiled into this build"), std::string::npos)
          << e.what();
    }
    return;
  }
}

}  // namespace
}  // namespace fsdpa::gpu_test
