// The fused CPU path (policy ForceFused) against the float64 reference.
//
// The grid of DESIGN §5 is sampled, not multiplied out: every value of every
// axis appears (dtypes, head dims, lengths, GQA ratios, causal alignments,
// windows, mask kinds/dtypes/broadcast shapes, sinks, layouts, fully masked
// rows, Lk = 0), rotated against the other axes with co-prime steps, and the
// combinations that interact are listed explicitly. Each case draws fresh
// inputs from the run's seed; see tests/common/attention_case.h for the
// checks and the error bounds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "attention_case.h"
#include "cpu/cpu.h"
#include "env_guard.h"

namespace fsdpa::test {
namespace {

struct HeadDims {
  int64_t qk, v;
};
const HeadDims kHeadDims[] = {{1, 1},     {8, 8},     {59, 59},   {64, 64},   {72, 72},
                              {90, 90},   {111, 111}, {128, 128}, {200, 200}, {256, 256},
                              {288, 288}, {512, 512}, {96, 64},   {192, 128}, {576, 512}};
const DType kDTypes[] = {DType::F16, DType::BF16, DType::F32};
const int64_t kGqa[] = {1, 4, 7};
const Layout kLayouts[] = {Layout::Contiguous, Layout::Padded,   Layout::BSHD,
                           Layout::DMajor,     Layout::PackedKV, Layout::MlaAlias};
const MaskShape kMaskShapes[] = {MaskShape::Full,    MaskShape::Shared,   MaskShape::PerBatch,
                                 MaskShape::PerHead, MaskShape::Expanded, MaskShape::KeyPadding,
                                 MaskShape::KeyRow};
const DType kAdditiveDTypes[] = {DType::F32, DType::F16, DType::BF16};

template <typename T, size_t N>
const T& pick(const T (&values)[N], size_t k) {
  return values[k % N];
}

// Sets mask type k (0 none, 1 boolean, 2..4 additive f32/f16/bf16) and shape.
void set_mask(AttentionCase& c, size_t kind, size_t shape, bool dead_rows) {
  kind %= 5;
  if (kind == 0) return;
  c.mask = kind == 1 ? MaskType::Boolean : MaskType::Additive;
  if (kind >= 2) c.mask_dtype = kAdditiveDTypes[kind - 2];
  c.mask_shape = pick(kMaskShapes, shape);
  c.masked_rows = dead_rows;
}

void set_causal(AttentionCase& c, size_t k) {
  switch (k % 3) {
    case 0:
      break;
    case 1:
      c.causal = true;
      c.align = CausalAlign::BottomRight;
      break;
    default:
      c.causal = true;
      c.align = CausalAlign::TopLeft;
  }
}

std::vector<AttentionCase> fused_cases() {
  std::vector<AttentionCase> cases;

  // 1. Every head-dim pair in every dtype, other axes rotated. Lengths shrink
  //    as the head dims grow so the scalar reference stays fast.
  {
    const int64_t lq_small[] = {17, 1, 37, 97, 17, 37, 1};
    const int64_t lk_small[] = {37, 97, 17, 97, 1, 37, 17};
    size_t k = 0;
    for (const HeadDims& hd : kHeadDims)
      for (DType dtype : kDTypes) {
        AttentionCase c;
        c.dtype = dtype;
        c.dqk = hd.qk;
        c.dv = hd.v;
        const bool big = hd.qk >= 256;
        c.len_q = big ? pick(lq_small, k) % 40 : pick(lq_small, k);
        c.len_k = big ? pick(lk_small, k + 2) % 40 : pick(lk_small, k + 2);
        if (c.len_q == 0) c.len_q = 17;
        if (c.len_k == 0) c.len_k = 17;
        c.heads_kv = big ? 1 : 1 + static_cast<int64_t>(k % 2);
        c.heads_q = c.heads_kv * pick(kGqa, k);
        c.batch = 1 + static_cast<int64_t>((k / 3) % 2);
        c.layout = pick(kLayouts, k * 5 + 1);
        set_causal(c, k / 2);
        set_mask(c, k * 3 + 1, k, k % 4 == 1);
        c.sinks = k % 3 == 2;
        c.lse = k % 5 != 4;
        if (k % 4 == 3) c.window = static_cast<int64_t>(k % 7 + 1);
        if (k % 11 == 5) c.scale = hd.qk <= 90 ? 2.0 : 0.3;
        if (k % 11 == 8) c.scale = 0.05;
        cases.push_back(c);
        ++k;
      }
  }

  // 2. Every (Lq, Lk) pair of the awkward lengths, causal in both alignments
  //    (Lq > Lk included), a window on some.
  {
    const int64_t lengths[] = {1, 17, 37, 97, 577};
    const HeadDims dims[] = {{8, 8}, {59, 59}, {64, 64}, {111, 111}};
    size_t k = 0;
    for (int64_t lq : lengths)
      for (int64_t lk : lengths)
        for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft}) {
          AttentionCase c;
          c.len_q = lq;
          c.len_k = lk;
          c.causal = true;
          c.align = align;
          c.dtype = pick(kDTypes, k);
          const HeadDims& hd = pick(dims, k / 3);
          c.dqk = hd.qk;
          c.dv = hd.v;
          c.heads_kv = 1;
          c.heads_q = pick(kGqa, k / 2 + 1);
          if (lq * lk * c.heads_q > 100000) c.heads_q = 1;  // keep the reference quick
          c.layout = pick(kLayouts, k / 2);
          if (k % 5 == 2) c.window = static_cast<int64_t>(k % 9);
          c.sinks = k % 7 == 3;
          cases.push_back(c);
          ++k;
        }
  }

