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

// Throws InvalidArgument when `actual` (from the tensors given to run())
// differs from the problem the plan was made for.
void check_matches_plan(const Problem& planned, const Problem& actual);

}  // namespace fsdpa::detail
