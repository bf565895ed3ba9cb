// Error paths: every message validate.cpp and plan.cpp raise, each matched by
// exception type and text, and for each one a check that nothing was written
// (out and lse poisoned before; every buffer compared byte for byte after).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention_case.h"
#include "env_guard.h"
#include "select/table.h"

namespace fsdpa::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

enum class Kind { Invalid, Unsupported };

// Runs f, expects an exception of exactly the given kind whose message starts
// with "fsdpa: " and contains `text`.
template <typename F>
void expect_error(F&& f, Kind kind, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing \"" << text << "\"";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(kind, Kind::Invalid) << "InvalidArgument raised, Unsupported expected: " << e.what();
    EXPECT_THAT(e.what(), StartsWith("fsdpa: "));
    EXPECT_THAT(e.what(), HasSubstr(text));
  } catch (const Unsupported& e) {
    EXPECT_EQ(kind, Kind::Unsupported)
        << "Unsupported raised, InvalidArgument expected: " << e.what();
    EXPECT_THAT(e.what(), StartsWith("fsdpa: "));
    EXPECT_THAT(e.what(), HasSubstr(text));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// The valid problem every bad input starts from: B=2 Hq=4 Hkv=2 Lq=5 Lk=6
// Dqk=8 Dv=6, f32, additive f32 mask, sinks, lse.
AttentionCase base_case() {
  AttentionCase c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.len_q = 5;
  c.len_k = 6;
  c.dqk = 8;
  c.dv = 6;
  c.dtype = DType::F32;
  c.mask = MaskType::Additive;
  c.mask_dtype = DType::F32;
  c.sinks = true;
  c.lse = true;
  c.policy = Policy::ForceFused;
  return c;
}

struct BadInput {
  std::string name;
  std::function<void(Tensors&, Options&, AttentionData&)> mutate;
  Kind kind;
  std::string message;
  const char* env_name = nullptr;  // optional environment for the call
  const char* env_value = nullptr;
};

void PrintTo(const BadInput& bad, std::ostream* os) { *os << bad.name; }

void snapshot_all(const AttentionData& d, std::vector<std::vector<std::byte>>& snaps) {
  for (const Storage* s : {&d.q, &d.kv, &d.v, &d.out, &d.mask, &d.sinks, &d.lse})
    snaps.push_back(s->snapshot());
}

void expect_unchanged(const AttentionData& d, const std::vector<std::vector<std::byte>>& snaps) {
  const char* names[] = {"q", "k", "v", "out", "mask", "sinks", "lse"};
  int i = 0;
  for (const Storage* s : {&d.q, &d.kv, &d.v, &d.out, &d.mask, &d.sinks, &d.lse}) {
    EXPECT_TRUE(s->equals(snaps[static_cast<size_t>(i)])) << names[i] << " buffer was written";
    ++i;
  }
}

// Points an output view at `at` with strides of 1 (a self-overlapping view of
// 14 elements for out, 9 for lse), so that its byte range stays inside the
// one buffer it is meant to overlap.
void shrink(TensorView& view, void* at) {
  view.data = at;
  for (int d = 0; d < view.rank; ++d) view.strides[d] = 1;
}

#define MUTATE \
  []([[maybe_unused]] Tensors & t, [[maybe_unused]] Options & o, [[maybe_unused]] AttentionData & d)

std::vector<BadInput> bad_inputs() {
  const Device cpu1{DeviceType::CPU, 1};
  const Device cuda0{DeviceType::CUDA, 0};
  std::vector<BadInput> v = {// ranks
                             {"q_rank", MUTATE{t.q.rank = 3;
}
, Kind::Invalid, "fsdpa: q: expected rank 4 [B, Hq, Lq, Dqk], got rank 3"
}  // namespace
, {"k_rank", MUTATE{t.k.rank = 2;
}  // namespace fsdpa::test
, Kind::Invalid, "fsdpa: k: expected rank 4 [B, Hkv, Lk, Dqk], got rank 2"
}
, {"v_rank", MUTATE{t.v.rank = 0;
}
, Kind::Invalid, "fsdpa: v: expected rank 4 [B, Hkv, Lk, Dv], got rank 0"
}
, {"out_rank", MUTATE{t.out.rank = 1;
}
, Kind::Invalid, "fsdpa: out: expected rank 4 [B, Hq, Lq, Dv], got rank 1"
}
, {"mask_rank", MUTATE{t.mask->rank = 2;
}
, Kind::Invalid, "fsdpa: mask: expected rank 4 [B|1, Hq|1, Lq, Lk], got rank 2"
}
, {"sinks_rank", MUTATE{t.sinks->rank = 2;
}
, Kind::Invalid, "fsdpa: sinks: expected rank 1 [Hq], got rank 2"
}
, {"lse_rank", MUTATE{t.lse->rank = 4;
}
, Kind::Invalid, "fsdpa: lse: expected rank 3 [B, Hq, Lq], got rank 4"
}
,
    // unknown enum values
    {"q_dtype_unknown", MUTATE{t.q.dtype = static_cast<DType>(7);
}
, Kind::Invalid, "fsdpa: q: unknown dtype value 7"
}
, {"mask_dtype_unknown", MUTATE{t.mask->dtype = static_cast<DType>(200);
}
, Kind::Invalid, "fsdpa: mask: unknown dtype value 200"
}
, {"k_device_unknown", MUTATE{t.k.device.type = static_cast<DeviceType>(9);
}
, Kind::Invalid, "fsdpa: k: unknown device type value 9"
}
, {"out_device_index", MUTATE{t.out.device.index = -1;
}
, Kind::Invalid, "fsdpa: out: device index must be >= 0, got -1"
}
, {"causal_align_unknown", MUTATE{o.causal_align = static_cast<CausalAlign>(5);
}
, Kind::Invalid, "fsdpa: causal_align: unknown value 5"
}
, {"policy_unknown", MUTATE{o.policy = static_cast<Policy>(7);
}
, Kind::Invalid, "fsdpa: policy: unknown value 7"
}
,
    // null data with elements
    {"q_null", MUTATE{t.q.data = nullptr;
}
, Kind::Invalid, "fsdpa: q: data is null but the tensor has 320 elements"
}
, {"v_null", MUTATE{t.v.data = nullptr;
}
, Kind::Invalid, "fsdpa: v: data is null but the tensor has 144 elements"
}
, {"mask_null", MUTATE{t.mask->data = nullptr;
}
, Kind::Invalid, "fsdpa: mask: data is null but the tensor has 240 elements"
}
, {"sinks_null", MUTATE{t.sinks->data = nullptr;
}
, Kind::Invalid, "fsdpa: sinks: data is null but the tensor has 4 elements"
}
, {"lse_null", MUTATE{t.lse->data = nullptr;
}
, Kind::Invalid, "fsdpa: lse: data is null but the tensor has 40 elements"
}
,
    // negative sizes and strides
    {"k_negative_size", MUTATE{t.k.sizes[2] = -1;
}
, Kind::Invalid, "fsdpa: k: size 2 must be >= 0, got -1"
}
, {"q_negative_stride", MUTATE{t.q.strides[1] = -40;
}
, Kind::Invalid, "fsdpa: q: stride 1 is -40; negative strides are not supported"
}
, {"mask_negative_stride", MUTATE{t.mask->strides[3] = -1;
}
, Kind::Invalid, "fsdpa: mask: stride 3 is -1; negative strides are not supported"
}
, {"lse_negative_size", MUTATE{t.lse->sizes[0] = -2;
}
, Kind::Invalid, "fsdpa: lse: size 0 must be >= 0, got -2"
}
,
    // dtypes
    {"q_bool", MUTATE{t.q.dtype = DType::Bool;
}
, Kind::Invalid, "fsdpa: q: dtype bool is not supported; use f16, bf16 or f32"
}
, {"k_dtype", MUTATE{t.k.dtype = DType::F16;
}
, Kind::Invalid, "fsdpa: k: dtype f16 differs from q's dtype f32"
}
, {"v_dtype", MUTATE{t.v.dtype = DType::BF16;
}
, Kind::Invalid, "fsdpa: v: dtype bf16 differs from q's dtype f32"
}
, {"out_dtype", MUTATE{t.out.dtype = DType::F16;
}
, Kind::Invalid, "fsdpa: out: dtype f16 differs from q's dtype f32"
}
, {"sinks_dtype", MUTATE{t.sinks->dtype = DType::F16;
}
, Kind::Invalid, "fsdpa: sinks: dtype must be f32, got f16"
}
, {"lse_dtype", MUTATE{t.lse->dtype = DType::BF16;
}
, Kind::Invalid, "fsdpa: lse: dtype must be f32, got bf16"
}
,
    // devices
    {"k_device", [cpu1](Tensors& t, Options&, AttentionData&) { t.k.device = cpu1; }, Kind::Invalid,
     "fsdpa: k: on device cpu:1, expected q's device cpu:0"},
    {"v_device", [cuda0](Tensors& t, Options&, AttentionData&) { t.v.device = cuda0; },
     Kind::Invalid, "fsdpa: v: on device cuda:0, expected q's device cpu:0"},
    {"out_device", [cpu1](Tensors& t, Options&, AttentionData&) { t.out.device = cpu1; },
     Kind::Invalid, "fsdpa: out: on device cpu:1, expected q's device cpu:0"},
    {"mask_device", [cpu1](Tensors& t, Options&, AttentionData&) { t.mask->device = cpu1; },
     Kind::Invalid, "fsdpa: mask: on device cpu:1, expected q's device cpu:0"},
    {"sinks_device", [cuda0](Tensors& t, Options&, AttentionData&) { t.sinks->device = cuda0; },
     Kind::Invalid, "fsdpa: sinks: on device cuda:0, expected q's device cpu:0"},
    {"lse_device", [cpu1](Tensors& t, Options&, AttentionData&) { t.lse->device = cpu1; },
     Kind::Invalid, "fsdpa: lse: on device cpu:1, expected q's device cpu:0"},
    // shapes of k, v, out
    {"k_batch", MUTATE{t.k.sizes[0] = 3;
}
, Kind::Invalid, "fsdpa: k: size 0 (batch) is 3, expected 2 (q's batch)"
}
, {"k_head_dim", MUTATE{t.k.sizes[3] = 7;
}
, Kind::Invalid, "fsdpa: k: size 3 (head_dim_qk) is 7, expected 8 (q's head_dim_qk)"
}
, {"v_batch", MUTATE{t.v.sizes[0] = 1;
}
, Kind::Invalid, "fsdpa: v: size 0 (batch) is 1, expected 2 (q's batch)"
}
, {"v_heads", MUTATE{t.v.sizes[1] = 1;
}
, Kind::Invalid, "fsdpa: v: size 1 (heads_kv) is 1, expected 2 (k's heads_kv)"
}
, {"v_len", MUTATE{t.v.sizes[2] = 5;
}
, Kind::Invalid, "fsdpa: v: size 2 (len_k) is 5, expected 6 (k's len_k)"
}
, {"out_batch", MUTATE{t.out.sizes[0] = 1;
}
, Kind::Invalid, "fsdpa: out: size 0 (batch) is 1, expected 2 (q's batch)"
}
, {"out_heads", MUTATE{t.out.sizes[1] = 2;
}
, Kind::Invalid, "fsdpa: out: size 1 (heads_q) is 2, expected 4 (q's heads_q)"
}
, {"out_len", MUTATE{t.out.sizes[2] = 4;
}
, Kind::Invalid, "fsdpa: out: size 2 (len_q) is 4, expected 5 (q's len_q)"
}
, {"out_head_dim", MUTATE{t.out.sizes[3] = 8;
}
, Kind::Invalid, "fsdpa: out: size 3 (head_dim_v) is 8, expected 6 (v's head_dim_v)"
}
, {"heads_kv_zero", MUTATE{t.k.sizes[1] = 0, t.v.sizes[1] = 0;
}
, Kind::Invalid, "fsdpa: k: heads_kv is 0 but q has heads_q=4"
}
, {"heads_not_multiple", MUTATE{t.k.sizes[1] = 3, t.v.sizes[1] = 3;
}
, Kind::Invalid, "fsdpa: heads: heads_q=4 is not a multiple of heads_kv=3"
}
,
    // outputs: zero strides, aliasing
    {"out_zero_stride", MUTATE{t.out.strides[2] = 0;
}
, Kind::Invalid, "fsdpa: out: stride 2 is 0 with size 5; an output cannot be broadcast"
}
, {"lse_zero_stride", MUTATE{t.lse->strides[1] = 0;
}
, Kind::Invalid, "fsdpa: lse: stride 1 is 0 with size 4; an output cannot be broadcast"
}
, {"out_overlaps_itself", MUTATE{t.out.strides = {30, 6, 1, 1};
}
, Kind::Invalid,
    "fsdpa: out: sizes [2, 4, 5, 6] with strides [30, 6, 1, 1] make elements overlap; an output "
    "must not alias itself"
}
, {"lse_overlaps_itself", MUTATE{t.lse->strides = {4, 1, 1, 0};
}
, Kind::Invalid,
    "fsdpa: lse: sizes [2, 4, 5] with strides [4, 1, 1] make elements overlap; an output must "
    "not alias itself"
}
, {"out_overlaps_q", MUTATE{shrink(t.out, t.q.data);
}
, Kind::Invalid, "fsdpa: out: overlaps the memory of q; outputs must not alias inputs"
}
, {"out_overlaps_k", MUTATE{shrink(t.out, d.kv.element(100));
}
, Kind::Invalid, "fsdpa: out: overlaps the memory of k; outputs must not alias inputs"
}
, {"out_overlaps_v", MUTATE{shrink(t.out, d.v.element(130));
}
, Kind::Invalid, "fsdpa: out: overlaps the memory of v; outputs must not alias inputs"
}
, {"out_overlaps_mask", MUTATE{shrink(t.out, t.mask->data);
}
, Kind::Invalid, "fsdpa: out: overlaps the memory of mask; outputs must not alias inputs"
}
, {"out_overlaps_sinks", MUTATE{shrink(t.out, t.sinks->data);
}
, Kind::Invalid, "fsdpa: out: overlaps the memory of sinks; outputs must not alias inputs"
}
, {"lse_overlaps_q", MUTATE{shrink(*t.lse, d.q.element(300));
}
, Kind::Invalid, "fsdpa: lse: overlaps the memory of q; outputs must not alias inputs"
}
, {"lse_overlaps_k", MUTATE{shrink(*t.lse, t.k.data);
}
, Kind::Invalid, "fsdpa: lse: overlaps the memory of k; outputs must not alias inputs"
}
, {"lse_overlaps_v", MUTATE{shrink(*t.lse, t.v.data);
}
, Kind::Invalid, "fsdpa: lse: overlaps the memory of v; outputs must not alias inputs"
}
, {"lse_overlaps_out", MUTATE{shrink(*t.lse, d.out.element(200));
}
, Kind::Invalid, "fsdpa: lse: overlaps the memory of out; outputs must not alias inputs"
}
, {"lse_overlaps_mask", MUTATE{shrink(*t.lse, d.mask.element(10));
}
, Kind::Invalid, "fsdpa: lse: overlaps the memory of mask; outputs must not alias inputs"
}
, {"lse_overlaps_sinks", MUTATE{shrink(*t.lse, d.sinks.element(2));
}
, Kind::Invalid, "fsdpa: lse: overlaps the memory of sinks; outputs must not alias inputs"
}
,
    // mask broadcasting
    {"mask_batch", MUTATE{t.mask->sizes[0] = 3;
}
, Kind::Invalid,
    "fsdpa: mask: size 0 (batch) is 3, expected 1 or 2 (q's batch); the mask must "
    "broadcast to [B, Hq, Lq, Lk]"
}
, {"mask_heads_kv_count", MUTATE{t.mask->sizes[1] = 2;
}
, Kind::Invalid, "fsdpa: mask: size 1 (heads) is 2, expected 1 or 4 (q's heads_q)"
}
, {"mask_len_q", MUTATE{t.mask->sizes[2] = 4;
}
, Kind::Invalid, "fsdpa: mask: size 2 (len_q) is 4, expected 1 or 5 (q's len_q)"
}
, {"mask_len_k", MUTATE{t.mask->sizes[3] = 7;
}
, Kind::Invalid, "fsdpa: mask: size 3 (len_k) is 7, expected 1 or 6 (k's len_k)"
}
,
    // sinks, lse shapes
    {"sinks_length", MUTATE{t.sinks->sizes[0] = 3;
}
, Kind::Invalid, "fsdpa: sinks: length is 3, expected heads_q=4"
}
, {"lse_batch", MUTATE{t.lse->sizes[0] = 1;
}
, Kind::Invalid, "fsdpa: lse: size 0 (batch) is 1, expected 2 (q's batch)"
}
, {"lse_heads", MUTATE{t.lse->sizes[1] = 3;
}
, Kind::Invalid, "fsdpa: lse: size 1 (heads_q) is 3, expected 4 (q's heads_q)"
}
, {"lse_len", MUTATE{t.lse->sizes[2] = 6;
}
, Kind::Invalid, "fsdpa: lse: size 2 (len_q) is 6, expected 5 (q's len_q)"
}
,
    // options
    {"scale_nan", MUTATE{o.scale = std::nan("");
}
, Kind::Invalid, "fsdpa: scale: expected a finite value > 0, got nan"
}
, {"scale_inf", MUTATE{o.scale = std::numeric_limits<double>::infinity();
}
, Kind::Invalid, "fsdpa: scale: expected a finite value > 0, got inf"
}
, {"scale_zero", MUTATE{o.scale = 0.0;
}
, Kind::Invalid, "fsdpa: scale: expected a finite value > 0, got 0"
}
, {"scale_negative", MUTATE{o.scale = -0.5;
}
, Kind::Invalid, "fsdpa: scale: expected a finite value > 0, got -0.5"
}
, {"window_negative", MUTATE{o.window_left = -1;
}
, Kind::Invalid, "fsdpa: window_left: expected >= 0, got -1"
}
, {"scale_exp2_overflow", MUTATE{o.scale = 3e38;
}
, Kind::Invalid, "fsdpa: scale: 3e+38 times log2(e) overflows float32; at most 2.35866e+38"
}
, {"softcap_exp2_overflow", MUTATE{o.softcap = 1e300;
}
, Kind::Invalid, "fsdpa: softcap: 1e+300 times log2(e) overflows float32; at most 2.35866e+38"
}
, {"softcap_negative", MUTATE{o.softcap = -50.0;
}
, Kind::Invalid, "fsdpa: softcap: expected a finite value >= 0 (0: none), got -50"
}
, {"softcap_nan", MUTATE{o.softcap = std::nan("");
}
, Kind::Invalid, "fsdpa: softcap: expected a finite value >= 0 (0: none), got nan"
}
,
    // environment
    {"env_policy_bad", MUTATE{o.policy.reset();
}
, Kind::Invalid, "fsdpa: FSDPA_POLICY: expected auto, fused or unfused, got 'sometimes'",
    "FSDPA_POLICY", "sometimes"
}
, {"env_policy_case", MUTATE{o.policy.reset();
}
, Kind::Invalid, "fsdpa: FSDPA_POLICY: expected auto, fused or unfused, got 'FUSED'",
    "FSDPA_POLICY", "FUSED"
}
, {"env_threads_word",  MUTATE{},
   Kind::Invalid,       "fsdpa: FSDPA_NUM_THREADS: expected an integer from 1 to 1024, got 'many'",
   "FSDPA_NUM_THREADS", "many"},
    {"env_threads_negative",
     MUTATE{},
     Kind::Invalid,
     "fsdpa: FSDPA_NUM_THREADS: expected an integer from 1 to 1024, got '-2'",
     "FSDPA_NUM_THREADS",
     "-2"},
    {"env_threads_zero",  MUTATE{},
     Kind::Invalid,       "fsdpa: FSDPA_NUM_THREADS: expected an integer from 1 to 1024, got '0'",
     "FSDPA_NUM_THREADS", "0"},
    {"env_threads_too_many",
     MUTATE{},
     Kind::Invalid,
     "fsdpa: FSDPA_NUM_THREADS: expected an integer from 1 to 1024, got '1025'",
     "FSDPA_NUM_THREADS",
     "1025"},
    {"env_threads_trailing",
     MUTATE{},
     Kind::Invalid,
     "fsdpa: FSDPA_NUM_THREADS: expected an integer from 1 to 1024, got '4x'",
     "FSDPA_NUM_THREADS",
     "4x"},
    // one parsing rule for every variable: no spaces, as FSDPA_POLICY=" auto"
    {"env_threads_space", MUTATE{},
     Kind::Invalid,       "fsdpa: FSDPA_NUM_THREADS: expected an integer from 1 to 1024, got ' 4'",
     "FSDPA_NUM_THREADS", " 4"},
}
;
#if !FSDPA_WITH_CUDA
v.push_back({"cuda_not_built",
             [cuda0](Tensors& t, Options&, AttentionData&) {
               for (TensorView* view : {&t.q, &t.k, &t.v, &t.out, &*t.mask, &*t.sinks, &*t.lse})
                 view->device = cuda0;
             },
             Kind::Unsupported, "fsdpa: no kernel: backend cuda is not built into this library"});
#endif
return v;
}

#undef MUTATE

class BadInputs : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputs, RaisesAndWritesNothing) {
  const BadInput& bad = GetParam();
  Rng rng(base_seed() ^ name_hash(bad.name));
  AttentionData d = make_data(base_case(), rng);
  // The base itself is valid.
  ASSERT_NO_THROW(describe(d.tensors, d.options));
  std::vector<std::vector<std::byte>> snaps;
  snapshot_all(d, snaps);
  Tensors t = d.tensors;
  Options o = d.options;
  bad.mutate(t, o, d);
  {
    EnvGuard env(bad.env_name ? bad.env_name : "FSDPA_TEST_UNUSED", bad.env_value);
    expect_error([&] { attention(t, o); }, bad.kind, bad.message);
  }
  expect_unchanged(d, snaps);
}

