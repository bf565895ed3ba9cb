#include "report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "json_file.h"
#include "sgemm_baseline.h"

namespace fsdpa::tool {

namespace {

std::string fixed(double value, int digits) { return fmt::format("{:.{}f}", value, digits); }

// Three significant digits, no exponent (values >= 0.001).
std::string three_digits(double value) {
  if (value >= 100) return fixed(value, 0);
  if (value >= 10) return fixed(value, 1);
  if (value >= 1) return fixed(value, 2);
  return fixed(value, 3);
}

std::string scientific(double value) {
  if (std::isnan(value)) return "-";
  if (std::isinf(value)) return "inf";
  return fmt::format("{:.1e}", value);
}

// The text padded to `width`, then one space.
std::string pad(const std::string& s, size_t width) { return fmt::format("{:<{}} ", s, width); }

std::string pad_left(const std::string& s, size_t width) {
  return fmt::format("{:>{}} ", s, width);
}

std::string trim_right(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

struct Column {
  const char* title;
  size_t width;
  bool right;
};

// preset, case, features, path, kernel, bucket, time, rate, err, workspace, speed-up
constexpr Column kColumns[] = {
    {"preset", 19, false}, {"case", 17, false},    {"features", 17, false},  {"path", 13, false},
    {"kernel", 24, false}, {"bucket", 13, false},  {"time", 9, true},        {"rate", 13, true},
    {"max err", 7, true},  {"workspace", 9, true}, {"vs unfused", 10, true},
};

std::string cell(size_t column, const std::string& text) {
  const Column& c = kColumns[column];
  return c.right ? pad_left(text, c.width) : pad(text, c.width);
}

// -------------------------------------------------------------- JSON

Json case_json(const CaseSpec& c, const CaseResult& r) {
  Json o;
  o["preset"] = c.preset;
  o["kind"] = c.kind;
  o["case"] = c.shape_label();
  o["features"] = c.feature_label();
  o["batch"] = c.batch;
  o["heads_q"] = c.heads_q;
  o["heads_kv"] = c.heads_kv;
  o["len_q"] = c.len_q;
  o["len_k"] = c.len_k;
  o["head_dim_qk"] = c.head_dim_qk;
  o["head_dim_v"] = c.head_dim_v;
  o["dtype"] = to_string(c.dtype);
  o["device"] = fmt::format("{}:{}", to_string(c.device.type), c.device.index);
  o["causal"] =
      c.options.causal
          ? Json(c.options.causal_align == CausalAlign::TopLeft ? "top-left" : "bottom-right")
          : Json(false);
  o["window_left"] = c.options.window_left ? Json(*c.options.window_left) : Json();
  o["softcap"] = finite_or_null(c.options.softcap);
  o["mask"] = c.mask == MaskKind::None       ? "none"
              : c.mask == MaskKind::Additive ? "additive"
                                             : "boolean";
  o["sinks"] = c.sinks;
  o["lse"] = c.lse;
  o["v_aliases_k"] = c.v_aliases_k;
  o["status"] = r.status;
  o["message"] = r.message;
  if (r.plan) {
    const Plan& p = *r.plan;
    o["policy"] = to_string(p.policy);
    o["backend"] = to_string(p.backend);
    o["path"] = to_string(p.path);
    o["kernel"] = p.kernel;
    o["bucket_qk"] = p.head_dim_qk_bucket;
    o["bucket_v"] = p.head_dim_v_bucket;
    o["pad_ratio"] = finite_or_null(p.pad_ratio);
    o["tile_q"] = p.tile_q;
    o["tile_k"] = p.tile_k;
    o["kv_splits"] = p.num_kv_splits;
    o["threads"] = p.num_threads;
    o["workspace_bytes"] = p.workspace_bytes;
    o["fallback_reason"] = p.fallback_reason;
  }
  o["time_ms"] = finite_or_null(r.time_ms);
  o["runs"] = r.runs;
  o["warmup"] = r.warmup;
  o["flops"] = finite_or_null(r.flops);
  o["tflops"] = finite_or_null(r.tflops());
  o["kv_bytes"] = finite_or_null(r.kv_bytes);
  o["kv_gbps"] = finite_or_null(r.gbps());
  o["checked"] = r.checked;
  o["check_sample"] = r.sample;
  o["max_abs_err"] = finite_or_null(r.max_abs_err);
  o["rel_err"] = finite_or_null(r.rel_err);
  o["lse_max_abs_err"] = finite_or_null(r.lse_max_abs_err);
  o["tolerance"] = finite_or_null(r.tolerance);
  o["unfused_status"] = r.unfused_status;
  o["unfused_ms"] = finite_or_null(r.unfused_ms);
  o["unfused_sample"] = r.unfused_sample;
  o["unfused_baseline"] = r.unfused_baseline;
  o["unfused_workspace_bytes"] = r.unfused_workspace_bytes;
  o["speedup_vs_unfused"] = finite_or_null(r.speedup());
  return o;
}

}  // namespace

std::string format_time(double ms) {
  if (std::isnan(ms)) return "-";
  if (ms < 1.0) return three_digits(ms * 1e3) + " us";
  if (ms < 1e3) return three_digits(ms) + " ms";
  return three_digits(ms * 1e-3) + " s";
}

std::string format_bytes(double bytes) {
  if (bytes < 1024) return fixed(bytes, 0) + " B";
  if (bytes < 1024.0 * 1024) return three_digits(bytes / 1024) + " KiB";
  if (bytes < 1024.0 * 1024 * 1024) return three_digits(bytes / (1024.0 * 1024)) + " MiB";
  return three_digits(bytes / (1024.0 * 1024 * 1024)) + " GiB";
}

std::string format_flops(double flops_per_second) {
  if (!std::isfinite(flops_per_second)) return "-";
  if (flops_per_second < 1e12) return three_digits(flops_per_second / 1e9) + " GFLOP/s";
  return three_digits(flops_per_second / 1e12) + " TFLOP/s";
}

std::string format_ratio(double ratio) {
  if (!std::isfinite(ratio)) return "-";
  return "x" + three_digits(ratio);
}

std::string format_bandwidth(double bytes_per_second) {
  if (!std::isfinite(bytes_per_second)) return "-";
  return three_digits(bytes_per_second / 1e9) + " GB/s";
}

void ResultTable::print_header(std::ostream& out) const {
  std::string line, rule;
  for (size_t i = 0; i < std::size(kColumns); ++i) {
    line += cell(i, kColumns[i].title);
    rule += std::string(kColumns[i].width, '-') + " ";
  }
  out << trim_right(line) << "\n" << trim_right(rule) << "\n";
}

void ResultTable::print_row(std::ostream& out, const CaseSpec& c, const CaseResult& r) const {
  std::string line = cell(0, c.preset.empty() ? "-" : c.preset) + cell(1, c.shape_label()) +
                     cell(2, c.feature_label());
  if (!r.plan || r.status == "error") {
    out << line << r.status << ": " << r.message << "\n";
    return;
  }
  const Plan& p = *r.plan;
  line += cell(3, to_string(p.path)) + cell(4, p.kernel);
  line += cell(5, p.head_dim_qk_bucket > 0
                      ? std::to_string(p.head_dim_qk_bucket) + "/" +
                            std::to_string(p.head_dim_v_bucket) + " x" + fixed(p.pad_ratio, 2)
                      : "-");
  line += cell(6, format_time(r.time_ms));
  const double seconds = r.time_ms * 1e-3;
  line += cell(7, c.bandwidth_bound() ? format_bandwidth(r.kv_bytes / seconds)
                                      : format_flops(r.flops / seconds));
  line += cell(8, r.checked ? scientific(r.max_abs_err) : "-");
  line += cell(9, format_bytes(static_cast<double>(p.workspace_bytes)));
  std::string speedup = "-";
  if (std::isfinite(r.speedup()))
    speedup = format_ratio(r.speedup()) + (r.unfused_status == "estimated" ? "*" : "");
  line += cell(10, speedup);
  if (!r.ok()) line += " " + r.status + ": " + r.message;
  out << trim_right(line) << "\n";
}

void ResultTable::print_notes(std::ostream& out, bool estimated_unfused) const {
  out << "\n"
         "rate       prefill: 2*B*Hq*(visible query-key pairs)*(Dqk+Dv) / time, so causal counts\n"
         "           the visible half and a window only its keys; decode: unique K/V bytes "
         "visible\n"
         "           to the queries / time (v inside k counted once)\n"
         "max err    max |out - ref| against the float64 reference on a sample: all of out when\n"
         "           small, else batch 0, up to 8 heads of kv group 0 and up to 8 query rows (the\n"
         "           last rows, which see every key under bottom-right causal masking)\n"
         "workspace  the plan's transient memory (workspace bytes)\n"
         "vs unfused time of a materializing attention on the same tensors / time of this\n"
         "           plan: CUDA, the library's unfused path (cuBLAS GEMMs + softmax); CPU, "
      << (sgemm_baseline_built()
              ? "OpenBLAS sgemm\n           (scores materialized per batch and head)\n"
              : "the float64\n           reference on one thread (built without OpenBLAS)\n");
  if (estimated_unfused)
    out << "*          CPU: the baseline was timed on a slice (batch 0, the first heads of kv\n"
           "           group 0, and fewer query rows when one head is too slow) and scaled to\n"
           "           the whole problem\n";
}

Progress::Progress(size_t total)
    : total_(total), tty_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()) {}

void Progress::start(size_t index, const CaseSpec& spec) {
  // The time left: the mean of the cases so far times the cases to come.
  std::string left;
  if (index > 0) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double seconds =
        elapsed / static_cast<double>(index) * static_cast<double>(total_ - index);
    left = seconds >= 60 ? fmt::format(", ~{} min {} s left", static_cast<int>(seconds) / 60,
                                       static_cast<int>(seconds) % 60)
                         : fmt::format(", ~{} s left", static_cast<int>(seconds + 0.5));
  }
  line_ = fmt::format("[{:>{}}/{}{}] {}{} ...", index + 1, std::to_string(total_).size(), total_,
                      left, spec.preset.empty() ? "" : spec.preset + " ", spec.shape_label());
  if (tty_)
    std::cerr << "\r\033[K" << line_ << std::flush;
  else
    std::cerr << line_ << std::flush;
}

void Progress::finish(const CaseResult& result) {
  const std::string tail = result.ok() ? " " + format_time(result.time_ms) : " " + result.status;
  if (tty_)
    std::cerr << tail << std::flush;
  else
    std::cerr << tail << "\n";
}

void Progress::done() {
  if (tty_) std::cerr << "\r\033[K" << std::flush;
}

void write_json(const std::string& path, const ReportHeader& header,
                const std::vector<CaseSpec>& specs, const std::vector<CaseResult>& results) {
  Json document;
  document["fsdpa_version"] = version();
  document["command"] = header.command;
  document["device"] = header.device;
  document["device_reason"] = header.device_reason;
  document["seed"] = std::to_string(header.seed);  // a string: exact beyond 2^53
  Json& cases = document["cases"] = Json::array();
  for (size_t i = 0; i < specs.size(); ++i) cases.push_back(case_json(specs[i], results[i]));
  write_json_file(path, document);
}

}  // namespace fsdpa::tool
