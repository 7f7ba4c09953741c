#pragma once

#include <stdexcept>

namespace colo::data {

// A data set's files are missing or malformed. The message names the file, what is wrong with
// it (bad magic number, truncated, corrupt gzip, …) and what to do about it.
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace colo::data
