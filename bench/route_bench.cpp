// Decode-vs-prefill routing benchmark: where the CUDA decode family stops
// being the faster one.
//
//   route_bench [--json FILE] [--markdown FILE] [--quick]
//
// The selection table (docs/design.md) sends a CUDA problem to the decode row
// (`cuda_fused_decode`: split-K over the keys, the query heads of a kv group x
// the query positions packed as the rows of 16-row tensor-core tiles) when
// len_q <= kDecodeMaxLenQ (src/cuda/decode/decode_config.h), and to the
// first prefill row that serves it above it (`cuda_fused_prefill_hopper` on
// sm_90, else `cuda_fused_prefill`). This program measures both
// families on the very same device tensors over query lengths around that
// limit, so the limit can be set where the measured crossover is rather than
// where it was guessed.
//
// For each shape (bf16, contiguous BHSD), each Lq of kLenQ and non-causal and
// causal (bottom-right): the decode family through decode_configure /
// decode_launch and the prefill row through its configure / launch, called
// directly, so decode also runs above its own len_q
// limit (decode_supports' only refusal for these shapes, checked below; the
// other conditions are checked on the problem with len_q clamped to the
// limit). Each Plan comes from detail::plan_for_row (plan()'s own plan of
// that row); the workspace (plan.workspace_bytes) is cudaMalloc'ed once per
// case.
//
// Time: per-call microseconds, the median of 5 runs of N back-to-back launches
// on one stream between two CUDA events, N chosen so a run lasts >= 2 ms
// (launches from C++ leave no host gaps worth counting; a row where the
// host's launch loop took >= 80% of the time is flagged, in case). As in
// bench/decode_bench.py, when K/V would fit in L2 the launches rotate over
// min(4, ceil(3 * L2 / K/V bytes)) input sets, so K/V come from device memory
// as they do in a model, not from L2.
//
// Check: both outputs start poisoned (NaN); after one launch of each, they
// must agree (max |decode - prefill| < 2e-2 over every element, no NaN), and
// a few sampled rows of each must be within 2e-2 of a float64 reference on
// the host. Any failure: exit code 1. Bad flags: usage, exit code 2.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/semantics.h"
#include "core/validate.h"
#include "cuda/common/device.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_config.h"
#include "cuda/prefill/prefill.h"
#include "fsdpa/fsdpa.h"
#include "json_file.h"
#include "select/table.h"

namespace {

using fsdpa::Options;
using fsdpa::Plan;
using fsdpa::Problem;
using fsdpa::Tensors;
using fsdpa::detail::Verdict;
namespace fc = fsdpa::detail::cuda;

constexpr double kTolerance = 2e-2;  // bf16 outputs of unit-normal inputs
constexpr double kMinRunMs = 2.0;    // each timed run lasts at least this long
constexpr int kRuns = 5;             // timed runs per family and case (median)
constexpr int kWarmup = 3;           // untimed launches per family and case
constexpr int kMaxSets = 4;          // rotated input sets (decode_bench.py's rule)

struct Shape {
  const char* label;
  int64_t batch, heads_q, heads_kv, len_k, head_dim_qk, head_dim_v;
};

const Shape kShapes[] = {
    {"B1 H32/8 Lk4096 D128", 1, 32, 8, 4096, 128, 128},
    {"B1 H32/8 Lk32768 D128", 1, 32, 8, 32768, 128, 128},
    {"B1 H32/8 Lk32768 D256", 1, 32, 8, 32768, 256, 256},
    {"B8 H32/8 Lk8192 D128", 8, 32, 8, 8192, 128, 128},
    {"B1 H16/16 Lk32768 D128 (MHA)", 1, 16, 16, 32768, 128, 128},
    // GQA 8 (Llama 3 70B): more packed rows per kv head, so more decode row chunks.
    {"B1 H64/8 Lk8192 D128 (GQA 8)", 1, 64, 8, 8192, 128, 128},
    {"B4 H64/8 Lk8192 D128 (GQA 8)", 4, 64, 8, 8192, 128, 128},
};
const int64_t kLenQ[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128};
// --quick: one shape, a few lengths on both sides of the limit.
const int64_t kQuickLenQ[] = {1, 4, 16, 32, 128};

void cuda_check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + call + ": " +
                             cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}
