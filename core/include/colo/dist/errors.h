#pragma once

#include <stdexcept>
#include <string>

namespace colo::dist {

// A collective or point-to-point operation failed or timed out. The message names the
// operation, the group and its ranks, and what c10d reported (e.g. a peer's closed socket).
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace colo::dist
