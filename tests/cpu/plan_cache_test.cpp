// The plan cache attention() uses: hits, the bound, the environment in the
// key, errors not cached, and concurrent use.
#include "select/plan_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "env_guard.h"

namespace fsdpa::test {
namespace {

Problem problem_with_len_k(int64_t len_k) {
  Problem p;
  p.batch = 1;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.len_q = 3;
  p.len_k = len_k;
  p.head_dim_qk = 40;
  p.head_dim_v = 24;
  p.dtype = DType::BF16;
  return p;
}

TEST(PlanCache, TheSecondCallReturnsTheFirstPlan) {
  detail::PlanCache cache(8);
  const auto first = cache.plan(problem_with_len_k(17), {});
  const auto second = cache.plan(problem_with_len_k(17), {});
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(first->problem.len_k, 17);
}

TEST(PlanCache, EveryOptionAndProblemFieldIsInTheKey) {
  detail::PlanCache cache(64);
  const Problem base = problem_with_len_k(17);
  const auto reference = cache.plan(base, {});
  std::vector<std::pair<Problem, Options>> variants;
  auto problem_variant = [&](auto&& change) {
    Problem p = base;
    change(p);
    variants.emplace_back(p, Options{});
  };
  auto option_variant = [&](auto&& change) {
    Options o;
    change(o);
    variants.emplace_back(base, o);
  };
  problem_variant([](Problem& p) { p.len_q = 4; });
  problem_variant([](Problem& p) { p.head_dim_v = 32; });
  problem_variant([](Problem& p) { p.dtype = DType::F16; });
  problem_variant([](Problem& p) { p.has_lse = true; });
  problem_variant([](Problem& p) { p.row_alignment = 2; });
  problem_variant([](Problem& p) {
    p.mask = MaskKind::Additive;
    p.mask_dtype = DType::F32;
  });
  option_variant([](Options& o) { o.scale = 0.5; });
  option_variant([](Options& o) { o.causal = true; });
  option_variant([](Options& o) {
    o.causal = true;
    o.causal_align = CausalAlign::TopLeft;
  });
  option_variant([](Options& o) { o.window_left = 0; });
  option_variant([](Options& o) { o.policy = Policy::Unfused; });
  option_variant([](Options& o) { o.softcap = 30.0; });
  for (const auto& [problem, options] : variants) {
    const auto planned = cache.plan(problem, options);
    EXPECT_NE(planned.get(), reference.get());
    EXPECT_EQ(planned->problem.len_q, problem.len_q);
    EXPECT_EQ(planned->problem.row_alignment, problem.row_alignment);
    EXPECT_EQ(planned->options.softcap, options.softcap);
    EXPECT_EQ(planned->options.window_left, options.window_left);
  }
  EXPECT_EQ(cache.size(), variants.size() + 1);
}

TEST(PlanCache, EnvironmentVariablesAreInTheKey) {
  detail::PlanCache cache(8);
  EnvGuard policy("FSDPA_POLICY", nullptr);
  const auto automatic = cache.plan(problem_with_len_k(17), {});
  EXPECT_EQ(automatic->path, Path::FusedPrefill);
  {
    EnvGuard unfused("FSDPA_POLICY", "unfused");
    const auto planned = cache.plan(problem_with_len_k(17), {});
    EXPECT_EQ(planned->path, Path::Unfused);
    EXPECT_EQ(planned->policy, Policy::Unfused);
  }
  {
    EnvGuard threads("FSDPA_NUM_THREADS", "3");
    EXPECT_EQ(cache.plan(problem_with_len_k(17), {})->num_threads, 3);
  }
  EXPECT_EQ(cache.plan(problem_with_len_k(17), {}).get(), automatic.get());
}

// The key reads the planning variables in one pass over the environment
// (plan_cache.cpp): a longer name with the same start is another variable.
TEST(PlanCache, OnlyTheExactNamesAreRead) {
  detail::PlanCache cache(8);
  EnvGuard policy("FSDPA_POLICY", nullptr);
  EnvGuard longer("FSDPA_POLICYX", "unfused");
  EnvGuard threads("FSDPA_NUM_THREADS", "2");
  const auto planned = cache.plan(problem_with_len_k(17), {});
  EXPECT_EQ(planned->path, Path::FusedPrefill);
  EXPECT_EQ(planned->num_threads, 2);
  EnvGuard unfused("FSDPA_POLICY", "unfused");
  EXPECT_EQ(cache.plan(problem_with_len_k(17), {})->path, Path::Unfused);
}

TEST(PlanCache, ErrorsPropagateAndAreNotCached) {
  detail::PlanCache cache(8);
  EnvGuard policy("FSDPA_POLICY", "sometimes");
  EXPECT_THROW(cache.plan(problem_with_len_k(17), {}), InvalidArgument);
  EXPECT_EQ(cache.size(), 0u);
  Problem bad = problem_with_len_k(17);
  bad.heads_kv = 3;  // does not divide heads_q
  Options fused;
  fused.policy = Policy::Auto;
  EXPECT_THROW(cache.plan(bad, fused), InvalidArgument);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(PlanCache, EvictsTheLeastRecentlyUsedEntryPastItsCapacity) {
  detail::PlanCache cache(2);
  const auto a = cache.plan(problem_with_len_k(1), {});
  const auto b = cache.plan(problem_with_len_k(2), {});
  EXPECT_EQ(cache.plan(problem_with_len_k(1), {}).get(), a.get());  // a is now the newest
  cache.plan(problem_with_len_k(3), {});                            // evicts b
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.plan(problem_with_len_k(1), {}).get(), a.get());
  EXPECT_NE(cache.plan(problem_with_len_k(2), {}).get(), b.get());
  EXPECT_EQ(cache.size(), 2u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(PlanCache, ManyThreadsGetThePlanOfTheirOwnShape) {
  detail::PlanCache cache(5);  // fewer entries than shapes: evictions race with hits
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        const int64_t len_k = 1 + (i * 7 + t) % 13;
        if (cache.plan(problem_with_len_k(len_k), {})->problem.len_k != len_k) ++wrong;
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.size(), cache.capacity());
}

TEST(PlanCache, TheProcessCacheIsBounded) {
  EXPECT_EQ(detail::plan_cache().capacity(), detail::kPlanCacheCapacity);
  for (int64_t len_k = 1; len_k <= static_cast<int64_t>(detail::kPlanCacheCapacity) + 10; ++len_k)
    detail::plan_cache().plan(problem_with_len_k(len_k), {});
  EXPECT_EQ(detail::plan_cache().size(), detail::kPlanCacheCapacity);
}

}  // namespace
}  // namespace fsdpa::test
