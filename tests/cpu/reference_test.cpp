// The oracle itself. The float64 reference and the fused path share the
// position rules of core/semantics.h, so comparing them cannot catch a bug
// there: these tests check visible_keys() against the rules of DESIGN §1
// written out independently, and the reference against a second, naive
// implementation (written here from the contract) on small problems.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention_case.h"
#include "core/semantics.h"
#include "cpu/cpu.h"

namespace fsdpa::test {
namespace {

TEST(Semantics, VisibleKeysMatchTheContract) {
  for (int64_t len_q = 0; len_q <= 9; ++len_q)
    for (int64_t len_k = 0; len_k <= 9; ++len_k)
      for (bool causal : {false, true})
        for (CausalAlign align : {CausalAlign::BottomRight, CausalAlign::TopLeft})
          for (int64_t window : {-1, 0, 1, 3, 100}) {
            AttentionCase c;
            c.len_q = len_q;
            c.len_k = len_k;
            c.causal = causal;
            c.align = align;
            if (window >= 0) c.window = window;
            const Options o = c.options();
            for (int64_t i = 0; i < len_q; ++i) {
              const detail::KeyRange range = detail::visible_keys(o, len_q, len_k, i);
              for (int64_t j = 0; j < len_k; ++j)
                ASSERT_EQ(j >= range.begin && j < range.end, position_visible(c, i, j))
                    << c.name() << " row " << i << " key " << j;
            }
          }
}

// Bottom-right: row i sees j <= i + Lk - Lq; top-left: j <= i (DESIGN §1).
TEST(Semantics, CausalExamples) {
  Options o;
  o.causal = true;
  // Lq = 2, Lk = 5, bottom-right: row 0 sees keys 0..3, row 1 sees 0..4.
  EXPECT_EQ(detail::visible_keys(o, 2, 5, 0).end, 4);
  EXPECT_EQ(detail::visible_keys(o, 2, 5, 1).end, 5);
  // Lq = 5, Lk = 2, bottom-right: rows 0..2 see nothing, row 3 sees key 0.
  EXPECT_LE(detail::visible_keys(o, 5, 2, 2).end, detail::visible_keys(o, 5, 2, 2).begin);
  EXPECT_EQ(detail::visible_keys(o, 5, 2, 3).end, 1);
  o.causal_align = CausalAlign::TopLeft;
  EXPECT_EQ(detail::visible_keys(o, 2, 5, 0).end, 1);
  EXPECT_EQ(detail::visible_keys(o, 5, 2, 4).end, 2);
  // Window 1 with top-left, Lq > Lk: row 4 sees keys [3, 4] clipped to Lk = 2: none.
  o.window_left = 1;
  const detail::KeyRange r = detail::visible_keys(o, 5, 2, 4);
  EXPECT_LE(r.end, r.begin);
}

// A naive float64 implementation of DESIGN §1 from the contract.
ReferenceResult naive_attention(const AttentionData& d) {
  const AttentionCase& c = d.c;
  const Tensors& t = d.tensors;
  const double scale =
      c.scale ? *c.scale : (c.dqk > 0 ? 1.0 / std::sqrt(static_cast<double>(c.dqk)) : 1.0);
  const double inf = std::numeric_limits<double>::infinity();
  ReferenceResult r;
  r.out.assign(static_cast<size_t>(c.batch * c.heads_q * c.len_q * c.dv), 0.0);
  r.lse.assign(static_cast<size_t>(c.batch * c.heads_q * c.len_q), -inf);
  auto at = [&](const TensorView& v, int64_t b, int64_t h, int64_t i, int64_t e) {
    return static_cast<double>(
        detail::load_as_float(v.data, v.dtype, detail::offset_of(v, b, h, i, e)));
  };
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const int64_t g = h * c.heads_kv / c.heads_q;  // kv head of query head h
      const double sink =
          t.sinks ? detail::load_as_float(t.sinks->data, DType::F32, h * t.sinks->strides[0])
                  : -inf;
      for (int64_t i = 0; i < c.len_q; ++i) {
        std::vector<double> s(static_cast<size_t>(c.len_k), -inf);
        double top = sink;
        for (int64_t j = 0; j < c.len_k; ++j) {
          if (!position_visible(c, i, j)) continue;
          double add = 0;
          if (t.mask) {
            const TensorView& m = *t.mask;
            const double x =
                detail::load_as_float(m.data, m.dtype, broadcast_offset(m, b, h, i, j));
            if (m.dtype == DType::Bool) {
              if (x == 0) continue;
            } else {
              add = x;
            }
          }
          double dot = 0;
          for (int64_t e = 0; e < c.dqk; ++e) dot += at(t.q, b, h, i, e) * at(t.k, b, g, j, e);
          double score = dot * scale;
          if (c.softcap > 0) score = c.softcap * std::tanh(score / c.softcap);
          s[static_cast<size_t>(j)] = score + add;
          top = std::max(top, s[static_cast<size_t>(j)]);
        }
        const int64_t row = (b * c.heads_q + h) * c.len_q + i;
        if (top == -inf) continue;
        double sum = std::exp(sink - top);
        std::vector<double> acc(static_cast<size_t>(c.dv), 0.0);
        for (int64_t j = 0; j < c.len_k; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - top);
          if (p == 0) continue;
          sum += p;
          for (int64_t e = 0; e < c.dv; ++e) acc[static_cast<size_t>(e)] += p * at(t.v, b, g, j, e);
        }
        for (int64_t e = 0; e < c.dv; ++e)
          r.out[static_cast<size_t>(row * c.dv + e)] = acc[static_cast<size_t>(e)] / sum;
        r.lse[static_cast<size_t>(row)] = top + std::log(sum);
      }
    }
  return r;
}

