// Empty and degenerate problems on every CPU policy: B, Hq or Lq = 0 do
// nothing (null data is fine for empty tensors); Lk = 0 writes zeros and
// lse = -inf (the sink when sinks exist); Dv = 0 still writes lse; Dqk = 0
// gives uniform attention; Dqk = Dv = 0 writes only lse, at any Lk.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <ostream>
#include <string>

#include "attention_case.h"
#include "cpu/cpu.h"

namespace fsdpa::test {
namespace {

struct EmptyParam {
  Policy policy;
  DType dtype;
};

void PrintTo(const EmptyParam& p, std::ostream* os) {
  *os << to_string(p.policy) << "/" << to_string(p.dtype);
}

class Empty : public ::testing::TestWithParam<EmptyParam> {
 protected:
  AttentionCase base() const {
    AttentionCase c;
    c.policy = GetParam().policy;
    c.dtype = GetParam().dtype;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.len_q = 5;
    c.len_k = 7;
    c.dqk = 16;
    c.dv = 8;
    c.mask = MaskType::Boolean;
    c.sinks = true;
    return c;
  }
  // Runs and checks against the reference (the check also proves nothing
  // outside the (empty) views was written).
  void run_and_check(const AttentionCase& c, bool null_data) {
    Rng rng(base_seed() ^ name_hash(c.name()));
    AttentionData d = make_data(c, rng);
    SCOPED_TRACE(c.name() + (null_data ? " (null data)" : ""));
    Tensors t = d.tensors;
    if (null_data) {
      for (TensorView* v : {&t.q, &t.k, &t.v, &t.out})
        if (detail::element_count(*v) == 0) v->data = nullptr;
      for (std::optional<TensorView>* v : {&t.mask, &t.lse, &t.sinks})
        if (v->has_value() && detail::element_count(**v) == 0) (*v)->data = nullptr;
    }
    ASSERT_NO_THROW(attention(t, d.options));
    const CheckResult r =
        check_output(d, detail::cpu::reference_attention(t, d.options),
                     c.policy == Policy::Unfused ? CheckMode::Unfused : CheckMode::Fused);
    EXPECT_TRUE(r.ok) << r.report;
  }
};

TEST_P(Empty, ZeroBatch) {
  AttentionCase c = base();
  c.batch = 0;
  run_and_check(c, false);
  run_and_check(c, true);
}

TEST_P(Empty, ZeroHeads) {
  AttentionCase c = base();
  c.heads_q = 0;
  c.heads_kv = 0;
  run_and_check(c, false);
  run_and_check(c, true);
  c.heads_kv = 2;  // Hq = 0 is a multiple of any Hkv
  run_and_check(c, true);
}

TEST_P(Empty, ZeroQueries) {
  AttentionCase c = base();
  c.len_q = 0;
  run_and_check(c, false);
  run_and_check(c, true);
  c.causal = true;
  c.window = 2;
  run_and_check(c, true);
}

TEST_P(Empty, ZeroKeysWritesZerosAndLse) {
  for (bool sinks : {false, true})
    for (bool causal : {false, true}) {
      AttentionCase c = base();
      c.len_k = 0;
      c.sinks = sinks;
      c.causal = causal;
      c.mask = sinks ? MaskType::Additive : MaskType::Boolean;
      run_and_check(c, false);
      run_and_check(c, true);
    }
  // Directly: out all exactly 0 and lse exactly -inf.
  AttentionCase c = base();
  c.len_k = 0;
  c.sinks = false;
  c.mask = MaskType::None;
  Rng rng(base_seed());
  AttentionData d = make_data(c, rng);
  ASSERT_NO_THROW(attention(d.tensors, d.options));
  for (int64_t i = 0; i < detail::element_count(d.tensors.out); ++i)
    ASSERT_EQ(detail::load_as_float(d.tensors.out.data, c.dtype, i), 0.0f) << i;
  for (int64_t i = 0; i < detail::element_count(*d.tensors.lse); ++i)
    ASSERT_EQ(detail::load_as_float(d.tensors.lse->data, DType::F32, i),
              -std::numeric_limits<float>::infinity())
        << i;
}

// Dv = 0: out is empty, lse is still written.
TEST_P(Empty, ZeroValueDim) {
  AttentionCase c = base();
  c.dv = 0;
  run_and_check(c, false);
  run_and_check(c, true);
}

// Dqk = 0: every score is 0 (plus the mask): the mean of the visible values.
TEST_P(Empty, ZeroKeyDim) {
  AttentionCase c = base();
  c.dqk = 0;
  c.causal = true;
  run_and_check(c, false);
  run_and_check(c, true);
}

// Dqk = Dv = 0: only the LSE is written (every score is the mask's value),
// against the reference's own loop over keys, with masks that vary along the
// keys, causal masking and windows.
TEST_P(Empty, ZeroHeadDimsWriteOnlyLse) {
  for (MaskType mask : {MaskType::None, MaskType::Boolean, MaskType::Additive})
    for (bool causal : {false, true}) {
      AttentionCase c = base();
      c.dqk = c.dv = 0;
      c.mask = mask;
      c.masked_rows = mask != MaskType::None;
      c.causal = causal;
      c.window = causal ? std::optional<int64_t>(2) : std::nullopt;
      run_and_check(c, false);
      run_and_check(c, true);
    }
}

// Without head dims no tensor bounds Lk: 2^40 keys run at once (in closed
// form per row) where the mask is the same for every key of a row.
TEST(EmptyHugeKeys, ZeroHeadDimsLseInClosedForm) {
  constexpr int64_t kKeys = int64_t{1} << 40, kRows = 3;
  const float inf = std::numeric_limits<float>::infinity();
  float mask_values[kRows] = {0.5f, -inf, std::nanf("")};  // [1, 1, Lq, 1]
  float sinks[2] = {-1.0f, 2.0f};
  for (Policy policy : {Policy::ForceFused, Policy::Unfused})
    for (bool window : {false, true}) {
      float lse[2 * kRows];
      Tensors t;
      t.q = strided_view(nullptr, DType::BF16, {1, 2, kRows, 0}, {0, 0, 0, 1});
      t.k = strided_view(nullptr, DType::BF16, {1, 1, kKeys, 0}, {0, 0, 0, 1});
      t.v = t.k;
      t.out = t.q;
      t.mask = contiguous_view(mask_values, DType::F32, {1, 1, kRows, 1});
      t.sinks = contiguous_view(sinks, DType::F32, {2});
      t.lse = contiguous_view(lse, DType::F32, {1, 2, kRows});
      Options o;
      o.policy = policy;
      o.causal = true;
      if (window) o.window_left = 5;
      ASSERT_NO_THROW(attention(t, o)) << to_string(policy);
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < kRows; ++i) {
          // Visible keys of row i (bottom-right): kKeys - kRows + i + 1, or 6 with the window.
          const double n = window ? 6.0 : static_cast<double>(kKeys - kRows + i + 1);
          const double want = i == 0   ? std::log(n * std::exp(0.5) + std::exp(double{sinks[h]}))
                              : i == 1 ? double{sinks[h]}
                                       : std::nan("");
          const float got = lse[h * kRows + i];
          SCOPED_TRACE(std::string(to_string(policy)) + " head " + std::to_string(h) + " row " +
                       std::to_string(i) + (window ? " window" : ""));
          if (std::isnan(want))
            EXPECT_TRUE(std::isnan(got)) << got;
          else
            EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << got;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Policies, Empty,
                         ::testing::Values(EmptyParam{Policy::ForceFused, DType::F16},
                                           EmptyParam{Policy::ForceFused, DType::BF16},
                                           EmptyParam{Policy::ForceFused, DType::F32},
                                           EmptyParam{Policy::Auto, DType::F32},
                                           EmptyParam{Policy::Unfused, DType::BF16}),
                         [](const ::testing::TestParamInfo<EmptyParam>& i) {
                           return std::string(to_string(i.param.policy)) + "_" +
                                  to_string(i.param.dtype);
                         });

}  // namespace
}  // namespace fsdpa::test
