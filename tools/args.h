// Command-line flags of the `fsdpa` command: a strict parser (unknown flags,
// missing or malformed values are usage errors, exit status 2).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpa::tool {

// Bad command line: main() prints the message and the usage on stderr, exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Arity : uint8_t {
  Switch,         // --flag
  Value,          // --flag VALUE or --flag=VALUE
  OptionalValue,  // --flag, --flag VALUE (when VALUE does not start with '-') or --flag=VALUE
};

struct FlagSpec {
  std::string_view name;  // with the leading "--"
  Arity arity;
};

class Args {
 public:
  Args() = default;
  // Parses `tokens` (the words after the subcommand) against `allowed`.
  Args(std::span<const std::string> tokens, std::span<const FlagSpec> allowed);

  bool has(std::string_view name) const;
  // The flag's value; nullopt when absent or given without its optional value.
  std::optional<std::string> value(std::string_view name) const;

  int64_t integer(std::string_view name, int64_t fallback, int64_t min_value) const;
  std::optional<int64_t> optional_integer(std::string_view name, int64_t min_value) const;
  std::optional<double> optional_real(std::string_view name) const;
  std::vector<int64_t> integer_list(std::string_view name, int64_t min_value) const;
  std::vector<std::string> list(std::string_view name) const;
  // The value, which must be one of `choices`; `fallback` when absent.
  std::string choice(std::string_view name, std::string_view fallback,
                     std::span<const std::string_view> choices) const;

 private:
  std::map<std::string, std::optional<std::string>, std::less<>> values_;
};

int64_t parse_integer(std::string_view flag, std::string_view text, int64_t min_value);

}  // namespace fsdpa::tool