  // 3. Masks: every kind and dtype on every broadcast shape, with GQA (the
  //    mask's head index is the query head, not the kv head) and fully masked
  //    rows on half of them.
  {
    size_t k = 0;
    for (size_t kind = 1; kind <= 4; ++kind)
      for (size_t shape = 0; shape < std::size(kMaskShapes); ++shape) {
        AttentionCase c;
        set_mask(c, kind, shape, k % 2 == 0);
        c.dtype = pick(kDTypes, k + kind);
        c.batch = 2;
        c.heads_kv = 1 + static_cast<int64_t>(k % 2);
        c.heads_q = c.heads_kv * pick(kGqa, k + 1);
        c.len_q = k % 3 == 0 ? 37 : 17;
        c.len_k = k % 4 == 0 ? 97 : 37;
        const HeadDims& hd = pick(kHeadDims, k * 4 + 2);
        c.dqk = std::min<int64_t>(hd.qk, 128);
        c.dv = std::min<int64_t>(hd.v, 128);
        set_causal(c, k);
        c.sinks = k % 3 == 1;
        c.layout = pick(kLayouts, k);
        cases.push_back(c);
        ++k;
      }
  }

  // 4. Interactions, listed.
  auto base = [](DType dtype, int64_t lq, int64_t lk) {
    AttentionCase c;
    c.dtype = dtype;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.len_q = lq;
    c.len_k = lk;
    c.dqk = 64;
    c.dv = 64;
    return c;
  };
  // Window x causal, both alignments, Lq < Lk, Lq = Lk, Lq > Lk; window 0
  // (the diagonal only) and a window past which top-left rows die.
  for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft})
    for (auto [lq, lk] : {std::pair<int64_t, int64_t>{17, 97}, {37, 37}, {97, 17}})
      for (int64_t window : {0, 5}) {
        AttentionCase c = base(window == 0 ? DType::BF16 : DType::F16, lq, lk);
        c.causal = true;
        c.align = align;
        c.window = window;
        c.sinks = lq > lk && window == 5;
        cases.push_back(c);
      }
  // Window without causal (left edge only), both alignments.
  for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft}) {
    AttentionCase c = base(DType::F32, 37, 97);
    c.align = align;
    c.window = 11;
    cases.push_back(c);
    AttentionCase d = base(DType::F16, 97, 37);
    d.align = align;
    d.window = 3;
    d.sinks = true;
    cases.push_back(d);
  }
  // Sinks x fully masked rows: by boolean mask, by additive -inf, by causal
  // with Lq > Lk (bottom-right), by window past the keys (top-left); sinks
  // that dominate the denominator.
  for (DType dtype : kDTypes) {
    AttentionCase a = base(dtype, 37, 37);
    set_mask(a, 1, 0, true);
    a.sinks = true;
    cases.push_back(a);
    AttentionCase b = base(dtype, 17, 37);
    set_mask(b, 2 + (static_cast<size_t>(dtype) % 3), 2, true);
    b.sinks = true;
    b.big_sinks = true;
    cases.push_back(b);
    AttentionCase c = base(dtype, 97, 17);
    c.causal = true;
    c.sinks = true;
    cases.push_back(c);
    AttentionCase d = base(dtype, 97, 17);
    d.causal = true;
    d.align = CausalAlign::TopLeft;
    d.window = 2;
    d.sinks = true;
    d.big_sinks = dtype == DType::F32;
    cases.push_back(d);
    // Fully masked rows without sinks: lse = -inf exactly.
    AttentionCase e = base(dtype, 97, 17);
    e.causal = true;
    cases.push_back(e);
    AttentionCase f = base(dtype, 17, 37);
    set_mask(f, 2 + (static_cast<size_t>(dtype) + 1) % 3, 6, true);
    f.causal = true;
    f.align = CausalAlign::TopLeft;
    cases.push_back(f);
  }
  // GQA x mask broadcasting x layouts.
  {
    size_t k = 0;
    for (int64_t ratio : {4, 7})
      for (MaskShape shape :
           {MaskShape::PerHead, MaskShape::Full, MaskShape::Expanded, MaskShape::PerBatch}) {
        AttentionCase c = base(pick(kDTypes, k), 17, 37);
        c.heads_kv = 2;
        c.heads_q = 2 * ratio;
        c.mask = k % 2 ? MaskType::Boolean : MaskType::Additive;
        c.mask_dtype = pick(kAdditiveDTypes, k / 2);
        c.mask_shape = shape;
        c.masked_rows = true;
        c.layout = pick(kLayouts, k + 3);
        c.causal = k % 3 == 0;
        cases.push_back(c);
        ++k;
      }
  }
  // Query groups larger than one CPU tile of rows (MQA with many heads), so
  // one kv head's group is split over several work items.
  {
    AttentionCase c = base(DType::BF16, 3, 97);
    c.batch = 1;
    c.heads_kv = 1;
    c.heads_q = 40;
    c.dqk = c.dv = 288;
    c.causal = true;
    c.sinks = true;
    set_mask(c, 1, 3, true);
    cases.push_back(c);
    AttentionCase d = base(DType::F16, 1, 577);
    d.heads_kv = 1;
    d.heads_q = 80;
    d.dqk = d.dv = 64;
    d.layout = Layout::BSHD;
    set_mask(d, 3, 5, true);
    cases.push_back(d);
    AttentionCase e = base(DType::F32, 17, 37);
    e.heads_kv = 2;
    e.heads_q = 2 * 70;
    e.dqk = 576;
    e.dv = 512;
    e.layout = Layout::MlaAlias;
    e.causal = true;
    cases.push_back(e);
  }
  // Every layout in every dtype (GQA 7 over two kv heads).
  {
    size_t k = 0;
    for (Layout layout : kLayouts)
      for (DType dtype : kDTypes) {
        AttentionCase c = base(dtype, 37, 37 + static_cast<int64_t>(k % 3) * 30);
        c.heads_kv = 2;
        c.heads_q = 14;
        c.layout = layout;
        const HeadDims& hd = pick(kHeadDims, k * 7);
        c.dqk = std::min<int64_t>(hd.qk, 200);
        c.dv = std::min<int64_t>(hd.v, c.dqk);
        c.causal = k % 2 == 1;
        cases.push_back(c);
        ++k;
      }
  }
  // Lk = 0: zeros and lse = -inf (or the sink); with mask, causal, window.
  for (DType dtype : kDTypes) {
    AttentionCase c = base(dtype, 17, 0);
    cases.push_back(c);
    AttentionCase s = base(dtype, 5, 0);
    s.sinks = true;
    s.causal = true;
    s.layout = Layout::BSHD;
    cases.push_back(s);
    AttentionCase m = base(dtype, 3, 0);
    set_mask(m, 1 + static_cast<size_t>(dtype), 0, false);
    m.window = 1;
    m.layout = Layout::Padded;
    cases.push_back(m);
  }
  // Explicit scales: sharp softmax (scale 2 with D=8, 0.3 with D=128), flat
  // (0.01).
  for (double scale : {2.0, 0.3, 0.01}) {
    AttentionCase c = base(DType::F32, 37, 97);
    c.dqk = c.dv = scale == 2.0 ? 8 : 128;
    c.scale = scale;
    cases.push_back(c);
  }
  // Soft cap with every semantic: a cap that bites (5 under a sharp scale)
  // and Gemma 2's 50, with causal and windows in both alignments, both mask
  // kinds with dead rows, sinks, GQA, few-query key splits, MLA aliasing.
  {
    size_t k = 0;
    for (DType dtype : kDTypes)
      for (double cap : {5.0, 50.0}) {
        AttentionCase c = base(dtype, k % 2 ? 37 : 97, k % 3 ? 97 : 17);
        c.softcap = cap;
        c.scale = cap == 5.0 ? 1.0 : std::optional<double>{};
        const HeadDims& hd = pick(kHeadDims, k * 5 + 3);
        c.dqk = std::min<int64_t>(hd.qk, 256);
        c.dv = std::min<int64_t>(hd.v, c.dqk);
        set_causal(c, k);
        if (k % 2 == 1) c.window = static_cast<int64_t>(k + 2);
        set_mask(c, 1 + k % 4, k, k % 3 == 0);
        c.sinks = k % 2 == 0;
        c.layout = pick(kLayouts, k + 1);
        cases.push_back(c);
        ++k;
      }
    AttentionCase d = base(DType::BF16, 1, 577);  // decode: key splits over threads
    d.heads_kv = 1;
    d.heads_q = 8;
    d.dqk = d.dv = 128;
    d.softcap = 2.0;
    d.scale = 0.5;
    d.sinks = true;
    cases.push_back(d);
    AttentionCase e = base(DType::F32, 4, 97);  // MLA's absorbed form under a cap
    e.heads_kv = 1;
    e.heads_q = 16;
    e.dqk = 576;
    e.dv = 512;
    e.layout = Layout::MlaAlias;
    e.causal = true;
    e.softcap = 3.0;
    e.scale = 0.2;
    cases.push_back(e);
  }
  // Long: 4099 keys (decode and a prefill chunk), 4099 queries over few keys,
  // and 4099 x 4099 causal with a small head count.
  {
    AttentionCase c = base(DType::BF16, 1, 4099);
    c.batch = 1;
    c.heads_kv = 1;
    c.heads_q = 7;
    c.dqk = c.dv = 128;
    cases.push_back(c);
    AttentionCase d = base(DType::F16, 37, 4099);
    d.batch = 1;
    d.heads_kv = 1;
    d.heads_q = 1;
    d.causal = true;
    d.window = 1000;
    d.sinks = true;
    cases.push_back(d);
    AttentionCase e = base(DType::F32, 4099, 17);
    e.batch = 1;
    e.heads_kv = 1;
    e.heads_q = 1;
    e.causal = true;
    e.align = CausalAlign::TopLeft;
    set_mask(e, 1, 0, true);
    cases.push_back(e);
    AttentionCase f = base(DType::F32, 4099, 4099);
    f.batch = 1;
    f.heads_kv = 1;
    f.heads_q = 1;
    f.dqk = f.dv = 8;
    f.causal = true;
    cases.push_back(f);
    AttentionCase g = base(DType::F32, 3, 4099);
    g.batch = 1;
    g.heads_kv = 1;
    g.heads_q = 4;
    g.dqk = g.dv = 64;
    cases.push_back(g);
  }
  return cases;
}

