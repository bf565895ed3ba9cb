// fsdpa run --trace: see phase_trace.h.
#include "phase_trace.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/prefill/trace.h"
#include "fsdpa/fsdpa.h"
#include "harness.h"

namespace fsdpa::tool {
namespace {

namespace fc = fsdpa::detail::cuda;

struct Span {
  const char* name;
  int from, to;  // phases (fc::TracePhase); to == kTracePhases: the next tile's top
};
constexpr Span kSpans[] = {
    {"turn wait (the other consumer's issue)", fc::kTraceTop, fc::kTraceTurn},
    {"issue S and P V, pass the turn", fc::kTraceTurn, fc::kTraceIssued},
    {"S wait", fc::kTraceIssued, fc::kTraceScores},
    {"softmax", fc::kTraceScores, fc::kTraceSoftmax},
    {"P V wait, O rescale", fc::kTraceSoftmax, fc::kTraceOutput},
    {"P to registers", fc::kTraceOutput, fc::kTraceP},
    {"release to the next tile", fc::kTraceP, fc::kTracePhases},
    {"period (top to top)", fc::kTraceTop, fc::kTracePhases},
};

}  // namespace

PhaseTrace::PhaseTrace() {
  cuda_check(cudaMalloc(&words_, fc::kTraceWords * sizeof(uint32_t)), "cudaMalloc (phase trace)");
  cuda_check(cudaMemset(words_, 0, fc::kTraceWords * sizeof(uint32_t)), "cudaMemset (phase trace)");
  fc::set_prefill_trace(words_);
}

PhaseTrace::~PhaseTrace() {
  fc::set_prefill_trace(nullptr);
  cudaFree(words_);
}

void PhaseTrace::report(const std::string& csv, std::ostream& out) const {
  std::vector<uint32_t> stamps(fc::kTraceWords);
  cuda_check(
      cudaMemcpy(stamps.data(), words_, fc::kTraceWords * sizeof(uint32_t), cudaMemcpyDeviceToHost),
      "cudaMemcpy (phase trace)");
  auto at = [&](int block, int role, int tile, int phase) {
    return stamps[((size_t(block) * fc::kTraceRoles + role) * fc::kTraceTiles + tile) *
                      fc::kTracePhases +
                  phase];
  };
  std::vector<std::vector<double>> spans(std::size(kSpans));
  int traced_blocks = 0;
  std::ofstream file(csv);
  if (!file) throw Error("fsdpa run --trace: cannot write " + csv);
  file << "block,role,tile";  // then one column a phase: cycles from the block's origin, -1 none
  for (int ph = 0; ph < fc::kTracePhases; ++ph) file << ",phase" << ph;
  file << "\n";
  for (int block = 0; block < fc::kTraceBlocks; ++block) {
    // Cycles are differences of the clock's low 32 bits (modulo 2^32),
    // from the block's first consumer stamp.
    const uint32_t origin = at(block, 1, 0, fc::kTraceTop);
    if (origin == 0) continue;
    ++traced_blocks;
    for (int role = 0; role < fc::kTraceRoles; ++role)
      for (int tile = 0; tile < fc::kTraceTiles; ++tile) {
        bool any = false;
        for (int ph = 0; ph < fc::kTracePhases; ++ph) any = any || at(block, role, tile, ph) != 0;
        if (!any) continue;
        file << block << "," << role << "," << tile;
        for (int ph = 0; ph < fc::kTracePhases; ++ph) {
          const uint32_t s = at(block, role, tile, ph);
          file << "," << (s != 0 ? static_cast<int32_t>(s - origin) : -1);
        }
        file << "\n";
        // The consumers' tiles past the first (the first has no P V to
        // issue), up to the last one whose next tile was stamped.
        if (role == 0 || tile == 0 || tile + 1 >= fc::kTraceTiles) continue;
        bool whole = at(block, role, tile + 1, fc::kTraceTop) != 0;
        for (int ph = 0; ph < fc::kTracePhases; ++ph) whole = whole && at(block, role, tile, ph);
        if (!whole) continue;
        for (size_t s = 0; s < std::size(kSpans); ++s) {
          const auto end = kSpans[s].to == fc::kTracePhases
                               ? at(block, role, tile + 1, fc::kTraceTop)
                               : at(block, role, tile, kSpans[s].to);
          spans[s].push_back(static_cast<double>(
              static_cast<uint32_t>(end - at(block, role, tile, kSpans[s].from))));
        }
      }
  }
  out << fmt::format("traced blocks: {}, consumer tiles: {}\n", traced_blocks, spans[0].size());
  out << fmt::format("{:<42} {:>10} {:>10}\n", "phase of a key tile (SM cycles)", "median", "mean");
  for (size_t s = 0; s < std::size(kSpans); ++s) {
    const std::vector<double>& x = spans[s];
    if (x.empty()) continue;
    double mean = 0;
    for (double d : x) mean += d / static_cast<double>(x.size());
    out << fmt::format("{:<42} {:>10.0f} {:>10.0f}\n", kSpans[s].name, median(x), mean);
  }
}

}  // namespace fsdpa::tool
