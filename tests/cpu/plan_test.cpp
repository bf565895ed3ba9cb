// Planning on the CPU: plan() fields, policies (options and FSDPA_POLICY),
// explain(), the support matrix, describe() facts, and plan reuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "attention_case.h"
#include "env_guard.h"
#include "select/table.h"
#if FSDPA_WITH_CUDA
#include "cuda/common/device.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_host.h"
#endif

namespace fsdpa::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Problem cpu_problem(int64_t len_q, int64_t len_k, int64_t dqk = 128, int64_t dv = 128) {
  Problem p;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.len_q = len_q;
  p.len_k = len_k;
  p.head_dim_qk = dqk;
  p.head_dim_v = dv;
  p.dtype = DType::BF16;
  return p;
}

Options with_policy(Policy policy) {
  Options o;
  o.policy = policy;
  return o;
}

TEST(Plan, FusedFieldsOnCpu) {
  EnvGuard env("FSDPA_POLICY", nullptr);
  for (Policy policy : {Policy::Auto, Policy::ForceFused}) {
    const Problem problem = cpu_problem(512, 4096);
    const Plan p = plan(problem, with_policy(policy));
    EXPECT_EQ(p.backend, Backend::CPU);
    EXPECT_EQ(p.path, Path::FusedPrefill);
    EXPECT_EQ(p.kernel, "cpu_fused_online_softmax");
    EXPECT_EQ(p.policy, policy);
    EXPECT_TRUE(p.fallback_reason.empty()) << p.fallback_reason;
    EXPECT_GE(p.num_threads, 1);
    EXPECT_GT(p.workspace_bytes, 0u);
    EXPECT_EQ(p.num_kv_splits, 1);
    EXPECT_DOUBLE_EQ(p.scale, 1.0 / std::sqrt(128.0));
    EXPECT_EQ(p.problem.len_k, 4096);
    ASSERT_GE(p.table_row, 0);
    ASSERT_LT(p.table_row, static_cast<int>(detail::selection_table().size()));
    EXPECT_EQ(p.kernel, detail::selection_table()[static_cast<size_t>(p.table_row)].name);
  }
}

// O(tile) memory: the fused workspace stops growing once Lk exceeds a tile
// (it may be smaller for fewer keys than one tile).
TEST(Plan, FusedWorkspaceIndependentOfLk) {
  EnvGuard env("FSDPA_NUM_THREADS", "2");
  const Plan small = plan(cpu_problem(64, 17), with_policy(Policy::ForceFused));
  const Plan tile = plan(cpu_problem(64, 4096), with_policy(Policy::ForceFused));
  const Plan large = plan(cpu_problem(64, 1 << 20), with_policy(Policy::ForceFused));
  const Plan huge = plan(cpu_problem(64, int64_t{1} << 30), with_policy(Policy::ForceFused));
  EXPECT_GT(small.workspace_bytes, 0u);
  EXPECT_LE(small.workspace_bytes, tile.workspace_bytes);
  EXPECT_EQ(tile.workspace_bytes, large.workspace_bytes);
  EXPECT_EQ(tile.workspace_bytes, huge.workspace_bytes);
  // Far below one row of float scores at Lk = 2^20 per thread.
  EXPECT_LT(huge.workspace_bytes, size_t{1} << 20);
}

TEST(Plan, ThreadsFromEnvironment) {
  {
    EnvGuard env("FSDPA_NUM_THREADS", "3");
    EXPECT_EQ(plan(cpu_problem(4096, 4096), with_policy(Policy::ForceFused)).num_threads, 3);
  }
  {
    EnvGuard env("FSDPA_NUM_THREADS", "1");
    EXPECT_EQ(plan(cpu_problem(4096, 4096), with_policy(Policy::ForceFused)).num_threads, 1);
  }
  {
    EnvGuard env("FSDPA_NUM_THREADS", nullptr);
    const int threads = plan(cpu_problem(4096, 4096), with_policy(Policy::ForceFused)).num_threads;
    EXPECT_GE(threads, 1);
    EXPECT_EQ(threads, detail::cpu::default_num_threads());
  }
}