INSTANTIATE_TEST_SUITE_P(Validation, BadInputs, ::testing::ValuesIn(bad_inputs()),
                         [](const ::testing::TestParamInfo<BadInput>& i) { return i.param.name; });

TEST(BadInputsList, AtLeastFortyDistinctMessages) {
  std::vector<std::string> messages;
  for (const BadInput& bad : bad_inputs()) messages.push_back(bad.message);
  std::sort(messages.begin(), messages.end());
  messages.erase(std::unique(messages.begin(), messages.end()), messages.end());
  EXPECT_GE(messages.size(), 40u);
}

// describe() raises the same errors without running anything.
TEST(BadInputsDescribe, SameMessageAsAttention) {
  Rng rng(base_seed());
  AttentionData d = make_data(base_case(), rng);
  Tensors t = d.tensors;
  t.v.sizes[2] = 5;
  expect_error([&] { describe(t, d.options); }, Kind::Invalid,
               "fsdpa: v: size 2 (len_k) is 5, expected 6 (k's len_k)");
  Options o = d.options;
  o.scale = 0.0;
  expect_error([&] { describe(d.tensors, o); }, Kind::Invalid,
               "fsdpa: scale: expected a finite value > 0, got 0");
  expect_error([&] { plan(describe(d.tensors, d.options), o); }, Kind::Invalid,
               "fsdpa: scale: expected a finite value > 0, got 0");
}