class FusedVsReference : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FusedVsReference, MatchesReference) {
  const AttentionCase& c = GetParam();
  Rng rng(base_seed() ^ name_hash(c.name()));
  AttentionData d = make_data(c, rng);
  SCOPED_TRACE(seed_note());

  const Plan p = plan(describe(d.tensors, d.options), d.options);
  ASSERT_EQ(p.kernel, "cpu_fused_online_softmax");
  ASSERT_EQ(p.path, Path::FusedPrefill);

  ASSERT_NO_THROW(attention(d.tensors, d.options));
  const ReferenceResult ref = detail::cpu::reference_attention(d.tensors, d.options);
  const CheckResult r = check_output(d, ref, CheckMode::Fused);
  EXPECT_TRUE(r.ok) << c.name() << "\n" << r.report;
  if (std::getenv("FSDPA_TEST_VERBOSE")) std::cout << c.name() << "\n" << r.report << "\n";
}

INSTANTIATE_TEST_SUITE_P(Grid, FusedVsReference, ::testing::ValuesIn(fused_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& i) {
                           return i.param.name() + "_" + std::to_string(i.index);
                         });

// The grid covers every value of every axis.
TEST(FusedGrid, CoversEveryAxisValue) {
  const std::vector<AttentionCase> cases = fused_cases();
  auto any = [&](auto predicate) {
    for (const AttentionCase& c : cases)
      if (predicate(c)) return true;
    return false;
  };
  for (DType dtype : kDTypes)
    for (const HeadDims& hd : kHeadDims)
      EXPECT_TRUE(any([&](const AttentionCase& c) {
        return c.dtype == dtype && c.dqk == hd.qk && c.dv == hd.v;
      })) << to_string(dtype)
          << " " << hd.qk << "/" << hd.v;
  for (int64_t len : {1, 17, 37, 97, 577, 4099}) {
    EXPECT_TRUE(any([&](const AttentionCase& c) { return c.len_q == len; })) << "Lq " << len;
    EXPECT_TRUE(any([&](const AttentionCase& c) { return c.len_k == len; })) << "Lk " << len;
  }
  for (int64_t ratio : kGqa)
    EXPECT_TRUE(any([&](const AttentionCase& c) { return c.heads_q == ratio * c.heads_kv; }));
  for (Layout layout : kLayouts)
    for (DType dtype : kDTypes)
      EXPECT_TRUE(
          any([&](const AttentionCase& c) { return c.layout == layout && c.dtype == dtype; }));
  for (MaskShape shape : kMaskShapes) {
    EXPECT_TRUE(any([&](const AttentionCase& c) {
      return c.mask == MaskType::Boolean && c.mask_shape == shape;
    }));
    for (DType mdt : kAdditiveDTypes)
      EXPECT_TRUE(any([&](const AttentionCase& c) {
        return c.mask == MaskType::Additive && c.mask_dtype == mdt && c.mask_shape == shape;
      }));
  }
  for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft}) {
    EXPECT_TRUE(any(
        [&](const AttentionCase& c) { return c.causal && c.align == align && c.len_q > c.len_k; }));
    EXPECT_TRUE(any([&](const AttentionCase& c) {
      return c.causal && c.align == align && c.window && c.len_q > c.len_k;
    }));
    EXPECT_TRUE(any([&](const AttentionCase& c) {
      return c.causal && c.align == align && c.window && c.len_q < c.len_k;
    }));
  }
  EXPECT_TRUE(any([](const AttentionCase& c) { return c.len_k == 0 && c.sinks; }));
  for (DType dtype : kDTypes)
    EXPECT_TRUE(any([&](const AttentionCase& c) {
      return c.dtype == dtype && c.softcap > 0 && c.mask != MaskType::None;
    })) << "soft cap "
        << to_string(dtype);
  EXPECT_TRUE(any([](const AttentionCase& c) { return c.masked_rows && c.sinks; }));
  EXPECT_TRUE(any([](const AttentionCase& c) { return !c.lse; }));
  EXPECT_TRUE(any([](const AttentionCase& c) {
    return c.heads_q == 7 * c.heads_kv && c.mask_shape == MaskShape::PerHead &&
           c.mask != MaskType::None;
  }));
}

