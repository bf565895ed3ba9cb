// Running one attention case for the `fsdpa` command: fresh random inputs on
// the chosen device, a poisoned output, the plan, timed runs (CUDA events on
// the GPU), a NaN scan, the error against the float64 reference on a sample,
// and the unfused path timed on the same tensors.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "fsdpa/fsdpa.h"

namespace fsdpa::tool {

// The median of `samples` (the mean of the middle two for an even count; NaN
// for none).
double median(std::vector<double> samples);

// CUDA builds: throws DeviceError naming `call` unless `status` (a
// cudaError_t) is cudaSuccess.
void cuda_check(int status, const std::string& call);

// One case: a shape, its masking features and the device it runs on.
struct CaseSpec {
  std::string preset;  // empty for a shape given by flags
  std::string kind;    // "prefill", "decode" or "shape"
  int64_t batch = 1;
  int64_t heads_q = 8;
  int64_t heads_kv = 8;
  int64_t len_q = 1024;
  int64_t len_k = 1024;
  int64_t head_dim_qk = 128;
  int64_t head_dim_v = 128;
  DType dtype = DType::BF16;
  Device device{};
  MaskKind mask = MaskKind::None;  // a [1, 1, Lq, Lk] mask (additive in `dtype`, or boolean)
  bool sinks = false;
  bool lse = false;
  bool v_aliases_k = false;  // v is a view of the first Dv columns of k
  // Rows of q, k, v and out start every 16 bytes (D rounded up; the padding
  // is not part of the views), as fused GPU kernels need; else contiguous.
  bool pad_rows = false;
  // A paged KV cache of pages this many keys (0: dense k and v): len_k is
  // rounded up to whole pages, each sequence's pages are distinct pool pages
  // in a shuffled block table.
  int64_t page_size = 0;
  // Keys of each sequence (batch of them, each <= len_k): a ragged batch.
  // Empty: every sequence has len_k keys.
  std::vector<int64_t> seq_lens;
  Options options;
  // The selection-table row to plan on (fsdpa run --row: an A/B of a row
  // plan() ranks below another); empty: plan()'s choice.
  std::string row;

  // Block-table columns: len_k in whole pages (0 when dense).
  int64_t pages_per_sequence() const;
  // The key capacity of a sequence (len_k, in whole pages when paged).
  int64_t key_capacity() const;
  // Sequence b's keys.
  int64_t sequence_len(int64_t b) const;

  // "prefill L=4096", "decode Lk=32768", "Lq=7 Lk=100", plus B when > 1.
  std::string shape_label() const;
  // "causal w127 sinks mla padded", "-" when none.
  std::string feature_label() const;
  // Whether the natural rate is bytes of K/V (decode) rather than FLOP/s.
  bool bandwidth_bound() const;
};

// The Problem that run() would see for this case ([B, H, L, D] views with
// contiguous or padded rows, v a view of k when v_aliases_k), derived by describe() over
// placeholder addresses: nothing is allocated or read.
Problem describe_case(const CaseSpec& spec);

// Query-key pairs left visible by causal masking and the sliding window, for
// query rows [row_begin, row_begin + rows) of one head (array masks aside).
int64_t visible_pairs(const Options& options, int64_t len_q, int64_t len_k, int64_t row_begin,
                      int64_t rows);

// How a case is timed and checked.
struct Settings {
  int warmup = 1;
  int min_runs = 3;
  int max_runs = 20;
  double target_seconds = 0.25;  // timed runs: about this long in all (within min..max)
  int repeat = 0;                // > 0: exactly this many timed runs
  bool check = true;             // error against the float64 reference on a sample
  bool unfused = true;           // time Policy::Unfused too
  uint64_t seed = 0;
};

// Defaults per device: 1 warm-up and >= 3 runs on the CPU; 3 warm-ups and
// >= 10 runs on the GPU (L2 flushed before each).
Settings default_settings(DeviceType device);

struct CaseResult {
  // "ok"; "unsupported" (no kernel: plan() raised); "error" (an exception);
  // "nan" (NaN left in the output); "inaccurate" (error above tolerance).
  std::string status = "error";
  std::string message;
  std::optional<Plan> plan;