// FSDPA_CPU_ISA is read once per process (the kernel choice is cached), so
// the bad value is tried in a fresh process: a "threadsafe" death test
// re-executes this binary for just this test.
// FSDPA_CPU_ISA is read at every call: a bad value set after a first good
// call is an error too (it used to be read once).
TEST(EnvErrors, CpuIsaReadAtEveryCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Rng rng(1);
        AttentionData d = make_data(base_case(), rng);
        int code = 1;
        setenv("FSDPA_CPU_ISA", "generic", 1);
        attention(d.tensors, d.options);
        setenv("FSDPA_CPU_ISA", "sse9", 1);
        try {
          attention(d.tensors, d.options);
        } catch (const InvalidArgument& e) {
          code = std::string(e.what()).find(
                     "FSDPA_CPU_ISA: expected generic or avx2, got 'sse9'") != std::string::npos
                     ? 0
                     : 2;
        }
        std::_Exit(code);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(EnvErrors, CpuIsaUnknownValue) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("FSDPA_CPU_ISA", "sse9", 1);
        Rng rng(1);
        AttentionData d = make_data(base_case(), rng);
        int code = 1;
        try {
          attention(d.tensors, d.options);
        } catch (const InvalidArgument& e) {
          code =
              std::string(e.what()) == "fsdpa: FSDPA_CPU_ISA: expected generic or avx2, got 'sse9'"
                  ? 0
                  : 2;
        } catch (...) {
          code = 3;
        }
        for (int64_t i = 0; i < d.out.elements(); ++i)
          if (d.out.bits(i) != Storage::poison_bits(DType::F32)) code = 4;
        std::_Exit(code);
      },
      ::testing::ExitedWithCode(0), "");
}

