// Output of the `fsdpa` command: the results table (stdout), progress
// (stderr) and the JSON report.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "harness.h"
#include "json_file.h"

namespace fsdpa::tool {

std::string format_time(double ms);
std::string format_bytes(double bytes);
std::string format_flops(double flops_per_second);      // "12.3 GFLOP/s", "456 TFLOP/s"
std::string format_bandwidth(double bytes_per_second);  // "812 GB/s"
std::string format_ratio(double ratio);                 // "x12.3"

// One row per case.
class ResultTable {
 public:
  void print_header(std::ostream& out) const;
  void print_row(std::ostream& out, const CaseSpec& spec, const CaseResult& result) const;
  // The notes that explain the columns; `estimated_unfused` adds the note
  // for the '*' (CPU unfused time from a slice).
  void print_notes(std::ostream& out, bool estimated_unfused) const;
};

// Progress on stderr: one line per case (its number, the estimated time
// left, the case), rewritten in place on a terminal.
class Progress {
 public:
  explicit Progress(size_t total);
  void start(size_t index, const CaseSpec& spec);
  void finish(const CaseResult& result);
  void done();

 private:
  size_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::string line_;
};

struct ReportHeader {
  std::string command;
  std::string device;
  std::string device_reason;
  uint64_t seed = 0;
};

// {"fsdpa_version", "command", "device", "device_reason", "seed", "cases": [...]}:
// one object per case, through json_file.h (check_writable() before the run).
// Throws std::runtime_error when the file cannot be written.
void write_json(const std::string& path, const ReportHeader& header,
                const std::vector<CaseSpec>& specs, const std::vector<CaseResult>& results);

}  // namespace fsdpa::tool