// Threads: an odd, oversubscribed thread count and a single thread give
// results within the bounds (races and partitioning bugs show here).
class FusedThreads : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedThreads, MatchesReference) {
  const EnvGuard threads("FSDPA_NUM_THREADS", GetParam());
  for (int k = 0; k < 2; ++k) {
    AttentionCase c;
    c.dtype = k ? DType::F32 : DType::BF16;
    c.batch = 3;
    c.heads_q = 7;
    c.heads_kv = 1;
    c.len_q = k ? 97 : 1;
    c.len_k = 577;
    c.dqk = c.dv = 72;
    c.causal = k == 1;
    c.sinks = true;
    Rng rng(base_seed() ^ name_hash(c.name() + GetParam()));
    AttentionData d = make_data(c, rng);
    SCOPED_TRACE(seed_note());
    EXPECT_NO_THROW(attention(d.tensors, d.options));
    const CheckResult r =
        check_output(d, detail::cpu::reference_attention(d.tensors, d.options), CheckMode::Fused);
    EXPECT_TRUE(r.ok) << c.name() << " FSDPA_NUM_THREADS=" << GetParam() << "\n" << r.report;
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, FusedThreads, ::testing::Values("1", "3", "16"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string("threads") + i.param;
                         });

// Key splits: with fewer items than threads (decode with one kv head) each
// item's keys are split over the threads and merged in a second pass.
// Covered: Lq=1 and several queries, causal both ways, a window narrower
// than a split (splits a row cannot see), masks with dead rows, sinks, LSE,
// the MLA aliasing layout, every dtype, split counts that leave a short last
// split, and Lk below the split threshold (no split).
TEST(FusedKeySplits, MatchesReference) {
  const EnvGuard threads("FSDPA_NUM_THREADS", "5");
  std::vector<AttentionCase> cases;
  for (int k = 0; k < 9; ++k) {
    AttentionCase c;
    c.dtype = pick(kDTypes, static_cast<size_t>(k));
    c.heads_q = k % 2 ? 8 : 1;
    c.len_q = k % 3 == 0 ? 1 : 3;
    c.len_k = k == 8 ? 700 : 2049 + 613 * k;
    c.dqk = c.dv = k % 4 == 1 ? 72 : 128;
    c.sinks = k % 2 == 0;
    c.lse = k != 5;
    if (k == 1 || k == 4) c.causal = true;
    if (k == 4) c.align = CausalAlign::TopLeft;
    if (k == 2) c.window = 300;
    if (k == 3) set_mask(c, 1, 0, true);
    if (k == 6) set_mask(c, 2, 3, false);
    if (k == 7) {
      c.dqk = 576;
      c.dv = 512;
      c.layout = Layout::MlaAlias;
    }
    cases.push_back(c);
  }
  for (const AttentionCase& c : cases) {
    Rng rng(base_seed() ^ name_hash(c.name() + "splits"));
    AttentionData d = make_data(c, rng);
    SCOPED_TRACE(c.name() + ", " + seed_note());
    const Plan p = plan(describe(d.tensors, d.options), d.options);
    if (c.len_k >= 1024)
      EXPECT_GT(p.num_kv_splits, 1);
    else
      EXPECT_EQ(p.num_kv_splits, 1);
    std::unique_ptr<std::byte[]> ws(new std::byte[p.workspace_bytes]);
    ASSERT_NO_THROW(run(p, d.tensors, ws.get(), p.workspace_bytes));
    const CheckResult r =
        check_output(d, detail::cpu::reference_attention(d.tensors, d.options), CheckMode::Fused);
    EXPECT_TRUE(r.ok) << r.report;
  }
}

// Repeated runs of one plan on fresh inputs agree with the reference each
// time (no state carried between runs).
TEST(FusedRepeat, FreshInputsEachRun) {
  AttentionCase c;
  c.dtype = DType::F16;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.len_q = 37;
  c.len_k = 97;
  c.dqk = c.dv = 90;
  c.causal = true;
  c.sinks = true;
  Rng rng(base_seed() ^ name_hash("repeat"));
  for (int run = 0; run < 3; ++run) {
    AttentionData d = make_data(c, rng);
    SCOPED_TRACE(seed_note() + ", run " + std::to_string(run));
    ASSERT_NO_THROW(attention(d.tensors, d.options));
    const CheckResult r =
        check_output(d, detail::cpu::reference_attention(d.tensors, d.options), CheckMode::Fused);
    EXPECT_TRUE(r.ok) << r.report;
  }
}

}  // namespace
}  // namespace fsdpa::test
