// The CUDA unfused path (cuBLAS + masked softmax) against the float64 CPU
// reference: every semantic, any layout with a stride-1 dimension.
#include <gtest/gtest.h>

#include "gpu_case.h"

namespace fsdpa::gpu_test {
namespace {

void expect_unfused(const Case& c) {
  const Outcome o = run_case(c, test_rng());
  SCOPED_TRACE(c.name() + "\n" + o.plan.explain());
  EXPECT_EQ(o.plan.path, Path::Unfused);
  EXPECT_EQ(o.plan.kernel, "cuda_unfused_cublas");
  EXPECT_EQ(o.unwritten, 0);
  EXPECT_EQ(o.padding_touched, 0);
  EXPECT_LE(o.relative_error, tolerance(c.dtype, c.allow_tf32));
  EXPECT_LE(o.lse_error, c.dtype == DType::F32 && !c.allow_tf32 ? 1e-5 : 1e-3);
}

std::vector<Case> unfused_cases() {
  std::vector<Case> cases;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    for (int64_t d : {1, 59, 128, 288, 576}) {
      Case c;
      c.dtype = dtype;
      c.policy = Policy::Unfused;
      c.layout = d == 59 ? Layout::BHSD : Layout::PaddedBSHD;  // 59 contiguous: unaligned rows
      c.head_dim_qk = d;
      c.head_dim_v = d == 576 ? 512 : d;
      c.len_q = 33;
      c.len_k = d > 256 ? 65 : 301;
      cases.push_back(c);
    }
  }
  Case base;
  base.policy = Policy::Unfused;
  base.len_q = 97;
  base.len_k = 131;
  for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft}) {
    Case c = base;
    c.causal = true;
    c.align = align;
    c.len_q = 131;
    c.len_k = 97;
    cases.push_back(c);
  }
  {
    Case c = base;
    c.window = 17;
    c.causal = true;
    cases.push_back(c);
  }
  {
    Case c = base;
    c.mask = MaskKind::Additive;
    c.mask_dtype = DType::BF16;
    c.mask_per_head = true;
    cases.push_back(c);
  }
  {
    Case c = base;
    c.mask = MaskKind::Boolean;
    c.fully_masked_rows = true;
    c.sinks = true;
    cases.push_back(c);
    c.sinks = false;
    cases.push_back(c);
  }
  {
    Case c = base;
    c.heads_q = 7;
    c.heads_kv = 1;
    c.batch = 2;
    cases.push_back(c);
  }
  for (Layout layout : {Layout::BSHD, Layout::Interleaved}) {
    Case c = base;
    c.layout = layout;
    cases.push_back(c);
  }
  {
    Case c = base;
    c.dtype = DType::F32;
    c.allow_tf32 = true;
    cases.push_back(c);
  }
  {
    Case c = base;
    c.len_k = 0;
    c.sinks = true;
    cases.push_back(c);
  }
  for (DType dtype : {DType::BF16, DType::F32}) {  // the soft cap, before the mask
    Case c = base;
    c.dtype = dtype;
    c.softcap = 2.0;
    c.causal = true;
    c.mask = MaskKind::Additive;
    c.sinks = true;
    cases.push_back(c);
  }
  return cases;
}

class Unfused : public ::testing::TestWithParam<Case> {};
TEST_P(Unfused, MatchesReference) { expect_unfused(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Grid, Unfused, ::testing::ValuesIn(unfused_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

// A million keys: one query row's scores are 6 MB (bf16), so the 768 MiB
// budget takes 128 of the 200 rows a chunk, one (batch, head) matrix at a
// time: four chunks, each through the same workspace. The window keeps the
// float64 reference quick.
TEST(UnfusedChunks, LongKeysRunInChunksOfQueryRows) {
  Case c;
  c.policy = Policy::Unfused;
  c.layout = Layout::BHSD;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.len_q = 200;
  c.len_k = 1000003;
  c.head_dim_qk = c.head_dim_v = 16;
  c.causal = true;
  c.window = 1000;
  c.sinks = true;
  const Outcome o = run_case(c, test_rng());
  EXPECT_EQ(o.plan.path, Path::Unfused);
  EXPECT_LE(o.plan.workspace_bytes, size_t{1} << 30);
  EXPECT_LE(o.relative_error, tolerance(c.dtype, false));
  EXPECT_LE(o.lse_error, 1e-3);
  EXPECT_EQ(o.unwritten, 0);
}

// Rows that are not 16-byte aligned (contiguous D=59: 118-byte rows) run
// fused under Auto: where the wgmma row serves 16-byte rows of the bucket
// (sm_90), on its staged load stage, else on the mma.sync row's narrow copies.
TEST(UnfusedRouting, UnalignedRowsRunFusedUnderAuto) {
  Case c;
  c.policy = Policy::Auto;
  c.layout = Layout::BHSD;
  c.head_dim_qk = c.head_dim_v = 59;
  const Outcome o = run_case(c, test_rng());
  Problem aligned = o.plan.problem;
  aligned.head_dim_qk = aligned.head_dim_v = 64;
  aligned.row_alignment = 16;
  const std::string wgmma = "cuda_fused_prefill_hopper";
  const bool hopper = plan(aligned, {}).kernel == wgmma;
  EXPECT_EQ(o.plan.path, Path::FusedPrefill);
  EXPECT_EQ(o.plan.kernel, hopper ? wgmma : std::string("cuda_fused_prefill"));
  EXPECT_LE(o.relative_error, tolerance(c.dtype, false));
  EXPECT_EQ(o.unwritten, 0);
}

}  // namespace
}  // namespace fsdpa::gpu_test