#define CHECK_CUDA(call) cuda_check((call), #call)

// Device memory owned for the lifetime of a shape or a case.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) CHECK_CUDA(cudaMalloc(&data_, bytes));
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Unit-normal bf16 values: a pool drawn once, copied in chunks from random
// offsets (filling hundreds of MB element by element would take seconds).
class NormalFill {
 public:
  explicit NormalFill(uint64_t seed) : rng_(seed) {
    std::normal_distribution<float> normal(0.f, 1.f);
    pool_.resize(kPool);
    for (uint16_t& x : pool_) x = fsdpa::detail::float_to_bf16(normal(rng_));
  }
  void fill(std::vector<uint16_t>& out) {
    std::uniform_int_distribution<size_t> offset(0, kPool - kChunk);
    for (size_t i = 0; i < out.size(); i += kChunk) {
      const size_t n = std::min(kChunk, out.size() - i);
      std::memcpy(out.data() + i, pool_.data() + offset(rng_), n * sizeof(uint16_t));
    }
  }

 private:
  static constexpr size_t kPool = size_t(1) << 22;
  static constexpr size_t kChunk = 509;  // odd: chunks do not line up with rows
  std::mt19937_64 rng_;
  std::vector<uint16_t> pool_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fmt_num(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

// The plan of the named selection-table row for the problem, its configure()
// called but not its supports() (decode is timed above its len_q limit).
Plan row_plan(const char* row_name, const Problem& problem, const Options& options) {
  const auto table = fsdpa::detail::selection_table();
  for (size_t i = 0; i < table.size(); ++i)
    if (std::strcmp(table[i].name, row_name) == 0)
      return fsdpa::detail::plan_for_row(problem, options, static_cast<int>(i));
  throw std::runtime_error(std::string("no selection-table row ") + row_name +
                           " in this build (is the CUDA backend built?)");
}

// Why the decode family cannot serve `problem` for a reason other than its
// len_q limit, or "" when it can (with the limit lifted).
std::string decode_refusal(const Problem& problem, const Options& options) {
  Problem clamped = problem;
  clamped.len_q = std::min(problem.len_q, fc::kDecodeMaxLenQ);
  const Verdict verdict = fc::decode_supports(clamped, options);
  if (!verdict.ok) return verdict.reason;
  // The one condition that depends on len_q besides the limit (32-bit row indices).
  if (problem.batch * problem.heads_q * problem.len_q > INT_MAX)
    return "rows=" + std::to_string(problem.batch * problem.heads_q * problem.len_q) +
           " exceed the decode kernels' 32-bit indices";
  return "";
}

// Per-call microseconds: median of kRuns runs of back-to-back launches, each
// run >= kMinRunMs. launch(i) issues call i on `stream`.
struct Timing {
  double us = 0;
  // Host time per call of the launch loop: close to `us` means the host, not
  // the GPU, set the pace (then `us` overstates the kernels' time).
  double host_us = 0;
  int calls_per_run = 0;
};

Timing time_calls(const std::function<void(int)>& launch, cudaStream_t stream) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  double host_ms = 0;
  auto run_ms = [&](int calls) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    const auto host_start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) launch(i);
    host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start)
            .count();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaGetLastError());
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return static_cast<double>(ms);
  };
  Timing t;
  try {
    for (int i = 0; i < kWarmup; ++i) launch(i);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    // Estimate from a short run, then size the timed runs from it.
    constexpr int kProbe = 4;
    const double estimate = std::max(run_ms(kProbe) / kProbe, 1e-4);
    t.calls_per_run = static_cast<int>(std::clamp(std::ceil(kMinRunMs / estimate), 1.0, 100000.0));
    std::vector<double> per_call, host_per_call;
    for (int r = 0; r < kRuns; ++r) {
      per_call.push_back(run_ms(t.calls_per_run) / t.calls_per_run);
      host_per_call.push_back(host_ms / t.calls_per_run);
    }
    t.us = median(per_call) * 1e3;
    t.host_us = median(host_per_call) * 1e3;
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return t;
}