TEST(Reference, AgreesWithNaiveImplementation) {
  const Layout layouts[] = {Layout::Contiguous, Layout::Padded,   Layout::BSHD,
                            Layout::DMajor,     Layout::PackedKV, Layout::MlaAlias};
  const MaskShape shapes[] = {MaskShape::Full,    MaskShape::Shared,   MaskShape::PerBatch,
                              MaskShape::PerHead, MaskShape::Expanded, MaskShape::KeyPadding,
                              MaskShape::KeyRow};
  const DType dtypes[] = {DType::F16, DType::BF16, DType::F32};
  for (int k = 0; k < 84; ++k) {
    AttentionCase c;
    c.dtype = dtypes[k % 3];
    c.batch = 1 + k % 2;
    c.heads_kv = 1 + k % 2;
    c.heads_q = c.heads_kv * (k % 3 == 0 ? 1 : k % 3 == 1 ? 4 : 7);
    c.len_q = 1 + (k * 7) % 13;
    c.len_k = (k * 5) % 11;
    c.dqk = 1 + (k * 3) % 17;
    c.dv = c.dqk - (k % 4 == 0 ? c.dqk / 2 : 0);
    c.layout = layouts[k % 6];
    c.causal = k % 4 != 0;
    c.align = k % 8 < 4 ? CausalAlign::BottomRight : CausalAlign::TopLeft;
    if (k % 5 == 1) c.window = k % 4;
    if (k % 3 != 2) {
      c.mask = k % 2 ? MaskType::Boolean : MaskType::Additive;
      c.mask_dtype = dtypes[(k / 3) % 3];
      c.mask_shape = shapes[(k / 2) % 7];
      c.masked_rows = k % 4 == 1;
    }
    c.sinks = k % 7 < 3;
    if (k % 9 == 4) c.scale = 0.7;
    if (k % 5 == 3) c.softcap = k % 2 ? 0.5 : 30.0;
    Rng rng(base_seed() ^ name_hash(c.name()));
    AttentionData d = make_data(c, rng);
    const ReferenceResult ref = detail::cpu::reference_attention(d.tensors, d.options);
    const ReferenceResult naive = naive_attention(d);
    ASSERT_EQ(ref.out.size(), naive.out.size());
    ASSERT_EQ(ref.lse.size(), naive.lse.size());
    for (size_t x = 0; x < ref.out.size(); ++x)
      ASSERT_NEAR(ref.out[x], naive.out[x], 1e-12 * (1 + std::abs(naive.out[x])))
          << c.name() << " out " << x << " " << seed_note();
    for (size_t x = 0; x < ref.lse.size(); ++x) {
      if (std::isinf(naive.lse[x]))
        ASSERT_EQ(ref.lse[x], naive.lse[x]) << c.name() << " lse " << x;
      else
        ASSERT_NEAR(ref.lse[x], naive.lse[x], 1e-12 * (1 + std::abs(naive.lse[x])))
            << c.name() << " lse " << x << " " << seed_note();
    }
  }
}

// One f32 query against `keys` keys, Dqk = Dv = 1: the hand-computed cases.
Tensors one_query(float* q, float* k, float* v, int64_t keys, float* out, float* lse) {
  Tensors t;
  t.q = contiguous_view(q, DType::F32, {1, 1, 1, 1});
  t.k = contiguous_view(k, DType::F32, {1, 1, keys, 1});
  t.v = contiguous_view(v, DType::F32, {1, 1, keys, 1});
  t.out = contiguous_view(out, DType::F32, {1, 1, 1, 1});
  t.lse = contiguous_view(lse, DType::F32, {1, 1, 1});
  return t;
}

// A hand-computed case: one query, two keys, Dqk = Dv = 1, scale 1:
// s = (1*1, 1*2) = (1, 2), out = (e*3 + e^2*5) / (e + e^2), lse = log(e + e^2);
// with a sink of 0 the denominator gains 1.
TEST(Reference, HandComputed) {
  float q[] = {1}, k[] = {1, 2}, v[] = {3, 5}, out[] = {0}, lse[] = {0}, sink[] = {0};
  Tensors t = one_query(q, k, v, 2, out, lse);
  Options o;
  o.scale = 1.0;
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  ReferenceResult r = detail::cpu::reference_attention(t, o);
  EXPECT_NEAR(r.out[0], (e * 3 + e2 * 5) / (e + e2), 1e-14);
  EXPECT_NEAR(r.lse[0], std::log(e + e2), 1e-14);
  t.sinks = contiguous_view(sink, DType::F32, {1});
  r = detail::cpu::reference_attention(t, o);
  EXPECT_NEAR(r.out[0], (e * 3 + e2 * 5) / (1 + e + e2), 1e-14);
  EXPECT_NEAR(r.lse[0], std::log(1 + e + e2), 1e-14);
  // Causal bottom-right with Lq = Lk = 1 sees the key; the fused path agrees.
  for (Policy policy : {Policy::ForceFused, Policy::Unfused}) {
    o.policy = policy;
    attention(t, o);
    EXPECT_NEAR(out[0], (e * 3 + e2 * 5) / (1 + e + e2), 1e-6) << to_string(policy);
    EXPECT_NEAR(lse[0], std::log(1 + e + e2), 1e-6) << to_string(policy);
  }
}