// On the CPU every valid shape has the fused path: ForceFused never raises.
TEST(Plan, ForceFusedServesEveryShapeOnCpu) {
  for (auto [dqk, dv] : {std::pair<int64_t, int64_t>{1, 1}, {1040, 1040}, {576, 512}, {3, 700}}) {
    for (int64_t len_q : {1, 4096}) {
      Problem problem = cpu_problem(len_q, 4096, dqk, dv);
      problem.mask = MaskKind::Boolean;
      problem.has_sinks = true;
      problem.row_alignment = 0;
      Plan p;
      ASSERT_NO_THROW(p = plan(problem, with_policy(Policy::ForceFused))) << dqk << "/" << dv;
      EXPECT_EQ(p.kernel, "cpu_fused_online_softmax");
    }
  }
}

TEST(Plan, UnfusedPolicyUsesReference) {
  const Plan p = plan(cpu_problem(17, 33), with_policy(Policy::Unfused));
  EXPECT_EQ(p.backend, Backend::CPU);
  EXPECT_EQ(p.path, Path::Unfused);
  EXPECT_EQ(p.kernel, "cpu_reference_f64");
  EXPECT_EQ(p.fallback_reason, "policy is unfused");
  EXPECT_EQ(p.policy, Policy::Unfused);
  EXPECT_EQ(p.num_threads, 1);
  EXPECT_GT(p.workspace_bytes, 0u);
}

TEST(Plan, EnvironmentOverridesDefaultPolicyOnly) {
  const Problem problem = cpu_problem(17, 33);
  {
    EnvGuard env("FSDPA_POLICY", "unfused");
    const Plan p = plan(problem, {});
    EXPECT_EQ(p.policy, Policy::Unfused);
    EXPECT_EQ(p.kernel, "cpu_reference_f64");
    EXPECT_EQ(p.fallback_reason, "policy is unfused");
    // An explicit options.policy wins over the environment.
    const Plan q = plan(problem, with_policy(Policy::Auto));
    EXPECT_EQ(q.policy, Policy::Auto);
    EXPECT_EQ(q.kernel, "cpu_fused_online_softmax");
    EXPECT_EQ(plan(problem, with_policy(Policy::ForceFused)).kernel, "cpu_fused_online_softmax");
  }
  {
    EnvGuard env("FSDPA_POLICY", "fused");
    const Plan p = plan(problem, {});
    EXPECT_EQ(p.policy, Policy::ForceFused);
    EXPECT_EQ(p.kernel, "cpu_fused_online_softmax");
    EXPECT_EQ(plan(problem, with_policy(Policy::Unfused)).kernel, "cpu_reference_f64");
  }
  {
    EnvGuard env("FSDPA_POLICY", "auto");
    EXPECT_EQ(plan(problem, {}).policy, Policy::Auto);
    EXPECT_EQ(plan(problem, with_policy(Policy::Unfused)).policy, Policy::Unfused);
  }
  {
    EnvGuard env("FSDPA_POLICY", "");
    EXPECT_EQ(plan(problem, {}).policy, Policy::Auto);
  }
  {
    EnvGuard env("FSDPA_POLICY", nullptr);
    EXPECT_EQ(plan(problem, {}).policy, Policy::Auto);
    EXPECT_EQ(plan(problem, {}).kernel, "cpu_fused_online_softmax");
  }
  {
    // A bad value does not matter when the policy is explicit.
    EnvGuard env("FSDPA_POLICY", "bogus");
    EXPECT_NO_THROW(plan(problem, with_policy(Policy::Auto)));
  }
}

