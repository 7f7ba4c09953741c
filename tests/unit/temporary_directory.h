#pragma once

#include <colo/files/files.h>

#include <string>

namespace colo::testing {

// A fresh private directory for a test's files, removed with everything in it afterwards
// (colo::files::TemporaryDirectory with a prefix that says a test made it).
class TemporaryDirectory : public files::TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix = "colo_test_") : files::TemporaryDirectory(prefix) {}
};

}  // namespace colo::testing
