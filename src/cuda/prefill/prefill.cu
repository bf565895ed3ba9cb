// PLACEHOLDER (being written): the CUDA prefill family.
#include "cuda/prefill/prefill.h"

namespace fsdpa::detail::cuda {

Verdict prefill_supports(const Problem&, const Options&) {
  return Verdict::no("the prefill kernels are not written yet");
}
void prefill_configure(const Problem&, Plan&) {}
void prefill_launch(const Plan&, const Tensors&, void*, void*) {
  throw Unsupported("fsdpa: the prefill kernels are not written yet");
}

}  // namespace fsdpa::detail::cuda
