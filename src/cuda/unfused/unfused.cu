// PLACEHOLDER (being written): the CUDA unfused family.
#include "cuda/unfused/unfused.h"

namespace fsdpa::detail::cuda {

Verdict unfused_supports(const Problem&, const Options&) {
  return Verdict::no("the unfused kernels are not written yet");
}
void unfused_configure(const Problem&, Plan&) {}
void unfused_launch(const Plan&, const Tensors&, void*, void*) {
  throw Unsupported("fsdpa: the unfused kernels are not written yet");
}

}  // namespace fsdpa::detail::cuda