// ------------------------------------------------------------ run() checks

struct RunMismatch {
  std::string name;
  std::function<void(AttentionCase&)> change;  // the case the tensors come from
  std::string message;
  std::function<void(AttentionCase&)> plan_change = nullptr;  // the case the plan is made for
};

std::vector<RunMismatch> run_mismatches() {
  const std::string p = "fsdpa: tensors do not match the plan: ";
  return {
      {"batch", [](AttentionCase& c) { c.batch = 3; }, p + "batch is 3, the plan was made for 2"},
      {"heads_q", [](AttentionCase& c) { c.heads_q = 8; },
       p + "heads_q is 8, the plan was made for 4"},
      {"heads_kv", [](AttentionCase& c) { c.heads_kv = 4; },
       p + "heads_kv is 4, the plan was made for 2"},
      {"len_q", [](AttentionCase& c) { c.len_q = 6; }, p + "len_q is 6, the plan was made for 5"},
      {"len_k", [](AttentionCase& c) { c.len_k = 7; }, p + "len_k is 7, the plan was made for 6"},
      {"head_dim_qk", [](AttentionCase& c) { c.dqk = 16; },
       p + "head_dim_qk is 16, the plan was made for 8"},
      {"head_dim_v", [](AttentionCase& c) { c.dv = 4; },
       p + "head_dim_v is 4, the plan was made for 8"},
      {"dtype", [](AttentionCase& c) { c.dtype = DType::F16; },
       p + "dtype is f16, the plan was made for f32"},
      {"mask_added", [](AttentionCase& c) { c.mask = MaskType::Boolean; },
       p + "the mask kind or dtype differs"},
      {"mask_dtype",
       [](AttentionCase& c) { c.mask = MaskType::Additive, c.mask_dtype = DType::F16; },
       p + "the mask kind or dtype differs",
       [](AttentionCase& c) { c.mask = MaskType::Additive, c.mask_dtype = DType::F32; }},
      {"mask_kind", [](AttentionCase& c) { c.mask = MaskType::Boolean; },
       p + "the mask kind or dtype differs", [](AttentionCase& c) { c.mask = MaskType::Additive; }},
      {"sinks_given", [](AttentionCase& c) { c.sinks = true; }, p + "sinks are given"},
      {"sinks_missing", [](AttentionCase& c) { c.sinks = false; }, p + "sinks are missing",
       [](AttentionCase& c) { c.sinks = true; }},
      {"lse_given", [](AttentionCase& c) { c.lse = true; }, p + "lse is given",
       [](AttentionCase& c) { c.lse = false; }},
      {"lse_missing", [](AttentionCase& c) { c.lse = false; }, p + "lse is missing"},
      {"rows_unaligned", [](AttentionCase& c) { c.layout = Layout::Padded; },
       p + "the plan needs rows with stride 1 and 16-byte alignment, the tensors have 4-byte"},
      {"v_alias", [](AttentionCase& c) { c.layout = Layout::Contiguous; },
       p + "v aliasing k differs", [](AttentionCase& c) { c.layout = Layout::MlaAlias; }},
  };
}

