// The NaN/Inf policy (docs/design.md) on both CPU paths: a key a row masks
// contributes nothing to that row, whatever its values; a non-finite value a
// row uses makes that row's output and lse NaN (or infinite); the fused path
// and the float64 reference agree element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fsdpa/fsdpa.h"

namespace fsdpa::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Call {
  int64_t heads = 2, len_q = 5, len_k = 9, dim = 8;
  std::vector<float> q, k, v, out, lse, mask;
  bool causal = true;
  MaskKind mask_kind = MaskKind::None;

  explicit Call(int64_t lk = 9, int64_t lq = 5) : len_q(lq), len_k(lk) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    q.resize(static_cast<size_t>(heads * len_q * dim));
    k.resize(static_cast<size_t>(heads * len_k * dim));
    v.resize(static_cast<size_t>(heads * len_k * dim));
    for (auto* x : {&q, &k, &v})
      for (float& e : *x) e = u(rng);
    mask.assign(static_cast<size_t>(len_q * len_k), 0.0f);
  }
  float& at(std::vector<float>& x, int64_t h, int64_t row, int64_t d, int64_t rows) {
    return x[static_cast<size_t>((h * rows + row) * dim + d)];
  }
  // Runs on the CPU with `policy`; out and lse are fresh.
  void run(Policy policy) {
    out.assign(static_cast<size_t>(heads * len_q * dim), -7.0f);
    lse.assign(static_cast<size_t>(heads * len_q), -7.0f);
    Tensors t;
    t.q = contiguous_view(q.data(), DType::F32, {1, heads, len_q, dim});
    t.k = contiguous_view(k.data(), DType::F32, {1, heads, len_k, dim});
    t.v = contiguous_view(v.data(), DType::F32, {1, heads, len_k, dim});
    t.out = contiguous_view(out.data(), DType::F32, {1, heads, len_q, dim});
    t.lse = contiguous_view(lse.data(), DType::F32, {1, heads, len_q});
    std::vector<uint8_t> keep;
    if (mask_kind == MaskKind::Additive) {
      t.mask = contiguous_view(mask.data(), DType::F32, {1, 1, len_q, len_k});
    } else if (mask_kind == MaskKind::Boolean) {
      keep.resize(mask.size());
      for (size_t i = 0; i < mask.size(); ++i) keep[i] = mask[i] == 0.0f ? 1 : 0;
      t.mask = contiguous_view(keep.data(), DType::Bool, {1, 1, len_q, len_k});
    }
    Options o;
    o.causal = causal;
    o.policy = policy;
    attention(t, o);
  }
};

const Policy kPolicies[] = {Policy::ForceFused, Policy::Unfused};

std::string name(Policy p) { return p == Policy::Unfused ? "unfused" : "fused"; }

// The last key (j = Lk - 1) is masked by causal bottom-right for every row
// but the last: poison it and check rows 0..Lq-2 against a clean run.
TEST(NanPolicy, MaskedKeysContributeNothing) {
  for (Policy policy : kPolicies)
    for (const char* where : {"v", "k"})
      for (float poison : {kNaN, kInf}) {
        SCOPED_TRACE(name(policy) + " " + where + " " + std::to_string(poison));
        Call clean;
        clean.run(policy);
        Call c;
        std::vector<float>& x = std::string(where) == "v" ? c.v : c.k;
        for (int64_t h = 0; h < c.heads; ++h) c.at(x, h, c.len_k - 1, 3, c.len_k) = poison;
        c.run(policy);
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t i = 0; i < c.len_q - 1; ++i) {
            EXPECT_FLOAT_EQ(c.lse[static_cast<size_t>(h * c.len_q + i)],
                            clean.lse[static_cast<size_t>(h * c.len_q + i)]);
            for (int64_t d = 0; d < c.dim; ++d)
              EXPECT_NEAR(c.at(c.out, h, i, d, c.len_q), clean.at(clean.out, h, i, d, c.len_q),
                          1e-6);
          }
        // The last row sees the key: NaN there, or the infinity in v, make it
        // non-finite (an infinity in k gives a score of +inf or -inf, by the
        // sign of q: either a NaN row or a key with weight 0, as in PyTorch).
        if (std::isnan(poison) || std::string(where) == "v") {
          for (int64_t h = 0; h < c.heads; ++h)
            EXPECT_FALSE(std::isfinite(c.at(c.out, h, c.len_q - 1, 3, c.len_q)));
        }
      }
}

TEST(NanPolicy, ArrayMasksMaskNonFiniteKeysToo) {
  for (Policy policy : kPolicies)
    for (MaskKind kind : {MaskKind::Boolean, MaskKind::Additive}) {
      SCOPED_TRACE(name(policy) + (kind == MaskKind::Boolean ? " boolean" : " additive"));
      Call clean;
      clean.causal = false;
      clean.mask_kind = kind;
      clean.mask[static_cast<size_t>(0 * clean.len_k + 2)] = -kInf;  // row 0 masks key 2
      clean.run(policy);
      Call c;
      c.causal = false;
      c.mask_kind = kind;
      c.mask = clean.mask;
      for (int64_t h = 0; h < c.heads; ++h) {
        c.at(c.k, h, 2, 1, c.len_k) = kNaN;
        c.at(c.v, h, 2, 5, c.len_k) = kNaN;
      }
      c.run(policy);
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t d = 0; d < c.dim; ++d)
          EXPECT_NEAR(c.at(c.out, h, 0, d, c.len_q), clean.at(clean.out, h, 0, d, c.len_q), 1e-6);
        EXPECT_TRUE(std::isnan(c.at(c.out, h, 1, 0, c.len_q)));  // row 1 sees key 2
        EXPECT_TRUE(std::isnan(c.lse[static_cast<size_t>(h * c.len_q + 1)]));
      }
    }
}

TEST(NanPolicy, NanInQueryMakesThatRowNanOnly) {
  for (Policy policy : kPolicies) {
    SCOPED_TRACE(name(policy));
    Call c;
    c.at(c.q, 1, 2, 0, c.len_q) = kNaN;
    c.run(policy);
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.len_q; ++i) {
        const bool poisoned = h == 1 && i == 2;
        EXPECT_EQ(std::isnan(c.lse[static_cast<size_t>(h * c.len_q + i)]), poisoned) << h << i;
        for (int64_t d = 0; d < c.dim; ++d)
          EXPECT_EQ(std::isnan(c.at(c.out, h, i, d, c.len_q)), poisoned) << h << i << d;
      }
  }
}

// Few queries and many keys: the fused path splits the keys across threads.
TEST(NanPolicy, FusedAndUnfusedAgreeWithKeySplits) {
  Call fused(3000, 1), unfused(3000, 1);
  for (Call* c : {&fused, &unfused}) {
    c->causal = false;
    c->at(c->v, 0, 1234, 2, c->len_k) = kNaN;  // head 0 uses it
    c->at(c->k, 1, 2999, 0, c->len_k) = kInf;  // head 1: an infinite score
  }
  fused.run(Policy::ForceFused);
  unfused.run(Policy::Unfused);
  for (size_t e = 0; e < fused.out.size(); ++e)
    EXPECT_EQ(std::isnan(fused.out[e]), std::isnan(unfused.out[e])) << e;
  for (size_t e = 0; e < fused.lse.size(); ++e)
    EXPECT_EQ(std::isfinite(fused.lse[e]), std::isfinite(unfused.lse[e])) << e;
  EXPECT_TRUE(std::isnan(fused.out[2]));
}

}  // namespace
}  // namespace fsdpa::test