struct Row {
  const Shape* shape = nullptr;
  int64_t len_q = 0;
  bool causal = false;
  std::string skipped;  // why a family could not be measured ("" when both were)
  std::string error;    // an exception while measuring
  double decode_us = 0, prefill_us = 0;
  double decode_host_us = 0, prefill_host_us = 0;  // Timing::host_us
  int decode_calls = 0, prefill_calls = 0;
  int64_t decode_splits = 0;
  size_t decode_workspace = 0;
  std::string prefill_kernel;  // the prefill row timed
  int sets = 1;
  double max_diff = 0;     // max |decode - prefill| over the non-NaN elements
  int64_t nan_count = 0;   // NaN (unwritten) elements of either output
  double ref_decode = 0;   // max |decode - float64| on the sampled rows
  double ref_prefill = 0;  // max |prefill - float64| on the sampled rows
  bool measured() const { return skipped.empty() && error.empty(); }
  bool agree() const {
    return nan_count == 0 && max_diff < kTolerance && ref_decode < kTolerance &&
           ref_prefill < kTolerance;
  }
  bool failed() const { return !error.empty() || (measured() && !agree()); }
  const char* faster() const { return decode_us <= prefill_us ? "decode" : "prefill"; }
  // The launch loop took >= 80% of the measured time: maybe host-bound.
  bool host_bound() const {
    return decode_host_us >= 0.8 * decode_us || prefill_host_us >= 0.8 * prefill_us;
  }
};

// The float64 reference for one query row (b, h, i) of the BHSD host copies.
std::vector<double> reference_row(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                                  const std::vector<uint16_t>& v, const Problem& p,
                                  const Options& options, double scale, int64_t b, int64_t h,
                                  int64_t i) {
  using fsdpa::detail::bf16_to_float;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t kv = h / (p.heads_q / p.heads_kv);
  const uint16_t* q_row = q.data() + ((b * p.heads_q + h) * p.len_q + i) * dqk;
  const uint16_t* k_head = k.data() + (b * p.heads_kv + kv) * p.len_k * dqk;
  const uint16_t* v_head = v.data() + (b * p.heads_kv + kv) * p.len_k * dv;
  const fsdpa::detail::KeyRange keys = fsdpa::detail::visible_keys(options, p.len_q, p.len_k, i);
  std::vector<double> out(static_cast<size_t>(dv), 0.0);
  if (keys.end <= keys.begin) return out;
  std::vector<double> scores;
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = keys.begin; j < keys.end; ++j) {
    double s = 0;
    for (int64_t d = 0; d < dqk; ++d)
      s += double(bf16_to_float(q_row[d])) * double(bf16_to_float(k_head[j * dqk + d]));
    scores.push_back(s * scale);
    top = std::max(top, s * scale);
  }
  double sum = 0;
  for (size_t j = 0; j < scores.size(); ++j) {
    const double w = std::exp(scores[j] - top);
    sum += w;
    const uint16_t* v_row = v_head + (keys.begin + static_cast<int64_t>(j)) * dv;
    for (int64_t d = 0; d < dv; ++d) out[size_t(d)] += w * double(bf16_to_float(v_row[d]));
  }
  for (double& x : out) x /= sum;
  return out;
}

// One shape's device tensors (sized for the largest Lq), its host copies and
// the rotated input sets.
struct ShapeData {
  int sets = 1;
  int64_t max_len_q = 0;
  std::vector<DeviceBuffer> q, k, v, out;
  std::vector<uint16_t> host_q, host_k, host_v;
};

