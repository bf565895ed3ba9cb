// The NaN/Inf policy (docs/design.md) on the CUDA prefill rows and the
// unfused path: a key a row masks contributes nothing to that row, whatever
// its q, k or v values; a non-finite value a row uses reaches that row's
// output and lse and no other row's. Each case writes NaN or an infinity
// into q, k or v; every element must then match the float64 reference,
// NaN for NaN and each infinity for itself, the finite ones within the
// dtype's tolerance.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "cuda/decode/decode.h"
#include "cuda/decode/decode_config.h"
#include "cuda/gpu_case.h"

namespace fsdpa::gpu_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<Case> nan_cases() {
  std::vector<Case> cases;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    Case base;
    base.dtype = dtype;
    base.causal = true;  // bottom-right, Lq 37 Lk 97: only row 36 sees key 96
    // NaN or +inf in v at a key all rows but the last mask: that column of
    // the last row only.
    for (float value : {kNaN, kInf}) {
      Case c = base;
      c.poisons = {{'v', 96, 3, value}};
      cases.push_back(c);
      c.sinks = true;
      cases.push_back(c);
    }
    // NaN in k there: the whole last row and its lse.
    {
      Case c = base;
      c.poisons = {{'k', 96, 5, kNaN}};
      cases.push_back(c);
    }
    // NaN in one query row: that row only.
    {
      Case c = base;
      c.causal = false;
      c.poisons = {{'q', 10, 0, kNaN}};
      cases.push_back(c);
    }
    // A window that hides key 0 from every row (row 0 sees keys 44..60),
    // inside the first key tile the kernels compute.
    {
      Case c = base;
      c.window = 16;
      c.poisons = {{'v', 0, 3, kNaN}, {'k', 1, 7, kNaN}, {'v', 2, 1, -kInf}};
      cases.push_back(c);
    }
    // Array masks: the rows whose mask drops the poisoned key stay finite;
    // an additive -inf drops a NaN score too.
    for (MaskKind mask : {MaskKind::Additive, MaskKind::Boolean}) {
      Case c = base;
      c.causal = false;
      c.mask = mask;
      c.poisons = {{'v', 40, 2, kNaN}, {'k', 41, 2, kNaN}};
      cases.push_back(c);
    }
    // Many key tiles, a soft cap: only the last row sees key 576.
    {
      Case c = base;
      c.len_q = 129;
      c.len_k = 577;
      c.softcap = 30.0;
      c.poisons = {{'v', 576, 9, kNaN}, {'k', 576, 0, kInf}};
      cases.push_back(c);
    }
  }
  // Decode shapes (the decode kernels under ForceFused): one query row,
  // GQA, one block or several key splits, a window whose first hidden key
  // shares a key tile with the visible ones, a boolean mask, a NaN query.
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (int64_t len_k : {int64_t{300}, int64_t{8191}}) {
      Case base;
      base.dtype = dtype;
      base.heads_q = 8;
      base.heads_kv = 2;
      base.len_q = 1;
      base.len_k = len_k;
      Case c = base;
      c.window = 100;  // keys Lk - 101 .. Lk - 1
      c.poisons = {{'v', len_k - 102, 3, kNaN}, {'k', len_k - 103, 0, kNaN}};
      cases.push_back(c);
      c.sinks = true;
      cases.push_back(c);
      c = base;
      c.mask = MaskKind::Boolean;
      c.poisons = {{'v', 40, 2, kNaN}, {'v', 41, 5, kInf}};
      cases.push_back(c);
      // 1024 rows of three splits: the combine holds several rows a block
      // (combine_rows_log2) and repairs them warp by warp.
      if (len_k == 300) {
        c.batch = 64;
        c.decode_splits = 3;
        cases.push_back(c);
      }
      c = base;
      c.poisons = {{'q', 0, 1, kNaN}};
      cases.push_back(c);
    }
  }
  // MLA (576/512, v a view of k): the MLA kernel where it is built.
  {
    Case c;
    c.heads_q = 16;
    c.heads_kv = 1;
    c.len_q = 1;
    c.len_k = 700;
    c.head_dim_qk = 576;
    c.head_dim_v = 512;
    c.layout = Layout::MlaAlias;
    c.window = 300;
    c.poisons = {{'k', 398, 3, kNaN}};  // v's column 3 too: it is a view of k
    cases.push_back(c);
    c.decode_splits = 2;  // one split pair, which writes out itself
    cases.push_back(c);
    // 32 sequences of two split pairs: the combine merges 1024 row parts,
    // four rows a block.
    c.batch = 32;
    c.decode_splits = 4;
    cases.push_back(c);
  }
  return cases;
}

class NanPolicy : public ::testing::TestWithParam<Case> {};

void expect_matches(const Outcome& o, const std::string& what, double tol) {
  SCOPED_TRACE(what);
  EXPECT_EQ(o.unwritten, 0);
  EXPECT_EQ(o.non_finite_mismatch, 0);
  EXPECT_EQ(o.padding_touched, 0);
  EXPECT_LE(o.relative_error, tol);
  EXPECT_LE(o.lse_error, tol);
}

TEST_P(NanPolicy, MatchesReference) {
  const Case& c = GetParam();
  // A decode shape plans the decode row first (ForceFused): its bucket must be built.
  if (c.len_q <= detail::cuda::kDecodeMaxLenQ &&
      !detail::cuda::decode_bucket_compiled(c.head_dim_qk, c.head_dim_v))
    GTEST_SKIP() << "decode bucket not compiled (FSDPA_HEAD_DIMS)";
  std::mt19937_64& rng = test_rng();
  const std::mt19937_64 inputs = rng;
  const double tol = tolerance(c.dtype, c.allow_tf32);
  Case unfused = c;
  unfused.policy = Policy::Unfused;
  std::mt19937_64 unfused_inputs = inputs;
  expect_matches(run_case(unfused, unfused_inputs), "unfused", tol);
  // What plan() picks under ForceFused (the decode kernels for one query
  // row), then every prefill row forced.
  std::mt19937_64 planned_inputs = inputs;
  const Outcome planned = run_case(c, planned_inputs);
  expect_matches(planned, "planned: " + planned.plan.kernel, tol);
  int rows_run = 0;
  for (const std::string& row : prefill_rows(c.dtype)) {
    Case fused = c;
    fused.row = row;
    std::mt19937_64 fused_inputs = inputs;
    const Outcome o = run_case(fused, fused_inputs);
    if (!o.declined.empty()) continue;  // the MLA row takes 576/512 only
    ++rows_run;
    expect_matches(o, row, tol);
  }
  EXPECT_GE(rows_run, 1);
  rng = unfused_inputs;  // the next case draws fresh inputs
}

INSTANTIATE_TEST_SUITE_P(Grid, NanPolicy, ::testing::ValuesIn(nan_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

}  // namespace
}  // namespace fsdpa::gpu_test