// attention() follows FSDPA_POLICY too: unfused output is the reference
// rounded once (exactly what check_output's Unfused mode accepts).
TEST(Plan, EnvironmentPolicyReachesAttention) {
  EnvGuard env("FSDPA_POLICY", "unfused");
  AttentionCase c;
  c.policy = Policy::Auto;
  c.dtype = DType::F16;
  c.batch = 1;
  c.heads_q = 2;
  c.len_q = 5;
  c.len_k = 9;
  c.dqk = c.dv = 16;
  Rng rng(base_seed());
  AttentionData d = make_data(c, rng);
  d.options.policy.reset();
  ASSERT_NO_THROW(attention(d.tensors, d.options));
  const CheckResult r =
      check_output(d, detail::cpu::reference_attention(d.tensors, d.options), CheckMode::Unfused);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Plan, ExplainNamesEverything) {
  Problem problem = cpu_problem(37, 97, 96, 64);
  problem.mask = MaskKind::Additive;
  problem.mask_dtype = DType::BF16;
  problem.has_sinks = true;
  problem.has_lse = true;
  Options o = with_policy(Policy::ForceFused);
  o.causal = true;
  o.window_left = 3;
  o.scale = 0.25;
  const Plan p = plan(problem, o);
  const std::string e = p.explain();
  EXPECT_THAT(e, HasSubstr("problem   B=2 Hq=8 Hkv=2 Lq=37 Lk=97 Dqk=96 Dv=64 dtype=bf16 "
                           "device=cpu:0"));
  EXPECT_THAT(e, HasSubstr("features  causal=bottom-right window=3 mask=additive-bf16 sinks=yes "
                           "lse=yes scale=0.25"));
  EXPECT_THAT(e, HasSubstr("policy    fused\n"));
  EXPECT_THAT(e, HasSubstr("backend   cpu\n"));
  EXPECT_THAT(e, HasSubstr("path      fused-prefill\n"));
  EXPECT_THAT(e, HasSubstr("kernel    cpu_fused_online_softmax\n"));
  EXPECT_THAT(e, HasSubstr("threads   " + std::to_string(p.num_threads) + "\n"));
  EXPECT_THAT(e, HasSubstr("workspace " + std::to_string(p.workspace_bytes) + " bytes\n"));
  EXPECT_THAT(e, Not(HasSubstr("fallback")));

  Options u = with_policy(Policy::Unfused);
  u.causal = true;
  u.causal_align = CausalAlign::TopLeft;
  problem.mask = MaskKind::Boolean;
  problem.has_sinks = false;
  const std::string eu = plan(problem, u).explain();
  EXPECT_THAT(eu, HasSubstr("causal=top-left window=none mask=boolean sinks=no"));
  EXPECT_THAT(eu, HasSubstr("kernel    cpu_reference_f64\n"));
  EXPECT_THAT(eu, HasSubstr("path      unfused\n"));
  EXPECT_THAT(eu, HasSubstr("fallback  policy is unfused\n"));
}

TEST(Plan, SupportMatrixMentionsEveryRow) {
  const std::string m = support_matrix();
  for (const detail::KernelRow& row : detail::selection_table()) {
    EXPECT_THAT(m, HasSubstr(std::string("`") + row.name + "`"));
    EXPECT_THAT(m, HasSubstr(row.summary));
  }
  EXPECT_THAT(m, HasSubstr("Backend cpu, bf16, policy auto:"));
  EXPECT_THAT(m, HasSubstr("| 576/512 | deepseek mla, v = k[..., :512] |"));
  EXPECT_THAT(m, HasSubstr("| 576/512 | - |"));
  EXPECT_THAT(m, HasSubstr("| 1040/1040 |"));
#if !FSDPA_WITH_CUDA
  EXPECT_THAT(m, HasSubstr("Backend cuda, bf16, policy auto: not built into this library"));
#else
  // An unfused cell names the decline that decided it, not every row's: not
  // the decode rows' query-length routing, not the f32 row's dtype.
  EXPECT_THAT(m, HasSubstr("unfused `cuda_unfused_cublas` (cuda_fused_prefill: head_dim_qk=1040 "
                           "exceeds the largest fused size 576) |"));
  EXPECT_THAT(m, Not(HasSubstr("exceeds the decode limit")));
  EXPECT_THAT(m, Not(HasSubstr("is not f32")));
#endif
}

TEST(Plan, Deterministic) {
  const Problem problem = cpu_problem(37, 97);
  const Plan a = plan(problem, with_policy(Policy::ForceFused));
  const Plan b = plan(problem, with_policy(Policy::ForceFused));
  EXPECT_EQ(a.kernel, b.kernel);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.num_threads, b.num_threads);
  EXPECT_EQ(a.tile_q, b.tile_q);
  EXPECT_EQ(a.tile_k, b.tile_k);
  EXPECT_EQ(a.explain(), b.explain());
}