  double time_ms = std::numeric_limits<double>::quiet_NaN();
  int runs = 0;
  int warmup = 0;
  double flops = 0;     // 2 * B * Hq * visible pairs * (Dqk + Dv)
  double kv_bytes = 0;  // unique K/V bytes that some query row can see
  double tflops() const { return flops / (time_ms * 1e-3) / 1e12; }
  double gbps() const { return kv_bytes / (time_ms * 1e-3) / 1e9; }

  bool checked = false;
  std::string sample;  // which part of the output was compared
  double max_abs_err = std::numeric_limits<double>::quiet_NaN();
  double rel_err = std::numeric_limits<double>::quiet_NaN();  // ||out - ref|| / ||ref||
  double lse_max_abs_err = std::numeric_limits<double>::quiet_NaN();
  double tolerance = std::numeric_limits<double>::quiet_NaN();

  // The unfused path: "measured", "estimated" (CPU: timed on a slice and
  // scaled), "same" (the plan is already unfused), or a reason
  // it was not timed.
  std::string unfused_status = "not timed";
  double unfused_ms = std::numeric_limits<double>::quiet_NaN();
  std::string unfused_sample;
  // What the unfused time is of: "OpenBLAS sgemm (materializing)" on the CPU
  // when the command has OpenBLAS, else the library's unfused kernel.
  std::string unfused_baseline;
  size_t unfused_workspace_bytes = 0;
  double speedup() const { return unfused_ms / time_ms; }

  bool ok() const { return status == "ok"; }
};

// Runs the case; never throws for a library error (it lands in the result).
CaseResult run_case(const CaseSpec& spec, const Settings& settings);

// The tolerance of docs/design.md (Tests and benchmarks) on ||out - ref|| / ||ref||.
double tolerance_for(DType dtype, DeviceType device, bool allow_tf32);

// ---------------------------------------------------------------- devices

struct DeviceChoice {
  Device device{};
  std::string name;    // "cpu (2 threads)", "cuda:0 NVIDIA H200 (132 SMs, sm_90, 139.8 GiB)"
  std::string reason;  // why this device
};

// `requested` is auto|cpu|cuda. auto: CUDA when the backend is built, a device
// exists and a small probe (plan + run) succeeds on it, else the CPU. cuda:
// raises fsdpa::Unsupported when the backend is not built or no device exists.
DeviceChoice choose_device(const std::string& requested, bool probe);

// The architecture fsdpa's CUDA rows assume when they plan for a device that
// is not present: they read no device facts, so every row that is built
// serves what its compile-time limits allow (an H100/H200).
inline constexpr const char* kOfflineArch = "sm_90";

// The architectures `fsdpa plan --device cuda --arch` plans for without a
// GPU. kOfflineArch reads no device facts; the others plan for a common GPU
// of theirs (its SM count, the shared memory a block may opt into), so that
// the plan shows what such a GPU runs (detail::cuda::set_offline_target).
struct OfflineTarget {
  const char* arch;
  const char* device;      // what the plan assumes ("" for kOfflineArch)
  int compute_capability;  // 0: no device facts
  int multiprocessors;
  int shared_memory_per_block;  // the opt-in bytes a block
};
inline constexpr OfflineTarget kOfflineTargets[] = {
    {"sm_90", "", 0, 0, 0},
    {"sm_80", "an A100: 108 SMs, 166912 bytes of shared memory a block", 80, 108, 166912},
    {"sm_86", "an A10: 72 SMs, 101376 bytes of shared memory a block", 86, 72, 101376},
    {"sm_89", "an L40S: 142 SMs, 101376 bytes of shared memory a block", 89, 142, 101376},
};
// "sm_90, sm_80, sm_86 or sm_89".
std::string offline_arch_list();

// The device `fsdpa plan` plans for. Like choose_device without a probe,
// except that `--device cuda` without a GPU plans offline for `arch`, one of
// kOfflineTargets (kOfflineArch when not given; the support matrix takes
// kOfflineArch). With a GPU present `arch`, when given (needs --device cuda),
// must be its architecture; anything else is a UsageError naming both.
DeviceChoice planning_device(const std::string& requested, const std::optional<std::string>& arch);

}  // namespace fsdpa::tool
