// Policy::Unfused on the CPU: the float64 reference written to the out views
// in the output dtype, each element within one rounding (1 ulp) of the
// reference, lse likewise.
#include <gtest/gtest.h>

#include <vector>

#include "attention_case.h"
#include "cpu/cpu.h"

namespace fsdpa::test {
namespace {

std::vector<AttentionCase> unfused_cases() {
  std::vector<AttentionCase> cases;
  const DType dtypes[] = {DType::F16, DType::BF16, DType::F32};
  const Layout layouts[] = {Layout::Padded,   Layout::BSHD,   Layout::PackedKV,
                            Layout::MlaAlias, Layout::DMajor, Layout::Contiguous};
  for (int k = 0; k < 6; ++k) {
    AttentionCase c;
    c.policy = Policy::Unfused;
    c.dtype = dtypes[k % 3];
    c.layout = layouts[k];
    c.batch = 2;
    c.heads_kv = 1;
    c.heads_q = k % 2 ? 7 : 4;
    c.len_q = k % 2 ? 37 : 17;
    c.len_k = k == 5 ? 0 : (k % 3 == 1 ? 17 : 37);
    c.dqk = k == 3 ? 96 : 59;
    c.dv = k == 3 ? 64 : 59;
    c.causal = k % 2 == 0;
    c.align = k == 2 ? CausalAlign::TopLeft : CausalAlign::BottomRight;
    if (k == 4) c.window = 3;
    if (k == 1 || k == 4) {
      c.mask = k == 1 ? MaskType::Boolean : MaskType::Additive;
      c.mask_dtype = DType::BF16;
      c.mask_shape = k == 1 ? MaskShape::KeyPadding : MaskShape::PerHead;
      c.masked_rows = true;
    }
    c.sinks = k >= 3;
    cases.push_back(c);
  }
  return cases;
}

class Unfused : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Unfused, IsTheReferenceRoundedOnce) {
  const AttentionCase& c = GetParam();
  Rng rng(base_seed() ^ name_hash(c.name()));
  AttentionData d = make_data(c, rng);
  SCOPED_TRACE(seed_note());
  const Plan p = plan(describe(d.tensors, d.options), d.options);
  EXPECT_EQ(p.kernel, "cpu_reference_f64");
  EXPECT_EQ(p.path, Path::Unfused);
  EXPECT_EQ(p.fallback_reason, "policy is unfused");
  ASSERT_NO_THROW(attention(d.tensors, d.options));
  const ReferenceResult ref = detail::cpu::reference_attention(d.tensors, d.options);
  const CheckResult r = check_output(d, ref, CheckMode::Unfused);
  EXPECT_TRUE(r.ok) << c.name() << "\n" << r.report;
  // Rounded once: the error is the rounding error of the reference itself.
  EXPECT_LE(r.rel_error, r.rounding_rel * (1.0 + 1e-9) + 1e-12) << r.report;
}

INSTANTIATE_TEST_SUITE_P(Cases, Unfused, ::testing::ValuesIn(unfused_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& i) {
                           return i.param.name();
                         });

}  // namespace
}  // namespace fsdpa::test