// plan_for_row: the plan plan() makes once it has chosen that row.
TEST(Plan, ForRowMatchesPlan) {
  const Problem problem = cpu_problem(37, 97);
  const Plan chosen = plan(problem, with_policy(Policy::ForceFused));
  const Plan direct =
      detail::plan_for_row(problem, with_policy(Policy::ForceFused), chosen.table_row);
  EXPECT_EQ(direct.kernel, chosen.kernel);
  EXPECT_EQ(direct.explain(), chosen.explain());
  const int rows = static_cast<int>(detail::selection_table().size());
  for (int bad : {-1, rows}) {
    try {
      detail::plan_for_row(problem, {}, bad);
      ADD_FAILURE() << "row " << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), "fsdpa: plan_for_row: row " + std::to_string(bad) +
                                           " of a table of " + std::to_string(rows));
    }
  }
}

// describe() derives the facts the table selects on.
TEST(Describe, ProblemFacts) {
  AttentionCase c;
  c.dtype = DType::F16;
  c.batch = 3;
  c.heads_q = 6;
  c.heads_kv = 2;
  c.len_q = 5;
  c.len_k = 7;
  c.dqk = 64;
  c.dv = 32;
  c.mask = MaskType::Additive;
  c.mask_dtype = DType::BF16;
  c.mask_shape = MaskShape::KeyRow;
  c.sinks = true;
  Rng rng(base_seed());
  struct Expect {
    Layout layout;
    int alignment;     // Problem::row_alignment: Padded starts one f16 element off, DMajor has none
    bool alias, blas;  // blas: out D-major has no unit last-dim stride
  };
  for (const Expect& e :
       {Expect{Layout::Contiguous, 16, false, true}, Expect{Layout::BSHD, 16, false, true},
        Expect{Layout::Padded, 2, false, true}, Expect{Layout::DMajor, 0, false, false},
        Expect{Layout::PackedKV, 16, false, true}, Expect{Layout::MlaAlias, 16, true, true}}) {
    c.layout = e.layout;
    AttentionData d = make_data(c, rng);
    const Problem p = describe(d.tensors, d.options);
    SCOPED_TRACE(name_of(e.layout));
    EXPECT_EQ(p.batch, 3);
    EXPECT_EQ(p.heads_q, 6);
    EXPECT_EQ(p.heads_kv, 2);
    EXPECT_EQ(p.len_q, 5);
    EXPECT_EQ(p.len_k, 7);
    EXPECT_EQ(p.head_dim_qk, 64);
    EXPECT_EQ(p.head_dim_v, 32);
    EXPECT_EQ(p.dtype, DType::F16);
    EXPECT_EQ(p.mask, MaskKind::Additive);
    EXPECT_EQ(p.mask_dtype, DType::BF16);
    EXPECT_TRUE(p.has_sinks);
    EXPECT_TRUE(p.has_lse);
    EXPECT_EQ(p.row_alignment, e.alignment);
    EXPECT_EQ(p.v_aliases_k, e.alias);
    EXPECT_EQ(p.matrices_blas_compatible, e.blas);
  }
  c.mask = MaskType::Boolean;
  c.sinks = false;
  c.lse = false;
  c.layout = Layout::Contiguous;
  AttentionData d = make_data(c, rng);
  const Problem p = describe(d.tensors, d.options);
  EXPECT_EQ(p.mask, MaskKind::Boolean);
  EXPECT_FALSE(p.has_sinks);
  EXPECT_FALSE(p.has_lse);
}

// One plan serves many run() calls on different buffers (and layouts with
// the same problem facts), each correct.
TEST(Plan, ReusableAcrossRuns) {
  AttentionCase c;
  c.dtype = DType::BF16;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.len_q = 17;
  c.len_k = 37;
  c.dqk = c.dv = 64;
  c.causal = true;
  c.sinks = true;
  Rng rng(base_seed() ^ name_hash("reuse"));
  AttentionData first = make_data(c, rng);
  const Plan p = plan(describe(first.tensors, first.options), first.options);
  std::unique_ptr<std::byte[]> ws(new std::byte[p.workspace_bytes]);
  for (Layout layout : {Layout::Contiguous, Layout::BSHD, Layout::Contiguous, Layout::PackedKV}) {
    c.layout = layout;
    AttentionData d = make_data(c, rng);
    SCOPED_TRACE(name_of(layout));
    ASSERT_NO_THROW(run(p, d.tensors, ws.get(), p.workspace_bytes));
    const CheckResult r =
        check_output(d, detail::cpu::reference_attention(d.tensors, d.options), CheckMode::Fused);
    EXPECT_TRUE(r.ok) << r.report;
  }
  // The workspace is scratch: garbage in it does not matter.
  std::memset(ws.get(), 0xff, p.workspace_bytes);
  ASSERT_NO_THROW(run(p, first.tensors, ws.get(), p.workspace_bytes));
  const CheckResult r = check_output(
      first, detail::cpu::reference_attention(first.tensors, first.options), CheckMode::Fused);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Version, NonEmpty) { EXPECT_THAT(std::string(version()), Not(::testing::IsEmpty())); }

