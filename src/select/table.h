// The selection table: the one list of kernels fsdpa has. plan(), run(),
// ForceFused and the support matrix all read it; nothing else decides what
// is supported.
#pragma once

#include <span>
#include <string>

#include "core/validate.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

// Whether a row can serve a problem; when not, `reason` names the violated
// constraint with the actual and the allowed values. `routed` marks the
// declines that only say the problem is another row's (its dtype, a query
// length past the decode limit, not the MLA layout): the support matrix shows
// the last decline that is not routed, the one that decided the fallback.
struct Verdict {
  bool ok = true;
  std::string reason;
  bool routed = false;

  static Verdict yes() { return {}; }
  static Verdict no(std::string why) { return {false, std::move(why), false}; }
  static Verdict other_row(std::string why) { return {false, std::move(why), true}; }
};

// The decline of a row that reads dense k and v of Lk keys each: a paged
// cache or per-sequence lengths go to the rows that take them (the decode
// kernels; past the decode limit, MLA's layout on the MLA kernel).
inline Verdict dense_kv_only(const Problem& p) {
  if (p.page_size > 0)
    return Verdict::no("a paged KV cache (page_size=" + std::to_string(p.page_size) +
                       ") runs the decode kernels only (len_q up to their limit; MLA's "
                       "layout at any len_q)");
  if (p.has_seq_lens_k)
    return Verdict::no(
        "per-sequence key lengths (seq_lens_k) run the decode kernels only (len_q "
        "up to their limit; MLA's layout at any len_q)");
  return Verdict::yes();
}

// The decline of a GPU row whose block needs `needed` bytes of shared memory
// where the problem's device allows `allowed` a block (its opt-in limit);
// `kernel` names what needs them.
inline Verdict fits_shared_memory(const std::string& kernel, size_t needed, size_t allowed,
                                  const Problem& p) {
  if (needed <= allowed) return Verdict::yes();
  const bool limited = shared_memory_limit() == static_cast<int64_t>(allowed);
  return Verdict::no(
      kernel + " needs " + std::to_string(needed) +
      " bytes of shared memory a block, device cuda:" + std::to_string(p.device.index) +
      " allows " + std::to_string(allowed) + (limited ? " (FSDPA_SHARED_MEMORY_LIMIT)" : ""));
}

struct KernelRow {
  const char* name;
  Backend backend;
  Path path;
  // Whether the row serves the problem (its kernel is compiled for it).
  Verdict (*supports)(const Problem& problem, const Options& options);
  // Fills the plan's kernel facts: buckets, pad ratio, tiles, splits,
  // threads, workspace, and the generated instance it chose (Plan::instance,
  // for the families that have them). Called only when supports() said yes.
  void (*configure)(const Problem& problem, Plan& plan);
  // Launches. The plan was made by this row and the tensors match it.
  void (*launch)(const Plan& plan, const Tensors& tensors, void* workspace, void* stream);
  // One line for the support matrix: dtypes, head dims, features.
  const char* summary;
};

// All rows of all backends that are built, in priority order within a backend.
std::span<const KernelRow> selection_table();

// Whether the backend was compiled into this library.
bool backend_built(Backend backend);

// The plan of row `row_index` of selection_table() for a problem, as plan()
// makes it once that row is chosen (its configure() called), without asking
// the row's supports(): for tools that time a row outside its routing limits
// (bench/route_bench.cpp). Throws InvalidArgument for an index out of range.
Plan plan_for_row(const Problem& problem, const Options& options, int row_index);

}  // namespace fsdpa::detail
