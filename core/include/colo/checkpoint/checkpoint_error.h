#pragma once

#include <stdexcept>
#include <string>

namespace colo::checkpoint {

// A checkpoint file could not be read or written. The message names the file and what is
// wrong with it (a truncated data region, a bad header field, a failed rename, ...).
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace colo::checkpoint
