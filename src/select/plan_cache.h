// A bounded, thread-safe cache of plans: attention() plans a shape once and
// then only launches. The key is everything plan() reads: the Problem, the
// Options and the environment variables that steer planning.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

class PlanCache {
 public:
  explicit PlanCache(size_t capacity);

  // The cached plan for (problem, options, environment), planning and
  // inserting it on a miss (evicting the least recently used entry when
  // full). Errors of plan() propagate and nothing is cached for them.
  std::shared_ptr<const Plan> plan(const Problem& problem, const Options& options);

  size_t size() const;
  size_t capacity() const { return capacity_; }
  void clear();

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Plan>>;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// The process-wide cache attention() and fsdpa_attention() use.
inline constexpr size_t kPlanCacheCapacity = 256;
PlanCache& plan_cache();

}  // namespace fsdpa::detail
