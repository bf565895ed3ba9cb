// JSON reports of the `fsdpa` command and the benchmarks: one writer, on
// nlohmann/json (keys in insertion order, 2-space indent).
#pragma once

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace fsdpa::tool {

using Json = nlohmann::ordered_json;

// A finite number, or null (NaN and infinities are no JSON numbers).
inline Json finite_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(); }

// Opens `path` for writing (creating it) and throws std::runtime_error naming
// it when it cannot be: call it before a run, so that a bad path fails at
// once instead of after the work.
inline void check_writable(const std::string& path) {
  std::ofstream file(path, std::ios::app);
  if (!file) throw std::runtime_error("cannot open '" + path + "' for writing");
}

// Writes the document (and a newline); throws std::runtime_error naming the
// path when it cannot.
inline void write_json_file(const std::string& path, const Json& document) {
  std::ofstream file(path);
  if (!file) throw std::runtime_error("cannot open '" + path + "' for writing");
  file << document.dump(2) << "\n";
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace fsdpa::tool
