#include "select/plan_cache.h"

#include <unistd.h>  // environ

#include <array>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "core/validate.h"

namespace fsdpa::detail {

namespace {

// Appends the bytes of scalars one by one, so that struct padding never
// reaches the key.
class KeyWriter {
 public:
  template <typename T>
  KeyWriter& operator<<(const T& value) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_class_v<T>);
    key_.append(reinterpret_cast<const char*>(&value), sizeof(value));
    return *this;
  }
  KeyWriter& text(const char* value) {
    // A NUL-terminated string, or one 0xff byte for unset (no text has it).
    if (value == nullptr) {
      key_.push_back('\xff');
    } else {
      key_.append(value);
      key_.push_back('\0');
    }
    return *this;
  }
  std::string take() { return std::move(key_); }

 private:
  std::string key_;
};

// Every field of Problem and Options: a field added there without a line
// here would serve one problem another's plan (the sizes below catch it).
static_assert(sizeof(Problem) == 104 && sizeof(Options) == 56,
              "Problem or Options changed: key every field in key_of");

// The values of kPlanEnvironment's variables (nullptr: unset), in its order,
// read in one pass over the environment, where getenv would make a pass per
// name: every attention() call keys on them, and a process's environment
// can hold hundreds of variables. The first definition of a name counts, as
// for getenv.
std::array<const char*, std::size(kPlanEnvironment)> plan_environment() {
  constexpr char kPrefix[] = "FSDPA_";
  constexpr size_t kPrefixLength = sizeof kPrefix - 1;
  std::array<const char*, std::size(kPlanEnvironment)> values{};
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* text = *entry;
    // The first byte rejects almost every other variable without a call.
    if (text[0] != kPrefix[0] || std::strncmp(text, kPrefix, kPrefixLength) != 0) continue;
    for (size_t i = 0; i < values.size(); ++i) {
      const size_t length = std::strlen(kPlanEnvironment[i]);
      if (values[i] == nullptr && std::strncmp(text, kPlanEnvironment[i], length) == 0 &&
          text[length] == '=')
        values[i] = text + length + 1;
    }
  }
  return values;
}

std::string key_of(const Problem& p, const Options& o) {
  KeyWriter w;
  w << p.batch << p.heads_q << p.heads_kv << p.len_q << p.len_k << p.head_dim_qk << p.head_dim_v
    << p.dtype << p.device.type << p.device.index << p.mask << p.mask_dtype << p.has_sinks
    << p.has_lse << p.row_alignment << p.matrices_blas_compatible << p.v_aliases_k << p.page_size
    << p.num_pages << p.has_seq_lens_k;
  w << o.scale.has_value() << o.scale.value_or(0.0) << o.causal << o.causal_align
    << o.window_left.has_value() << o.window_left.value_or(0) << o.policy.has_value()
    << o.policy.value_or(Policy::Auto) << o.allow_tf32 << o.softcap;
  for (const char* value : plan_environment()) w.text(value);
  return w.take();
}

}  // namespace

PlanCache::PlanCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

std::shared_ptr<const Plan> PlanCache::plan(const Problem& problem, const Options& options) {
  std::string key = key_of(problem, options);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      entries_.splice(entries_.begin(), entries_, found->second);
      return found->second->second;
    }
  }
  // Planned outside the lock: two threads missing on one key both plan it,
  // and the second insert finds the first one's entry.
  auto planned = std::make_shared<const Plan>(fsdpa::plan(problem, options));
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = index_.find(key);
  if (found != index_.end()) return found->second->second;
  entries_.emplace_front(key, planned);
  index_.emplace(std::move(key), entries_.begin());
  if (entries_.size() > capacity_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
  return planned;
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void PlanCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  entries_.clear();
}

PlanCache& plan_cache() {
  static PlanCache cache(kPlanCacheCapacity);
  return cache;
}

}  // namespace fsdpa::detail