TEST(ToString, Names) {
  EXPECT_STREQ(to_string(DType::F16), "f16");
  EXPECT_STREQ(to_string(DType::BF16), "bf16");
  EXPECT_STREQ(to_string(DType::F32), "f32");
  EXPECT_STREQ(to_string(DType::Bool), "bool");
  EXPECT_STREQ(to_string(DeviceType::CPU), "cpu");
  EXPECT_STREQ(to_string(DeviceType::CUDA), "cuda");
  EXPECT_STREQ(to_string(Backend::CPU), "cpu");
  EXPECT_STREQ(to_string(Path::FusedPrefill), "fused-prefill");
  EXPECT_STREQ(to_string(Path::FusedDecode), "fused-decode");
  EXPECT_STREQ(to_string(Path::Unfused), "unfused");
  EXPECT_STREQ(to_string(Policy::Auto), "auto");
  EXPECT_STREQ(to_string(Policy::ForceFused), "fused");
  EXPECT_STREQ(to_string(Policy::Unfused), "unfused");
  EXPECT_EQ(element_size(DType::F16), 2u);
  EXPECT_EQ(element_size(DType::BF16), 2u);
  EXPECT_EQ(element_size(DType::F32), 4u);
  EXPECT_EQ(element_size(DType::Bool), 1u);
}

TEST(Views, ContiguousAndStrided) {
  float x = 0;
  const TensorView a = contiguous_view(&x, DType::F32, {2, 3, 4, 5});
  EXPECT_EQ(a.rank, 4);
  EXPECT_EQ(a.strides[0], 60);
  EXPECT_EQ(a.strides[1], 20);
  EXPECT_EQ(a.strides[2], 5);
  EXPECT_EQ(a.strides[3], 1);
  const TensorView b = strided_view(&x, DType::F16, {2, 3}, {7, 1}, {DeviceType::CPU, 0});
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.strides[0], 7);
  EXPECT_THROW(contiguous_view(&x, DType::F32, {}), InvalidArgument);
  EXPECT_THROW(contiguous_view(&x, DType::F32, {1, 2, 3, 4, 5}), InvalidArgument);
  try {
    strided_view(&x, DType::F32, {2, 3}, {1});
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("fsdpa: view: 2 sizes but 1 strides"));
  }
  try {
    contiguous_view(&x, DType::F32, {1, 2, 3, 4, 5});
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("fsdpa: view: rank must be 1..4, got 5"));
  }
  try {
    (void)element_size(static_cast<DType>(9));
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("fsdpa: dtype: unknown value 9"));
  }
}

