#pragma once

#include <colo/compat/files.h>

#include <string>
#include <vector>

namespace colo::testing {

// A fresh private directory for a test's files, removed with everything in it afterwards.
// colo::files rather than std::filesystem, which crashes against PyTorch's wheel (see
// colo/compat/files.h).
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix = "colo_test_") : path_(files::make_temp_directory(prefix)) {}
  ~TemporaryDirectory() {
    try {
      files::remove_all(path_);
    } catch (...) {  // a destructor must not throw; a left-over temporary directory is harmless
    }
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return files::join(path_, name); }
  std::string operator/(const std::string& name) const { return file(name); }
  std::vector<std::string> entries() const { return files::list_directory(path_); }

 private:
  std::string path_;
};

}  // namespace colo::testing
