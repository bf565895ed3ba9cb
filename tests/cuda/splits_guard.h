// FSDPA_DECODE_SPLITS for one scope: the decode kernels' key splits forced
// (the single-pass, pair and combine paths on any shape).
#pragma once

#include <cstdlib>
#include <string>

namespace fsdpa::gpu_test {

// Sets FSDPA_DECODE_SPLITS to `splits` (> 0; 0 leaves it unset) and unsets it on leaving.
class SplitsGuard {
 public:
  explicit SplitsGuard(int splits) {
    if (splits > 0) setenv("FSDPA_DECODE_SPLITS", std::to_string(splits).c_str(), 1);
  }
  ~SplitsGuard() { unsetenv("FSDPA_DECODE_SPLITS"); }
  SplitsGuard(const SplitsGuard&) = delete;
  SplitsGuard& operator=(const SplitsGuard&) = delete;
};

}  // namespace fsdpa::gpu_test
