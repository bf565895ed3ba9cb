// The CUDA unfused family's entry points for the selection table.
#pragma once

#include "select/table.h"

namespace fsdpa::detail::cuda {

Verdict unfused_supports(const Problem& problem, const Options& options);
void unfused_configure(const Problem& problem, Plan& plan);
void unfused_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

}  // namespace fsdpa::detail::cuda
