// Input checks and problem normalization shared by every backend.
#pragma once

#include <string>

#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

[[noreturn]] void throw_invalid(const std::string& message);  // prefixes "fsdpa: "

// 1/sqrt(Dqk) unless options.scale is set; validated by describe().
double resolve_scale(const Options& options, int64_t head_dim_qk);

// options.policy, else FSDPA_POLICY (auto|fused|unfused), else Auto.
Policy resolve_policy(const Options& options);

// Throws InvalidArgument for an out-of-range enum or a bad scale / window.
void check_options(const Options& options);

// The most bytes one tensor may span (its element count and the offset of its
// last element, times the element size): 2^52, 4 PiB. describe() and plan()
// raise InvalidArgument past it, so that no size or workspace product wraps.
inline constexpr int64_t kMaxSpanBytes = int64_t{1} << 52;

// Throws InvalidArgument for a Problem that no tensors could describe:
// negative sizes, heads that do not divide, or tensors past kMaxSpanBytes.
void check_problem(const Problem& problem);

// The bytes from a view's first element to the end of its last (0 for a view
// with no element): check_span bounds it. Strides are non-negative.
int64_t extent_bytes(const TensorView& t);

// Problem::row_alignment of one view: the largest of 16, 8, 4, 2, 1 bytes that
// divides its base address and its batch, head and row strides in bytes
// (sizes of 1 impose nothing), or 0 when its last dimension has a stride
// other than 1 (and a size above 1).
int row_alignment(const TensorView& t);
// The least of q's, k's, v's and out's: Problem::row_alignment of a call.
int row_alignment(const Tensors& t);

// The environment variable `name` as an integer in [min, max], or `absent`
// when it is unset or empty. One rule for every FSDPA_* integer: decimal
// digits with an optional sign, nothing else (no spaces), else
// InvalidArgument naming the variable, the range and the text.
int64_t env_integer(const char* name, int64_t min, int64_t max, int64_t absent);

// The environment variables planning reads (README lists them). The plan
// cache keys on their values, so a change takes effect at the next call.
inline constexpr const char* kEnvPolicy = "FSDPA_POLICY";
inline constexpr const char* kEnvNumThreads = "FSDPA_NUM_THREADS";
inline constexpr const char* kEnvCpuIsa = "FSDPA_CPU_ISA";
inline constexpr const char* kEnvDecodeSplits = "FSDPA_DECODE_SPLITS";
inline constexpr const char* kEnvSharedMemoryLimit = "FSDPA_SHARED_MEMORY_LIMIT";
inline constexpr const char* kPlanEnvironment[] = {kEnvPolicy, kEnvNumThreads, kEnvCpuIsa,
                                                   kEnvDecodeSplits, kEnvSharedMemoryLimit};

// FSDPA_SHARED_MEMORY_LIMIT=N: plan as if a CUDA block could opt into at
// most N bytes of shared memory (tests of the tilings for GPUs with less
// than the one at hand: 101376 is sm_86/89's, 166912 sm_80's); -1 unset.
int64_t shared_memory_limit();

// Whether the call writes any element: of out (B, Hq, Lq and Dv all above
// 0) or of lse (B, Hq and Lq above 0, lse asked for). A call that writes
// nothing runs nothing and needs no workspace, however large its other sizes.
inline bool writes_output(const Problem& p) {
  return p.batch > 0 && p.heads_q > 0 && p.len_q > 0 && (p.head_dim_v > 0 || p.has_lse);
}

// Throws InvalidArgument when `actual` (from the tensors given to run())
// differs from the problem the plan was made for.
void check_matches_plan(const Problem& planned, const Problem& actual);

}  // namespace fsdpa::detail
