// The CPU backend: the float64 reference (the oracle of every test, and the
// CPU's unfused path) and the fused tiled online-softmax path.
#pragma once

#include <vector>

#include "select/table.h"

namespace fsdpa::detail::cpu {

// ------------------------------------------------------------ reference

// Output [B, Hq, Lq, Dv] and LSE [B, Hq, Lq], contiguous, in float64.
struct ReferenceResult {
  std::vector<double> out;
  std::vector<double> lse;
};

// Validates like describe() and computes every semantic of docs/design.md (Semantics) in
// float64 from the inputs as stored (half types widened exactly).
ReferenceResult reference_attention(const Tensors& tensors, const Options& options = {});

Verdict reference_supports(const Problem& problem, const Options& options);
void reference_configure(const Problem& problem, Plan& plan);
void reference_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

// ------------------------------------------------------------ fused

Verdict fused_supports(const Problem& problem, const Options& options);
void fused_configure(const Problem& problem, Plan& plan);
void fused_launch(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);

// ------------------------------------------------------------ no head dims

// Whether a call writes only its LSE, having no head dims (Dqk = Dv = 0):
// both CPU paths then run lse_only_launch, which needs no workspace and
// whose time does not grow with Lk where the mask (if any) is the same for
// every key of a row.
bool lse_only(const Problem& problem);
void lse_only_launch(const Problem& problem, const Options& options, const Tensors& tensors);

// Worker threads for the CPU backend: FSDPA_NUM_THREADS if set, else the
// hardware concurrency.
int default_num_threads();

}  // namespace fsdpa::detail::cpu