ShapeData make_shape_data(const Shape& s, int64_t max_len_q, size_t l2_bytes, NormalFill& fill) {
  ShapeData d;
  d.max_len_q = max_len_q;
  const size_t kv_bytes =
      size_t(s.batch * s.heads_kv * s.len_k * (s.head_dim_qk + s.head_dim_v)) * 2;
  d.sets = static_cast<int>(
      std::clamp<size_t>((3 * l2_bytes + kv_bytes - 1) / kv_bytes, 1, size_t(kMaxSets)));
  d.host_q.resize(size_t(s.batch * s.heads_q * max_len_q * s.head_dim_qk));
  d.host_k.resize(size_t(s.batch * s.heads_kv * s.len_k * s.head_dim_qk));
  d.host_v.resize(size_t(s.batch * s.heads_kv * s.len_k * s.head_dim_v));
  fill.fill(d.host_q);
  fill.fill(d.host_k);
  fill.fill(d.host_v);
  const size_t out_bytes = size_t(s.batch * s.heads_q * max_len_q * s.head_dim_v) * 2;
  for (int set = 0; set < d.sets; ++set) {
    // Every set holds the same values: only their addresses differ (L2).
    auto upload = [](const std::vector<uint16_t>& host) {
      DeviceBuffer buffer(host.size() * sizeof(uint16_t));
      CHECK_CUDA(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice));
      return buffer;
    };
    d.q.push_back(upload(d.host_q));
    d.k.push_back(upload(d.host_k));
    d.v.push_back(upload(d.host_v));
    d.out.push_back(DeviceBuffer(out_bytes));
  }
  // Pageable uploads may still be in flight when cudaMemcpy returns; the
  // launches go to a non-blocking stream.
  CHECK_CUDA(cudaDeviceSynchronize());
  return d;
}

Tensors tensors_of(const Shape& s, const ShapeData& d, int set, int64_t len_q) {
  const fsdpa::Device device{fsdpa::DeviceType::CUDA, 0};
  const auto bf16 = fsdpa::DType::BF16;
  Tensors t;
  t.q = fsdpa::contiguous_view(d.q[size_t(set)].get(), bf16,
                               {s.batch, s.heads_q, len_q, s.head_dim_qk}, device);
  t.k = fsdpa::contiguous_view(d.k[size_t(set)].get(), bf16,
                               {s.batch, s.heads_kv, s.len_k, s.head_dim_qk}, device);
  t.v = fsdpa::contiguous_view(d.v[size_t(set)].get(), bf16,
                               {s.batch, s.heads_kv, s.len_k, s.head_dim_v}, device);
  t.out = fsdpa::contiguous_view(d.out[size_t(set)].get(), bf16,
                                 {s.batch, s.heads_q, len_q, s.head_dim_v}, device);
  return t;
}

