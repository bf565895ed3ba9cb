// A bad command line: main() prints "fsdpa: <message>" and a pointer to
// --help on stderr, and exits with status 2.
#pragma once

#include <stdexcept>

namespace fsdpa::tool {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fsdpa::tool