void PrintTo(const RunMismatch& m, std::ostream* os) { *os << m.name; }

AttentionCase run_base() {
  AttentionCase c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.len_q = 5;
  c.len_k = 6;
  c.dqk = 8;
  c.dv = 8;
  c.dtype = DType::F32;
  c.policy = Policy::ForceFused;
  return c;
}

class RunMismatches : public ::testing::TestWithParam<RunMismatch> {};

TEST_P(RunMismatches, RaisesAndWritesNothing) {
  const RunMismatch& m = GetParam();
  AttentionCase planned = run_base();
  if (m.plan_change) m.plan_change(planned);
  AttentionCase given = planned;
  m.change(given);
  Rng rng(base_seed() ^ name_hash(m.name));
  AttentionData pd = make_data(planned, rng);
  AttentionData d = make_data(given, rng);
  const Plan p = plan(describe(pd.tensors, pd.options), pd.options);
  std::unique_ptr<std::byte[]> ws(new std::byte[p.workspace_bytes + 1]);
  std::vector<std::vector<std::byte>> snaps;
  snapshot_all(d, snaps);
  expect_error([&] { run(p, d.tensors, ws.get(), p.workspace_bytes); }, Kind::Invalid, m.message);
  expect_unchanged(d, snaps);
  // The plan still runs the tensors it was made for.
  EXPECT_NO_THROW(run(p, pd.tensors, ws.get(), p.workspace_bytes));
}