#if FSDPA_WITH_CUDA
// The tensor-core decode kernel has a tiling per shared-memory budget
// (shared_budget.h): a device takes the tiling of the largest budget it
// allows, and below every budget the smallest's, which the row declines
// (saying why, so that another row serves the call) where it does not fit.
// The check itself takes the device's limit, so no GPU is needed.
TEST(CudaDecodeSharedMemory, EachBudgetTakesItsTiling) {
  if (!detail::cuda::decode_bucket_compiled(128, 128)) GTEST_SKIP() << "bucket 128 not built";
  Problem p;
  p.batch = 1, p.heads_q = 8, p.heads_kv = 8, p.len_q = 1, p.len_k = 4096;
  p.head_dim_qk = p.head_dim_v = 128, p.dtype = DType::BF16, p.device = {DeviceType::CUDA, 0};
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 232448).ok);  // sm_90: 109312 bytes
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 166912).ok);  // sm_80: 82432
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 101376).ok);  // sm_86: 47616
  p.page_size = 16, p.num_pages = 256;                                 // the boxes' layout
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 101376).ok);  // 48128
  const detail::Verdict small = detail::cuda::decode_fits_shared_memory(p, 40000);
  EXPECT_FALSE(small.ok);
  EXPECT_EQ(small.reason,
            "the decode kernel of bucket 128/128 (bf16) needs 48128 bytes of shared memory a "
            "block, device cuda:0 allows 40000");
  p.page_size = 0, p.num_pages = 0;
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 48000).ok);  // 47616: below every budget
  p.v_aliases_k = true;  // a stage holds the K rows only
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 40000).ok);
  p.v_aliases_k = false;
  p.dtype = DType::F32;  // the CUDA-core kernel: 73088 bytes in every budget
  EXPECT_TRUE(detail::cuda::decode_fits_shared_memory(p, 101376).ok);
  EXPECT_FALSE(detail::cuda::decode_fits_shared_memory(p, 73087).ok);
}

// FSDPA_SHARED_MEMORY_LIMIT: the bytes a block may opt into as planning sees
// them (every CUDA row's shared-memory check reads it); -1 unset; the one
// parsing rule of the FSDPA_* integers.
TEST(CudaSharedMemoryLimit, ParsedAsEveryIntegerVariable) {
  {
    EnvGuard env("FSDPA_SHARED_MEMORY_LIMIT", nullptr);
    EXPECT_EQ(detail::shared_memory_limit(), -1);
  }
  {
    EnvGuard env("FSDPA_SHARED_MEMORY_LIMIT", "101376");
    EXPECT_EQ(detail::shared_memory_limit(), 101376);
  }
  EnvGuard env("FSDPA_SHARED_MEMORY_LIMIT", "99k");
  try {
    (void)detail::shared_memory_limit();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "fsdpa: FSDPA_SHARED_MEMORY_LIMIT: expected an integer from 0 to 2147483647, got "
                 "'99k'");
  }
}

// A batch with per-sequence lengths plans a list of splits: the most splits
// one sequence can take (the grid's bound without a list, the partials'
// slots) and the splits of a sequence of the batch's mean length, which
// make the dense plan of an equal batch: one wave of 132 x 2 blocks. One
// sequence, or a batch without lengths, plans no list.
TEST(CudaDecodePlan, PerSequenceLengthsPlanAListOfSplits) {
  Problem p;
  p.batch = 16, p.heads_q = 32, p.heads_kv = 8, p.len_q = 1, p.len_k = 4096;
  p.head_dim_qk = p.head_dim_v = 64, p.dtype = DType::BF16;
  const detail::cuda::DecodeGrid grid{64, 64, 16, 128, 2, 1, false};
  auto planned = [&](const Problem& problem) {
    Plan plan;
    detail::cuda::configure_decode_plan(problem, plan, grid);
    return plan;
  };
  Plan dense = planned(p);
  EXPECT_EQ(dense.num_kv_splits, 2);  // 264 blocks / (16 x 8)
  EXPECT_EQ(dense.kv_split_slots, 0);
  p.has_seq_lens_k = true;
  Plan lens = planned(p);
  EXPECT_EQ(lens.num_kv_splits, 33);  // one sequence: 264 / 8
  EXPECT_EQ(lens.kv_split_slots, 2);  // the dense plan's
  EXPECT_THAT(lens.explain(), HasSubstr("splits    33 at most a sequence; 2 for one of the "
                                        "batch's mean length (a list over the lengths)"));
  detail::cuda::DecodeParams params;
  params.batch = 16, params.heads_kv = 8, params.row_chunks = 1, params.num_splits = 33;
  EXPECT_EQ(detail::cuda::decode_grid_blocks(params), 16 * 8 * 33);
  params.split_slots = 2;  // at most batch x (slots + 1) items: sum of ceil(L_b / keys)
  EXPECT_EQ(detail::cuda::decode_grid_blocks(params), 16 * 8 * 3);
  detail::cuda::DecodeGrid no_list = grid;  // the 576/512 tensor-core kernel's
  no_list.split_list = false;
  Plan without = Plan{};
  detail::cuda::configure_decode_plan(p, without, no_list);
  EXPECT_EQ(without.num_kv_splits, 33);
  EXPECT_EQ(without.kv_split_slots, 0);
  p.batch = 64, p.len_k = 32768;  // 512 base blocks: one split for a mean sequence
  EXPECT_EQ(planned(p).kv_split_slots, 1);
  p.batch = 1;
  EXPECT_EQ(planned(p).kv_split_slots, 0);
  p.batch = 16, p.len_k = 300;  // too short to split
  EXPECT_EQ(planned(p).num_kv_splits, 1);
  EXPECT_EQ(planned(p).kv_split_slots, 0);
}

