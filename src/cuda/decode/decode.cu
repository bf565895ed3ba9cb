// PLACEHOLDER (being written): the CUDA decode family.
#include "cuda/decode/decode.h"

namespace fsdpa::detail::cuda {

Verdict decode_supports(const Problem&, const Options&) {
  return Verdict::no("the decode kernels are not written yet");
}
void decode_configure(const Problem&, Plan&) {}
void decode_launch(const Plan&, const Tensors&, void*, void*) {
  throw Unsupported("fsdpa: the decode kernels are not written yet");
}

}  // namespace fsdpa::detail::cuda