INSTANTIATE_TEST_SUITE_P(Plan, RunMismatches, ::testing::ValuesIn(run_mismatches()),
                         [](const ::testing::TestParamInfo<RunMismatch>& i) {
                           return i.param.name;
                         });

TEST(RunChecks, DeviceMismatch) {
  Rng rng(base_seed());
  AttentionData d = make_data(run_base(), rng);
  const Plan p = plan(describe(d.tensors, d.options), d.options);
  Tensors t = d.tensors;
  for (TensorView* v : {&t.q, &t.k, &t.v, &t.out, &*t.lse}) v->device = {DeviceType::CPU, 1};
  std::vector<std::vector<std::byte>> snaps;
  snapshot_all(d, snaps);
  std::unique_ptr<std::byte[]> ws(new std::byte[p.workspace_bytes + 1]);
  expect_error([&] { run(p, t, ws.get(), p.workspace_bytes); }, Kind::Invalid,
               "fsdpa: tensors do not match the plan: device is cpu:1, the plan was made for "
               "cpu:0");
  expect_unchanged(d, snaps);
}

// Workspace and stream checks on both CPU plans (the fused plan where it
// needs a workspace).
class RunWorkspace : public ::testing::TestWithParam<Policy> {};

TEST_P(RunWorkspace, TooSmallNullAndStream) {
  AttentionCase c = run_base();
  c.policy = GetParam();
  Rng rng(base_seed());
  AttentionData d = make_data(c, rng);
  const Plan p = plan(describe(d.tensors, d.options), d.options);
  std::vector<std::vector<std::byte>> snaps;
  snapshot_all(d, snaps);
  std::unique_ptr<std::byte[]> ws(new std::byte[p.workspace_bytes + 1]);
  if (p.workspace_bytes > 0) {
    expect_error([&] { run(p, d.tensors, ws.get(), p.workspace_bytes - 1); }, Kind::Invalid,
                 "fsdpa: workspace: " + std::to_string(p.workspace_bytes - 1) +
                     " bytes given, the plan needs " + std::to_string(p.workspace_bytes));
    expect_error(
        [&] { run(p, d.tensors, nullptr, p.workspace_bytes); }, Kind::Invalid,
        "fsdpa: workspace: null, the plan needs " + std::to_string(p.workspace_bytes) + " bytes");
    expect_error(
        [&] { run(p, d.tensors, nullptr, 0); }, Kind::Invalid,
        "fsdpa: workspace: 0 bytes given, the plan needs " + std::to_string(p.workspace_bytes));
  } else {
    ADD_FAILURE() << "plan " << p.kernel << " needs no workspace";
  }
  int dummy = 0;
  expect_error([&] { run(p, d.tensors, ws.get(), p.workspace_bytes, &dummy); }, Kind::Invalid,
               "fsdpa: stream: must be null for a CPU plan");
  expect_unchanged(d, snaps);
  // A larger workspace than needed is fine.
  EXPECT_NO_THROW(run(p, d.tensors, ws.get(), p.workspace_bytes + 1));
}