// Poisons set 0's output, runs one launch, returns the output as floats.
std::vector<float> run_once(const std::function<void(int)>& launch, const Tensors& t,
                            cudaStream_t stream) {
  const size_t n = size_t(t.out.sizes[0] * t.out.sizes[1] * t.out.sizes[2] * t.out.sizes[3]);
  CHECK_CUDA(cudaMemsetAsync(t.out.data, 0xff, n * sizeof(uint16_t), stream));  // bf16 NaN
  launch(0);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaGetLastError());
  std::vector<uint16_t> bits(n);
  CHECK_CUDA(cudaMemcpy(bits.data(), t.out.data, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = fsdpa::detail::bf16_to_float(bits[i]);
  return out;
}

void measure(Row& row, const Shape& s, const ShapeData& d, cudaStream_t stream) {
  Options options;
  options.causal = row.causal;
  options.causal_align = fsdpa::CausalAlign::BottomRight;
  options.policy = fsdpa::Policy::ForceFused;
  std::vector<Tensors> sets;
  for (int set = 0; set < d.sets; ++set) sets.push_back(tensors_of(s, d, set, row.len_q));
  const Problem problem = fsdpa::describe(sets[0], options);
  row.sets = d.sets;

  if (std::string why = decode_refusal(problem, options); !why.empty()) {
    row.skipped = "decode declines: " + why;
    return;
  }
  // The prefill row plan() takes above the limit: the first 16-bit prefill
  // row (wgmma on sm_90, else mma.sync) that serves the problem.
  const fsdpa::detail::KernelRow* prefill_row = nullptr;
  std::string declined;
  for (const fsdpa::detail::KernelRow& candidate : fsdpa::detail::selection_table()) {
    if (candidate.path != fsdpa::Path::FusedPrefill || candidate.backend != fsdpa::Backend::CUDA)
      continue;
    const Verdict v = candidate.supports(problem, options);
    if (v.ok) {
      prefill_row = &candidate;
      break;
    }
    declined += std::string(declined.empty() ? "" : "; ") + candidate.name + ": " + v.reason;
  }
  if (prefill_row == nullptr) {
    row.skipped = "prefill declines: " + declined;
    return;
  }

  Plan decode = row_plan("cuda_fused_decode", problem, options);
  Plan prefill = row_plan(prefill_row->name, problem, options);
  row.prefill_kernel = prefill.kernel;
  row.decode_splits = decode.num_kv_splits;
  row.decode_workspace = decode.workspace_bytes;
  const DeviceBuffer decode_ws(decode.workspace_bytes);
  const DeviceBuffer prefill_ws(prefill.workspace_bytes);

  const int n_sets = d.sets;
  auto run_decode = [&](int i) {
    fc::decode_launch(decode, sets[size_t(i % n_sets)], decode_ws.get(), stream);
  };
  auto run_prefill = [&](int i) {
    prefill_row->launch(prefill, sets[size_t(i % n_sets)], prefill_ws.get(), stream);
  };

  // ---- agreement (set 0), before any timing
  const std::vector<float> out_d = run_once(run_decode, sets[0], stream);
  const std::vector<float> out_p = run_once(run_prefill, sets[0], stream);
  for (size_t i = 0; i < out_d.size(); ++i) {
    if (std::isnan(out_d[i]) || std::isnan(out_p[i])) {
      ++row.nan_count;
      continue;
    }
    row.max_diff = std::max(row.max_diff, double(std::fabs(out_d[i] - out_p[i])));
  }
  // Sampled rows against float64: first, last, and one in the middle.
  const int64_t samples[3][3] = {{0, 0, 0},
                                 {s.batch - 1, s.heads_q - 1, row.len_q - 1},
                                 {s.batch / 2, s.heads_q / 2 + 1, row.len_q / 2}};
  for (const auto& sample : samples) {
    const int64_t b = sample[0], h = std::min(sample[1], s.heads_q - 1), i = sample[2];
    const std::vector<double> ref =
        reference_row(d.host_q, d.host_k, d.host_v, problem, options, decode.scale, b, h, i);
    const size_t base = size_t(((b * s.heads_q + h) * row.len_q + i) * s.head_dim_v);
    for (size_t c = 0; c < ref.size(); ++c) {
      const double ed = std::fabs(double(out_d[base + c]) - ref[c]);
      const double ep = std::fabs(double(out_p[base + c]) - ref[c]);
      // NaN compares false: count it as an error of infinite size.
      row.ref_decode = std::isnan(ed) ? HUGE_VAL : std::max(row.ref_decode, ed);
      row.ref_prefill = std::isnan(ep) ? HUGE_VAL : std::max(row.ref_prefill, ep);
    }
  }

  // ---- time, decode first, then prefill, on the same tensors
  const Timing td = time_calls(run_decode, stream);
  const Timing tp = time_calls(run_prefill, stream);
  row.decode_us = td.us;
  row.decode_host_us = td.host_us;
  row.decode_calls = td.calls_per_run;
  row.prefill_us = tp.us;
  row.prefill_host_us = tp.host_us;
  row.prefill_calls = tp.calls_per_run;
}

struct Crossover {
  const Shape* shape;
  bool causal;
  int64_t largest_decode_faster = 0;    // 0: decode never faster
  int64_t smallest_prefill_faster = 0;  // 0: prefill never faster
  int64_t decode_faster_through = 0;    // decode faster at every measured Lq <= this
};

std::vector<Crossover> crossovers(const std::vector<Row>& rows) {
  std::vector<Crossover> result;
  for (const Row& r : rows) {
    if (!r.measured()) continue;
    auto it = std::find_if(result.begin(), result.end(), [&](const Crossover& c) {
      return c.shape == r.shape && c.causal == r.causal;
    });
    if (it == result.end()) {
      result.push_back({r.shape, r.causal});
      it = result.end() - 1;
    }
    if (r.decode_us <= r.prefill_us) {
      it->largest_decode_faster = std::max(it->largest_decode_faster, r.len_q);
    } else if (it->smallest_prefill_faster == 0 || r.len_q < it->smallest_prefill_faster) {
      it->smallest_prefill_faster = r.len_q;
    }
  }
  // Rows come in increasing Lq per (shape, causal).
  for (Crossover& c : result) {
    for (const Row& r : rows) {
      if (r.shape != c.shape || r.causal != c.causal || !r.measured()) continue;
      if (c.smallest_prefill_faster != 0 && r.len_q >= c.smallest_prefill_faster) break;
      c.decode_faster_through = r.len_q;
    }
  }
  return result;
}

struct Report {
  std::string command, device;
  int multiprocessors = 0;
  size_t l2_bytes = 0;
  bool quick = false;
};

std::string markdown(const Report& rep, const std::vector<Row>& rows) {
  std::ostringstream md;
  md << "# CUDA decode vs prefill routing (route_bench)\n\n"
     << "- Command: `" << rep.command << "`\n"
     << "- Device: " << rep.device << ", " << rep.multiprocessors << " SMs, L2 "
     << rep.l2_bytes / (1024 * 1024) << " MiB\n"
     << "- bf16, contiguous BHSD; causal = bottom-right. Current decode limit kDecodeMaxLenQ = "
     << fc::kDecodeMaxLenQ << " (src/cuda/decode/decode_config.h).\n"
     << "- Time: per-call us, median of " << kRuns << " runs of N back-to-back launches (each run"
     << " >= " << kMinRunMs << " ms); K/V rotated over `sets` input sets when they fit in L2.\n"
     << "- prefill/decode > 1: decode faster. Check: max |decode - prefill| over all outputs and"
     << " max |out - float64| on 3 sampled rows, each < " << kTolerance << ".\n"
     << "- `*`: the host's launch loop took >= 80% of the measured time, so launch overhead may"
     << " be in the number.\n\n";
  std::set<std::string> prefill_kernels;
  for (const Row& r : rows)
    if (!r.prefill_kernel.empty()) prefill_kernels.insert(r.prefill_kernel);
  md << "Prefill row timed:";
  for (const std::string& k : prefill_kernels) md << " `" << k << "`";
  md << ".\n\n";
  md << "| shape | Lq | causal | decode us | prefill us | faster | prefill/decode | splits | sets"
     << " | max diff | ref err d/p | ok |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    md << "| " << r.shape->label << " | " << r.len_q << " | " << (r.causal ? "yes" : "no") << " | ";
    if (!r.measured()) {
      // A skip (a bucket not compiled) is no failure; an error is.
      md << (r.error.empty() ? "skipped: " + r.skipped : "error: " + r.error)
         << " | | | | | | | | | " << (r.error.empty() ? "skip" : "FAIL") << " |\n";
      continue;
    }
    const char* mark = r.host_bound() ? "*" : "";
    md << fmt_num("%.1f", r.decode_us) << mark << " | " << fmt_num("%.1f", r.prefill_us) << mark
       << " | " << r.faster() << " | " << fmt_num("%.2f", r.prefill_us / r.decode_us) << " | "
       << r.decode_splits << " | " << r.sets << " | " << fmt_num("%.2e", r.max_diff)
       << (r.nan_count ? " (" + std::to_string(r.nan_count) + " NaN)" : "") << " | "
       << fmt_num("%.1e", r.ref_decode) << " / " << fmt_num("%.1e", r.ref_prefill) << " | "
       << (r.agree() ? "ok" : "FAIL") << " |\n";
  }
  md << "\nCrossover per shape: the largest Lq at which decode is still faster, the smallest at "
        "which prefill is faster, and the Lq through which decode wins at every measured Lq.\n\n"
     << "| shape | causal | largest Lq decode faster | smallest Lq prefill faster |"
     << " decode faster through |\n|---|---|---|---|---|\n";
  int64_t through_all = std::numeric_limits<int64_t>::max();
  const std::vector<Crossover> cross = crossovers(rows);
  for (const Crossover& c : cross) {
    auto lq = [](int64_t x) { return x == 0 ? std::string("none") : std::to_string(x); };
    md << "| " << c.shape->label << " | " << (c.causal ? "yes" : "no") << " | "
       << lq(c.largest_decode_faster) << " | " << lq(c.smallest_prefill_faster) << " | "
       << lq(c.decode_faster_through) << " |\n";
    through_all = std::min(through_all, c.decode_faster_through);
  }
  if (!cross.empty())
    md << "\nDecode is faster at every measured Lq <= " << through_all
       << " for every shape and causal mode above (current limit " << fc::kDecodeMaxLenQ << ").\n";
  return md.str();
}

