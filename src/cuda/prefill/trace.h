// The wgmma prefill kernel's phase trace, for builds with
// -DFSDPA_PREFILL_TRACE=ON only (`fsdpa run --trace`, tools/phase_trace.h): where a
// consumer warpgroup's key-tile period goes (its turn, its products, the
// softmax), stamped with the SM's clock in the first blocks of a launch.
//
// Layout of the buffer (set_prefill_trace): [block][role][tile][phase] of
// the SM clock's low 32 bits, 0 where nothing was stamped. Roles: 0 the producer
// (TMA loads: phase 0 when K's stage is free, 1 when V's is), 1 and 2 the
// consumers (TracePhase). Tiles past kTraceTiles and blocks past
// kTraceBlocks (by linear block index, x fastest) are not stamped.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdpa::detail::cuda {

enum TracePhase : int {
  kTraceTop = 0,      // the key tile's iteration starts (before its turn)
  kTraceTurn = 1,     // the turn is taken: the other consumer issued its products
  kTraceIssued = 2,   // S of this tile and P V of the last one issued, the turn passed
  kTraceScores = 3,   // S landed
  kTraceSoftmax = 4,  // the softmax done (P V of the last tile may still run)
  kTraceOutput = 5,   // P V of the last tile landed, O rescaled
  kTraceP = 6,        // P in registers: the tile is done
  kTracePhases = 7,
};
inline constexpr int kTraceBlocks = 512, kTraceRoles = 3, kTraceTiles = 256;
inline constexpr size_t kTraceWords =
    size_t(kTraceBlocks) * kTraceRoles * kTraceTiles * kTracePhases;

// The device buffer of kTraceWords 32-bit values the next prefill launches
// stamp (null: none). Not thread safe: a benchmark's switch.
void set_prefill_trace(uint32_t* device_words);
uint32_t* prefill_trace();

}  // namespace fsdpa::detail::cuda