INSTANTIATE_TEST_SUITE_P(Policies, RunWorkspace,
                         ::testing::Values(Policy::ForceFused, Policy::Unfused),
                         [](const ::testing::TestParamInfo<Policy>& i) {
                           return std::string(to_string(i.param));
                         });

#if FSDPA_WITH_CUDA
// A CUDA plan's workspace must be 16-byte aligned (the decode partials are
// read as float2 and float4). run() checks it before anything touches the
// device, so host memory stands in for the tensors of the CUDA problem.
TEST(RunChecks, CudaWorkspaceAlignment) {
  AttentionCase c;
  c.dtype = DType::BF16;
  c.heads_q = 8;
  c.len_k = 4096;
  Rng rng(base_seed());
  AttentionData d = make_data(c, rng);
  const Device cuda0{DeviceType::CUDA, 0};
  for (TensorView* view : {&d.tensors.q, &d.tensors.k, &d.tensors.v, &d.tensors.out})
    view->device = cuda0;
  if (d.tensors.lse) d.tensors.lse->device = cuda0;
  const Plan p = plan(describe(d.tensors, d.options), d.options);
  ASSERT_EQ(p.backend, Backend::CUDA);
  ASSERT_GT(p.workspace_bytes, 0u) << p.explain();
  std::unique_ptr<std::byte[]> ws(new std::byte[p.workspace_bytes + 32]);
  const uintptr_t address = reinterpret_cast<uintptr_t>(ws.get());
  std::byte* aligned = ws.get() + (16 - address % 16) % 16;
  expect_error([&] { run(p, d.tensors, aligned + 4, p.workspace_bytes); }, Kind::Invalid,
               "fsdpa: workspace: a CUDA plan needs it 16-byte aligned, the address is 4 bytes "
               "past a multiple of 16");
}
#endif

TEST(RunChecks, ForgedPlans) {
  Rng rng(base_seed());
  AttentionData d = make_data(run_base(), rng);
  const Plan real = plan(describe(d.tensors, d.options), d.options);
  std::unique_ptr<std::byte[]> ws(new std::byte[real.workspace_bytes + 1]);
  std::vector<std::vector<std::byte>> snaps;
  snapshot_all(d, snaps);
  auto run_it = [&](const Plan& p) { run(p, d.tensors, ws.get(), real.workspace_bytes); };

  expect_error([&] { run_it(Plan{}); }, Kind::Invalid,
               "fsdpa: plan: not made by fsdpa::plan() of this library (kernel '')");
  Plan out_of_range = real;
  out_of_range.table_row = 1000;
  expect_error([&] { run_it(out_of_range); }, Kind::Invalid,
               "fsdpa: plan: not made by fsdpa::plan() of this library (kernel "
               "'cpu_fused_online_softmax')");
  Plan negative = real;
  negative.table_row = -2;
  expect_error([&] { run_it(negative); }, Kind::Invalid, "fsdpa: plan: not made by fsdpa::plan()");
  Plan renamed = real;
  renamed.kernel = "forged_kernel";
  expect_error([&] { run_it(renamed); }, Kind::Invalid,
               "fsdpa: plan: not made by fsdpa::plan() of this library (kernel 'forged_kernel')");
  // Another row than the kernel named.
  Plan swapped = real;
  const auto table = detail::selection_table();
  for (int i = 0; i < static_cast<int>(table.size()); ++i)
    if (table[static_cast<size_t>(i)].name != real.kernel) swapped.table_row = i;
  ASSERT_NE(swapped.table_row, real.table_row);
  expect_error([&] { run_it(swapped); }, Kind::Invalid, "fsdpa: plan: not made by fsdpa::plan()");
  // A plan whose problem was edited no longer matches the tensors.
  Plan edited = real;
  edited.problem.len_k = 9;
  expect_error([&] { run_it(edited); }, Kind::Invalid,
               "fsdpa: tensors do not match the plan: len_k is 6, the plan was made for 9");
  expect_unchanged(d, snaps);
}