fsdpa::tool::Json json(const Report& rep, const std::vector<Row>& rows, int failures) {
  using fsdpa::tool::finite_or_null;
  fsdpa::tool::Json js;
  js["tool"] = "route_bench";
  js["command"] = rep.command;
  js["device"] = rep.device;
  js["multiprocessors"] = rep.multiprocessors;
  js["l2_bytes"] = rep.l2_bytes;
  js["quick"] = rep.quick;
  js["dtype"] = "bf16";
  js["layout"] = "BHSD";
  js["causal_align"] = "bottom-right";
  js["decode_max_len_q"] = fc::kDecodeMaxLenQ;
  js["tolerance"] = kTolerance;
  js["runs"] = kRuns;
  js["min_run_ms"] = kMinRunMs;
  js["failures"] = failures;
  fsdpa::tool::Json& out_rows = js["rows"] = fsdpa::tool::Json::array();
  for (const Row& r : rows) {
    const Shape& s = *r.shape;
    fsdpa::tool::Json o;
    o["shape"] = s.label;
    o["batch"] = s.batch;
    o["heads_q"] = s.heads_q;
    o["heads_kv"] = s.heads_kv;
    o["len_q"] = r.len_q;
    o["len_k"] = s.len_k;
    o["head_dim_qk"] = s.head_dim_qk;
    o["head_dim_v"] = s.head_dim_v;
    o["causal"] = r.causal;
    if (!r.measured()) {
      o["skipped"] = r.skipped;
      o["error"] = r.error;
    } else {
      o["decode_us"] = finite_or_null(r.decode_us);
      o["prefill_us"] = finite_or_null(r.prefill_us);
      o["decode_host_us"] = finite_or_null(r.decode_host_us);
      o["prefill_host_us"] = finite_or_null(r.prefill_host_us);
      o["host_bound"] = r.host_bound();
      o["faster"] = r.faster();
      o["prefill_over_decode"] = finite_or_null(r.prefill_us / r.decode_us);
      o["decode_calls_per_run"] = r.decode_calls;
      o["prefill_calls_per_run"] = r.prefill_calls;
      o["prefill_kernel"] = r.prefill_kernel;
      o["decode_splits"] = r.decode_splits;
      o["decode_workspace_bytes"] = r.decode_workspace;
      o["sets"] = r.sets;
      o["max_abs_diff"] = finite_or_null(r.max_diff);
      o["nan_count"] = r.nan_count;
      o["ref_err_decode"] = finite_or_null(r.ref_decode);
      o["ref_err_prefill"] = finite_or_null(r.ref_prefill);
      o["agree"] = r.agree();
    }
    out_rows.push_back(std::move(o));
  }
  fsdpa::tool::Json& out_cross = js["crossovers"] = fsdpa::tool::Json::array();
  for (const Crossover& c : crossovers(rows))
    out_cross.push_back({{"shape", c.shape->label},
                         {"causal", c.causal},
                         {"largest_len_q_decode_faster", c.largest_decode_faster},
                         {"smallest_len_q_prefill_faster", c.smallest_prefill_faster},
                         {"decode_faster_through_len_q", c.decode_faster_through}});
  return js;
}

