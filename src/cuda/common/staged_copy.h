// The staged load stage's one host-visible rule (cuda/common/staged_copy.cuh
// is the device side): how long a staging row is.
#pragma once

namespace fsdpa::detail::cuda {

// Bytes of one staging row for rows of up to `cols` 16-bit elements: the
// row plus up to 14 bytes of lead-in, rounded to 16, and one 16-byte chunk
// of slack that the shift reads past the row's last chunk. With `cols` a
// multiple of 16 that is an odd number of 16-byte chunks, so that 8
// consecutive rows' loads of one chunk meet 8 different bank groups.
constexpr int staged_row_pitch(int cols) { return cols * 2 + 16; }
static_assert(staged_row_pitch(16) / 16 % 2 == 1 && staged_row_pitch(128) / 16 % 2 == 1,
              "an odd number of 16-byte chunks a staging row (16-column buckets)");

}  // namespace fsdpa::detail::cuda