// A paged cache's splits start on a multiple of 16 keys (its stages then
// take whole page groups), and so do a dense cache's with per-sequence
// lengths: the paged call and its dense twin split alike, so they give the
// same bits (the GPU paged suite compares them). Without lengths nothing
// moves.
TEST(CudaDecodePlan, SplitStartsOfPagedAndRaggedCaches) {
  Problem p;
  p.batch = 4, p.heads_q = 32, p.heads_kv = 8, p.len_q = 1, p.len_k = 32768;
  p.head_dim_qk = p.head_dim_v = 128, p.dtype = DType::BF16;
  EXPECT_EQ(detail::cuda::decode_split_keys_multiple(p), 1);
  p.has_seq_lens_k = true;
  EXPECT_EQ(detail::cuda::decode_split_keys_multiple(p), 16);
  p.page_size = 16, p.num_pages = 8192;
  EXPECT_EQ(detail::cuda::decode_split_keys_multiple(p), 16);
}

// What the plan says the split kernels load for rows that are not 16-byte
// aligned: the pieces, and the packed spans of contiguous dense rows where
// the tensor-core kernel takes them (the launch decides from the tensors).
TEST(CudaDecodePlan, LoadsOfNarrowRows) {
  if (!detail::cuda::decode_bucket_compiled(90, 90)) GTEST_SKIP() << "bucket not compiled";
  Problem p;
  p.batch = 1, p.heads_q = 32, p.heads_kv = 8, p.len_q = 1, p.len_k = 32768;
  p.head_dim_qk = p.head_dim_v = 90, p.dtype = DType::BF16;
  p.device = {DeviceType::CUDA, 0};
  p.row_alignment = 4;
  auto configured = [&](const Problem& problem) {
    Plan plan;
    detail::cuda::decode_configure(problem, plan);
    return plan;
  };
  auto loads = [&](const Problem& problem) { return configured(problem).loads; };
  EXPECT_EQ(loads(p),
            "cp.async pieces of 4 bytes; 16-byte cp.async of each stage's span where k's and v's "
            "rows are contiguous from 16-byte aligned bases");
  p.page_size = 16, p.num_pages = 2048;  // a paged pool: its rows are gathered
  EXPECT_EQ(loads(p), "cp.async pieces of 4 bytes; one block-table lookup per key");
  p.row_alignment = 16;  // pages of a multiple of 16 keys: a lookup per 16 keys, after the TMA
                         // boxes where the covering bucket takes them on sm_90 (the plan
                         // assumes sm_90 without a device)
  {
    const Plan plan = configured(p);
    const bool boxes = detail::cuda::decode_page_box_binary(p) &&
                       detail::cuda::decode_mma_page_boxes(int(plan.head_dim_qk_bucket),
                                                           int(plan.head_dim_v_bucket), 0);
    EXPECT_EQ(plan.loads,
              std::string(boxes ? "TMA boxes of 16 rows of a page where k's and v's bases and "
                                  "strides are 16-byte aligned, else "
                                : "") +
                  "cp.async, 16 bytes; one block-table lookup per 16 keys (a window's first "
                  "block: per key)");
  }
  p.page_size = 24, p.num_pages = 1366;
  EXPECT_EQ(loads(p), "cp.async, 16 bytes; one block-table lookup per key");
  p.page_size = 0, p.num_pages = 0, p.row_alignment = 2;  // odd rows: no 32-bit fragment loads
  EXPECT_EQ(loads(p), "register copies of 2-byte elements");
  p.row_alignment = 16;
  EXPECT_EQ(loads(p), "cp.async, 16 bytes");
}
#endif

}  // namespace
}  // namespace fsdpa::test
