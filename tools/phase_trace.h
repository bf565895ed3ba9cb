// `fsdpa run --trace FILE` in builds with -DFSDPA_PREFILL_TRACE=ON: the wgmma
// prefill kernel's phase stamps (src/cuda/prefill/trace.h) of the run's last
// launch, written to FILE and summed up per phase.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace fsdpa::tool {

// Allocates the trace buffer and hands it to the prefill launches for its
// lifetime.
class PhaseTrace {
 public:
  PhaseTrace();
  ~PhaseTrace();
  PhaseTrace(const PhaseTrace&) = delete;
  PhaseTrace& operator=(const PhaseTrace&) = delete;

  // Reads the stamps (the last launch's: every launch of one plan stamps
  // the same slots), writes them to `csv` and prints, for each consumer
  // phase, the median and mean SM cycles a key tile spends in it.
  void report(const std::string& csv, std::ostream& out) const;

 private:
  uint32_t* words_ = nullptr;
};

}  // namespace fsdpa::tool