void write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << text;
  if (!f) std::fprintf(stderr, "route_bench: cannot write %s\n", path.c_str());
}

void write_json(const std::string& path, const fsdpa::tool::Json& document) {
  if (path.empty()) return;
  try {
    fsdpa::tool::write_json_file(path, document);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "route_bench: %s\n", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Report rep;
  std::string json_path, markdown_path;
  for (int i = 0; i < argc; ++i) rep.command += (i ? " " : "") + std::string(argv[i]);
  CLI::App app(
      "Times the CUDA decode and prefill families on the same tensors over query "
      "lengths (the decode limit kDecodeMaxLenQ)",
      "route_bench");
  app.add_option("--json", json_path, "write the results as JSON to FILE");
  app.add_option("--markdown", markdown_path, "write the results as markdown to FILE");
  app.add_flag("--quick", rep.quick, "fewer lengths and shapes");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& path : {json_path, markdown_path})
      if (!path.empty()) fsdpa::tool::check_writable(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "route_bench: %s\n", e.what());
    return 2;
  }

  std::vector<Row> rows;
  int failures = 0;
  try {
    if (fc::device_count() < 1) throw std::runtime_error("no CUDA device");
    CHECK_CUDA(cudaSetDevice(0));
    const fc::DeviceInfo& info = fc::device_info(0);
    rep.device = info.name;
    rep.multiprocessors = info.multiprocessors;
    rep.l2_bytes = info.l2_bytes;
    std::printf("route_bench: %s, %d SMs, L2 %zu MiB; decode limit kDecodeMaxLenQ = %lld\n",
                info.name.c_str(), info.multiprocessors, info.l2_bytes / (1024 * 1024),
                static_cast<long long>(fc::kDecodeMaxLenQ));
    cudaStream_t stream = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    const std::vector<int64_t> lens =
        rep.quick ? std::vector<int64_t>(std::begin(kQuickLenQ), std::end(kQuickLenQ))
                  : std::vector<int64_t>(std::begin(kLenQ), std::end(kLenQ));
    const size_t n_shapes = rep.quick ? 1 : std::size(kShapes);
    NormalFill fill(20240611);
    for (size_t si = 0; si < n_shapes; ++si) {
      const Shape& s = kShapes[si];
      ShapeData data;
      std::string shape_error;
      try {
        data = make_shape_data(s, *std::max_element(lens.begin(), lens.end()), rep.l2_bytes, fill);
      } catch (const std::exception& e) {
        shape_error = e.what();
      }
      for (bool causal : {false, true}) {
        for (int64_t len_q : lens) {
          Row row;
          row.shape = &s;
          row.len_q = len_q;
          row.causal = causal;
          if (!shape_error.empty()) {
            row.error = shape_error;
          } else {
            try {
              measure(row, s, data, stream);
            } catch (const std::exception& e) {
              row.error = e.what();
            }
          }
          if (row.failed()) ++failures;
          if (!row.measured())
            std::printf("%-30s Lq=%-4lld %-6s %s%s\n", s.label, static_cast<long long>(len_q),
                        causal ? "causal" : "full", row.error.empty() ? "skipped: " : "ERROR: ",
                        row.error.empty() ? row.skipped.c_str() : row.error.c_str());
          else
            std::printf(
                "%-30s Lq=%-4lld %-6s decode %9.1f us  prefill %9.1f us  %-7s x%.2f  splits %lld"
                "  max diff %.2e  ref %.1e/%.1e%s%s%s\n",
                s.label, static_cast<long long>(len_q), causal ? "causal" : "full", row.decode_us,
                row.prefill_us, row.faster(), row.prefill_us / row.decode_us,
                static_cast<long long>(row.decode_splits), row.max_diff, row.ref_decode,
                row.ref_prefill, row.nan_count ? " NaN" : "",
                row.host_bound() ? "  host-bound?" : "", row.agree() ? "" : "  DISAGREE");
          std::fflush(stdout);
          rows.push_back(std::move(row));
        }
      }
      // After each shape, so a run cut short still leaves its results.
      write_json(json_path, json(rep, rows, failures));
      write_file(markdown_path, markdown(rep, rows));
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "route_bench: %s\n", e.what());
    ++failures;
  }

  write_json(json_path, json(rep, rows, failures));
  write_file(markdown_path, markdown(rep, rows));
  for (const Crossover& c : crossovers(rows))
    std::printf(
        "crossover %-30s %-6s decode faster up to Lq=%lld (at every Lq <= %lld); "
        "prefill faster from Lq=%lld\n",
        c.shape->label, c.causal ? "causal" : "full",
        static_cast<long long>(c.largest_decode_faster),
        static_cast<long long>(c.decode_faster_through),
        static_cast<long long>(c.smallest_prefill_faster));
  std::printf("route_bench: %zu rows, %d failures\n", rows.size(), failures);
  return failures ? 1 : 0;
}