// plan() on a CUDA problem without the CUDA backend, and on an unknown device.
// Sizes and strides whose products overflow 64 bits (or pass 2^52 bytes):
// named errors, out never written, for q, k, v, out, mask and plan(Problem).
TEST(Overflow, SpansPastTheLimitAreNamedErrors) {
  const int64_t big = int64_t{1} << 62;
  struct Case {
    const char* name;
    std::function<void(Tensors&)> mutate;
    const char* message;
  };
  const Case cases[] = {
      {"count_wraps",
       [](Tensors& t) {
         t.q.data = nullptr;
         t.q.sizes = {1, 1, 32, int64_t{1} << 59};
         t.q.strides = {0, 0, int64_t{1} << 59, 1};
       },
       "fsdpa: q: sizes [1, 1, 32, 576460752303423488] with strides [0, 0, 576460752303423488, 1] "
       "span more than 4503599627370496 bytes (2^52) from dimension 2 on (size 32, stride "
       "576460752303423488)"},
      {"four_huge",
       [&](Tensors& t) {
         for (TensorView* v : {&t.q, &t.k, &t.v, &t.out}) {
           v->data = nullptr;
           v->sizes = {1, big, big, 1};
         }
       },
       "fsdpa: q: sizes [1, 4611686018427387904, 4611686018427387904, 1]"},
      {"out_row_stride", [&](Tensors& t) { t.out.strides[2] = big; },
       "fsdpa: out: sizes [2, 4, 5, 6] with strides"},
      {"k_row_stride", [](Tensors& t) { t.k.strides[2] = std::numeric_limits<int64_t>::max(); },
       "fsdpa: k: sizes [2, 2, 6, 8] with strides"},
      {"mask_stride", [&](Tensors& t) { t.mask->strides[3] = big; },
       "fsdpa: mask: sizes [2, 4, 5, 6] with strides"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    AttentionCase base = base_case();
    Rng rng(base_seed());
    AttentionData d = make_data(base, rng);
    Tensors t = d.tensors;
    c.mutate(t);
    const std::vector<std::byte> out_before(
        static_cast<const std::byte*>(d.tensors.out.data),
        static_cast<const std::byte*>(d.tensors.out.data) + 4 * 2 * 4 * 5 * 6);
    expect_error([&] { attention(t, d.options); }, Kind::Invalid, c.message);
    expect_error([&] { (void)describe(t, d.options); }, Kind::Invalid, c.message);
    EXPECT_EQ(std::memcmp(out_before.data(), d.tensors.out.data, out_before.size()), 0);
  }
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.len_q = p.len_k = 32;
  p.head_dim_qk = int64_t{1} << 59;
  p.head_dim_v = 8;
  p.dtype = DType::F32;
  expect_error([&] { (void)plan(p, {}); }, Kind::Invalid,
               "fsdpa: problem: q of sizes [1, 1, 32, 576460752303423488] spans more than "
               "4503599627370496 bytes (2^52)");
  p.head_dim_qk = 8;
  p.len_k = -1;
  expect_error([&] { (void)plan(p, {}); }, Kind::Invalid,
               "fsdpa: problem: len_k must be >= 0, got -1");
  p.len_k = 32;
  p.heads_kv = 0;
  expect_error([&] { (void)plan(p, {}); }, Kind::Invalid,
               "fsdpa: problem: heads_q=1 is not a multiple of heads_kv=0");
}

TEST(PlanErrors, DeviceProblems) {
  Problem problem;
  problem.batch = 1;
  problem.heads_q = problem.heads_kv = 1;
  problem.len_q = problem.len_k = 4;
  problem.head_dim_qk = problem.head_dim_v = 64;
  problem.device = {DeviceType::CUDA, 0};
#if !FSDPA_WITH_CUDA
  for (Policy policy : {Policy::Auto, Policy::ForceFused, Policy::Unfused}) {
    Options o;
    o.policy = policy;
    expect_error([&] { plan(problem, o); }, Kind::Unsupported,
                 "fsdpa: no kernel: backend cuda is not built into this library");
  }
#endif
  problem.device = {static_cast<DeviceType>(6), 0};
  expect_error([&] { plan(problem, {}); }, Kind::Invalid,
               "fsdpa: device: unknown device type value 6");
  Options bad;
  bad.window_left = -3;
  problem.device = {};
  expect_error([&] { plan(problem, bad); }, Kind::Invalid,
               "fsdpa: window_left: expected >= 0, got -3");
}

}  // namespace
}  // namespace fsdpa::test
