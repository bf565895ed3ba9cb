// The CUDA decode family's entry points for the selection table.
#pragma once

#include "select/table.h"

namespace fsdpa::detail::cuda {

Verdict decode_supports(const Problem& problem, const Options& options);
void decode_configure(const Problem& problem, Plan& plan);
void decode_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

}  // namespace fsdpa::detail::cuda