// A boolean mask is bytes: any nonzero byte keeps the key, on every path
// (a bool object holding 2 would be undefined behaviour).
TEST(Reference, BoolMaskNonzeroBytesKeep) {
  float q[] = {1}, k[] = {1, 2, 3}, v[] = {3, 5, 7}, out[] = {0}, lse[] = {0};
  unsigned char mask[] = {2, 0, 255};
  Tensors t = one_query(q, k, v, 3, out, lse);
  t.mask = contiguous_view(mask, DType::Bool, {1, 1, 1, 3});
  Options o;
  o.scale = 1.0;
  const double a = std::exp(1.0), c = std::exp(3.0);
  for (Policy policy : {Policy::ForceFused, Policy::Unfused}) {
    o.policy = policy;
    attention(t, o);
    EXPECT_NEAR(out[0], (a * 3 + c * 7) / (a + c), 1e-5) << to_string(policy);
    EXPECT_NEAR(lse[0], std::log(a + c), 1e-6) << to_string(policy);
  }
}

// f32 tensors at odd byte addresses (accepted: only the last stride must be
// 1): every path reads and writes them through byte copies, and agrees.
TEST(Reference, MisalignedPointers) {
  alignas(16) unsigned char buffer[1 + 4 * (2 + 6 + 6 + 2 + 1)] = {};
  unsigned char* at = buffer + 1;
  auto put = [&](int index, float x) { std::memcpy(at + 4 * index, &x, 4); };
  const float values[] = {0.5f, -1.0f, 1.0f, 2.0f, -0.5f, 0.25f, 3.0f, 1.5f,
                          2.0f, -2.0f, 0.5f, 1.0f, 0.0f,  0.0f,  0.0f};
  for (int i = 0; i < 14; ++i) put(i, values[i]);
  Tensors t;
  t.q = contiguous_view(at, DType::F32, {1, 1, 1, 2});
  t.k = contiguous_view(at + 8, DType::F32, {1, 1, 3, 2});
  t.v = contiguous_view(at + 32, DType::F32, {1, 1, 3, 2});
  t.out = contiguous_view(at + 56, DType::F32, {1, 1, 1, 2});
  t.lse = contiguous_view(at + 64, DType::F32, {1, 1, 1});
  const ReferenceResult ref = detail::cpu::reference_attention(t, {});
  for (Policy policy : {Policy::ForceFused, Policy::Unfused}) {
    Options o;
    o.policy = policy;
    attention(t, o);
    float out[2], lse;
    std::memcpy(out, at + 56, 8);
    std::memcpy(&lse, at + 64, 4);
    EXPECT_NEAR(out[0], ref.out[0], 1e-6) << to_string(policy);
    EXPECT_NEAR(out[1], ref.out[1], 1e-6) << to_string(policy);
    EXPECT_NEAR(lse, ref.lse[0], 1e-6) << to_string(policy);
  }
}

// The soft cap by hand: scale 1, cap 1: s = (tanh 1, tanh 2), the mask added
// after the cap (an additive -0.5 on key 1), on every path.
TEST(Reference, SoftCapHandComputed) {
  float q[] = {1}, k[] = {1, 2}, v[] = {3, 5}, mask[] = {0.0f, -0.5f}, out[] = {0}, lse[] = {0};
  Tensors t = one_query(q, k, v, 2, out, lse);
  t.mask = contiguous_view(mask, DType::F32, {1, 1, 1, 2});
  Options o;
  o.scale = 1.0;
  o.softcap = 1.0;
  const double a = std::exp(std::tanh(1.0)), b = std::exp(std::tanh(2.0) - 0.5);
  const ReferenceResult r = detail::cpu::reference_attention(t, o);
  EXPECT_NEAR(r.out[0], (a * 3 + b * 5) / (a + b), 1e-14);
  EXPECT_NEAR(r.lse[0], std::log(a + b), 1e-14);
  for (Policy policy : {Policy::ForceFused, Policy::Unfused}) {
    o.policy = policy;
    attention(t, o);
    EXPECT_NEAR(out[0], (a * 3 + b * 5) / (a + b), 1e-6) << to_string(policy);
    EXPECT_NEAR(lse[0], std::log(a + b), 1e-6) << to_string(policy);
  }
}

}  // namespace
}  // namespace fsdpa::test
