#include "args.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace fsdpa::tool {

namespace {

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

Args::Args(std::span<const std::string> tokens, std::span<const FlagSpec> allowed) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    if (token.size() < 3 || token.rfind("--", 0) != 0)
      throw UsageError("unexpected argument " + quote(token));
    const size_t equals = token.find('=');
    const std::string name = token.substr(0, equals);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& candidate : allowed)
      if (candidate.name == name) spec = &candidate;
    if (spec == nullptr) throw UsageError("unknown flag " + quote(name));
    if (values_.count(name)) throw UsageError(name + " given more than once");

    std::optional<std::string> value;
    if (equals != std::string::npos) {
      if (spec->arity == Arity::Switch) throw UsageError(name + " takes no value");
      value = token.substr(equals + 1);
      if (value->empty()) throw UsageError(name + " needs a value");
    } else if (spec->arity == Arity::Value) {
      if (i + 1 >= tokens.size() || tokens[i + 1].rfind("--", 0) == 0)
        throw UsageError(name + " needs a value");
      value = tokens[++i];
    } else if (spec->arity == Arity::OptionalValue) {
      if (i + 1 < tokens.size() && !tokens[i + 1].empty() && tokens[i + 1][0] != '-')
        value = tokens[++i];
    }
    values_[name] = std::move(value);
  }
}

bool Args::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::optional<std::string> Args::value(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t parse_integer(std::string_view flag, std::string_view text, int64_t min_value) {
  int64_t result = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, result);
  if (ec == std::errc::result_out_of_range)
    throw UsageError(std::string(flag) + ": " + quote(text) + " is out of range");
  if (ec != std::errc() || ptr != end || text.empty())
    throw UsageError(std::string(flag) + ": " + quote(text) + " is not an integer");
  if (result < min_value)
    throw UsageError(std::string(flag) + ": must be >= " + std::to_string(min_value) + ", got " +
                     std::string(text));
  return result;
}

int64_t Args::integer(std::string_view name, int64_t fallback, int64_t min_value) const {
  return optional_integer(name, min_value).value_or(fallback);
}

std::optional<int64_t> Args::optional_integer(std::string_view name, int64_t min_value) const {
  std::optional<std::string> text = value(name);
  if (!text) return std::nullopt;
  return parse_integer(name, *text, min_value);
}

std::optional<double> Args::optional_real(std::string_view name) const {
  std::optional<std::string> text = value(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double result = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(result))
    throw UsageError(std::string(name) + ": " + quote(*text) + " is not a finite number");
  return result;
}

std::vector<std::string> Args::list(std::string_view name) const {
  std::vector<std::string> items;
  std::optional<std::string> text = value(name);
  if (!text) return items;
  size_t start = 0;
  while (true) {
    const size_t comma = text->find(',', start);
    std::string item = text->substr(start, comma - start);
    if (item.empty()) throw UsageError(std::string(name) + ": empty item in " + quote(*text));
    items.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<int64_t> Args::integer_list(std::string_view name, int64_t min_value) const {
  std::vector<int64_t> numbers;
  for (const std::string& item : list(name))
    numbers.push_back(parse_integer(name, item, min_value));
  return numbers;
}

std::string Args::choice(std::string_view name, std::string_view fallback,
                         std::span<const std::string_view> choices) const {
  std::optional<std::string> text = value(name);
  if (!text) return std::string(fallback);
  std::string allowed;
  for (std::string_view c : choices) {
    if (*text == c) return *text;
    allowed += (allowed.empty() ? "" : "|") + std::string(c);
  }
  throw UsageError(std::string(name) + ": " + quote(*text) + " is not one of " + allowed);
}

}  // namespace fsdpa::tool
