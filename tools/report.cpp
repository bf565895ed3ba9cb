#include "report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace fsdpa::tool {

namespace {

std::string fixed(double value, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << value;
  return o.str();
}

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
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1e", value);
  return buffer;
}

// The text padded to `width`, then one space.
std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ') + " ";
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : std::string(width - s.size(), ' ') + s + " ";
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

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", u);
      out += buffer;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

std::string json_int(int64_t value) { return std::to_string(value); }
std::string json_bool(bool value) { return value ? "true" : "false"; }

class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& raw) {
    body_ += (body_.empty() ? "" : ", ") + json_string(key) + ": " + raw;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

std::string case_json(const CaseSpec& c, const CaseResult& r) {
  JsonObject o;
  o.add("preset", json_string(c.preset))
      .add("kind", json_string(c.kind))
      .add("case", json_string(c.shape_label()))
      .add("features", json_string(c.feature_label()))
      .add("batch", json_int(c.batch))
      .add("heads_q", json_int(c.heads_q))
      .add("heads_kv", json_int(c.heads_kv))
      .add("len_q", json_int(c.len_q))
      .add("len_k", json_int(c.len_k))
      .add("head_dim_qk", json_int(c.head_dim_qk))
      .add("head_dim_v", json_int(c.head_dim_v))
      .add("dtype", json_string(to_string(c.dtype)))
      .add("device", json_string(std::string(to_string(c.device.type)) + ":" +
                                 std::to_string(c.device.index)))
      .add("causal", c.options.causal ? json_string(c.options.causal_align == CausalAlign::TopLeft
                                                        ? "top-left"
                                                        : "bottom-right")
                                      : "false")
      .add("window_left", c.options.window_left ? json_int(*c.options.window_left) : "null")
      .add("softcap", json_number(c.options.softcap))
      .add("mask", json_string(c.mask == MaskKind::None       ? "none"
                               : c.mask == MaskKind::Additive ? "additive"
                                                              : "boolean"))
      .add("sinks", json_bool(c.sinks))
      .add("lse", json_bool(c.lse))
      .add("v_aliases_k", json_bool(c.v_aliases_k))
      .add("status", json_string(r.status))
      .add("message", json_string(r.message));
  if (r.plan) {
    const Plan& p = *r.plan;
    o.add("policy", json_string(to_string(p.policy)))
        .add("backend", json_string(to_string(p.backend)))
        .add("path", json_string(to_string(p.path)))
        .add("kernel", json_string(p.kernel))
        .add("bucket_qk", json_int(p.head_dim_qk_bucket))
        .add("bucket_v", json_int(p.head_dim_v_bucket))
        .add("pad_ratio", json_number(p.pad_ratio))
        .add("tile_q", json_int(p.tile_q))
        .add("tile_k", json_int(p.tile_k))
        .add("kv_splits", json_int(p.num_kv_splits))
        .add("threads", json_int(p.num_threads))
        .add("workspace_bytes", json_int(static_cast<int64_t>(p.workspace_bytes)))
        .add("fallback_reason", json_string(p.fallback_reason));
  }
  o.add("time_ms", json_number(r.time_ms))
      .add("runs", json_int(r.runs))
      .add("warmup", json_int(r.warmup))
      .add("flops", json_number(r.flops))
      .add("tflops", json_number(r.tflops()))
      .add("kv_bytes", json_number(r.kv_bytes))
      .add("kv_gbps", json_number(r.gbps()))
      .add("checked", json_bool(r.checked))
      .add("check_sample", json_string(r.sample))
      .add("max_abs_err", json_number(r.max_abs_err))
      .add("rel_err", json_number(r.rel_err))
      .add("lse_max_abs_err", json_number(r.lse_max_abs_err))
      .add("tolerance", json_number(r.tolerance))
      .add("unfused_status", json_string(r.unfused_status))
      .add("unfused_ms", json_number(r.unfused_ms))
      .add("unfused_sample", json_string(r.unfused_sample))
      .add("unfused_workspace_bytes", json_int(static_cast<int64_t>(r.unfused_workspace_bytes)))
      .add("speedup_vs_unfused", json_number(r.speedup()));
  return o.str();
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
         "vs unfused time of Policy::Unfused on the same tensors / time of this plan\n";
  if (estimated_unfused)
    out << "*          CPU: the unfused path is the float64 reference on one thread; it was timed\n"
           "           on a slice (batch 0, the first heads of kv group 0, and fewer query rows\n"
           "           when one head is too slow) and scaled by the query-key pairs of the whole\n"
           "           problem (the reference's work is proportional to them)\n";
}

Progress::Progress(size_t total) : total_(total), tty_(isatty(fileno(stderr)) != 0) {}

void Progress::start(size_t index, const CaseSpec& spec) {
  std::ostringstream o;
  o << "[" << std::setw(static_cast<int>(std::to_string(total_).size())) << index + 1 << "/"
    << total_ << "] " << (spec.preset.empty() ? "" : spec.preset + " ") << spec.shape_label()
    << " ...";
  line_ = o.str();
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

void check_writable(const std::string& path) {
  std::ofstream file(path, std::ios::app);
  if (!file) throw Error("fsdpa: cannot open '" + path + "' for writing");
}

void write_json(const std::string& path, const ReportHeader& header,
                const std::vector<CaseSpec>& specs, const std::vector<CaseResult>& results) {
  std::ofstream file(path);
  if (!file) throw Error("fsdpa: cannot open '" + path + "' for writing");
  const std::string seed = std::to_string(header.seed);  // a string: exact beyond 2^53
  file << "{\n  \"fsdpa_version\": " << json_string(version())
       << ",\n  \"command\": " << json_string(header.command)
       << ",\n  \"device\": " << json_string(header.device)
       << ",\n  \"device_reason\": " << json_string(header.device_reason)
       << ",\n  \"seed\": " << json_string(seed) << ",\n  \"cases\": [";
  for (size_t i = 0; i < specs.size(); ++i)
    file << (i ? ",\n    " : "\n    ") << case_json(specs[i], results[i]);
  file << "\n  ]\n}\n";
  file.close();
  if (!file) throw Error("fsdpa: cannot write '" + path + "'");
}

}  // namespace fsdpa::tool
