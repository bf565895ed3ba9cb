// The CUDA prefill family's entry points for the selection table.
#pragma once

#include "select/table.h"

namespace fsdpa::detail::cuda {

Verdict prefill_supports(const Problem& problem, const Options& options);
void prefill_configure(const Problem& problem, Plan& plan);
void prefill_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

}  // namespace fsdpa::detail::cuda
