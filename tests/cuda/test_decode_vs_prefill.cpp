// The decode family and the prefill family agree on the few-query problems
// both can serve: the same inputs through the table's decode row (what Auto
// picks for few queries) and through the prefill row, each also checked
// against the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda/decode/decode_config.h"
#include "gpu_case.h"
#include "select/table.h"

namespace fsdpa::gpu_test {
namespace {

double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff2 = 0, norm2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (a[i] - b[i]) * (a[i] - b[i]);
    norm2 += b[i] * b[i];
  }
  return norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2);
}

std::vector<Case> agreement_cases() {
  std::vector<Case> cases;
  const std::pair<int64_t, int64_t> dims[] = {{64, 64},   {72, 72},   {96, 64},   {128, 128},
                                              {192, 128}, {256, 256}, {288, 288}, {512, 512}};
  for (auto [qk, dv] : dims)
    for (int64_t len_q : {int64_t{1}, int64_t{4}, detail::cuda::kDecodeMaxLenQ}) {
      Case c;
      c.head_dim_qk = qk;
      c.head_dim_v = dv;
      c.len_q = len_q;
      c.len_k = 1153;
      c.heads_q = 8;
      c.heads_kv = 2;
      c.causal = len_q > 1;
      c.sinks = qk == 64;
      c.layout = Layout::BHSD;
      cases.push_back(c);
    }
  return cases;
}

// The reason a row declines the case's problem because of the build's
// FSDPA_HEAD_DIMS ("not compiled"), or "" when it is compiled.
std::string not_compiled(const char* row_name, const Case& c) {
  Problem p;
  p.batch = c.batch;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.len_q = c.len_q;
  p.len_k = c.len_k;
  p.head_dim_qk = c.head_dim_qk;
  p.head_dim_v = c.head_dim_v;
  p.dtype = c.dtype;
  p.device = {DeviceType::CUDA, 0};
  p.has_sinks = c.sinks;
  p.has_lse = c.lse;
  Options options;
  options.causal = c.causal;
  for (const detail::KernelRow& row : detail::selection_table()) {
    if (std::string(row.name) != row_name) continue;
    const detail::Verdict verdict = row.supports(p, options);
    if (!verdict.ok && verdict.reason.find("compiled") != std::string::npos) return verdict.reason;
  }
  return "";
}

class DecodeVsPrefill : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeVsPrefill, SameOutput) {
  const Case& c = GetParam();
  for (const char* row : {"cuda_fused_decode", "cuda_fused_prefill"})
    if (const std::string reason = not_compiled(row, c); !reason.empty()) GTEST_SKIP() << reason;
  std::mt19937_64& rng = test_rng();
  const std::mt19937_64 inputs = rng;  // every run draws the very same inputs
  Case through_decode = c;             // Auto routes few queries to the decode row
  const Outcome decode = run_case(through_decode, rng);
  // The first prefill row that serves the case: the one longer queries take.
  Outcome prefill;
  for (const std::string& row : prefill_rows(c.dtype)) {
    Case through_prefill = c;
    through_prefill.row = row;
    std::mt19937_64 same_inputs = inputs;
    prefill = run_case(through_prefill, same_inputs);
    if (prefill.declined.empty()) break;
  }
  ASSERT_EQ(prefill.declined, "");
  SCOPED_TRACE(c.name() + "\n" + decode.plan.explain() + prefill.plan.explain());
  ASSERT_EQ(decode.plan.path, Path::FusedDecode);
  ASSERT_EQ(prefill.plan.path, Path::FusedPrefill);
  EXPECT_EQ(decode.unwritten, 0);
  EXPECT_EQ(prefill.unwritten, 0);
  const double tol = tolerance(c.dtype, false);
  EXPECT_LE(decode.relative_error, tol);
  EXPECT_LE(prefill.relative_error, tol);
  ASSERT_EQ(decode.out.size(), prefill.out.size());
  EXPECT_LE(relative_difference(decode.out, prefill.out), tol);
}

INSTANTIATE_TEST_SUITE_P(Grid, DecodeVsPrefill, ::testing::ValuesIn(agreement_cases()),
                         [](const auto& test_info) { return test_info.param.name(); });

}  // namespace
}  // namespace fsdpa::gpu_test
