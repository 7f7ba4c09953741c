#pragma once

#include <string>

namespace colo::detail {

// A shared object opened with dlopen and closed with dlclose: what the plugin registry needs of a
// plugin's file. Plain dl calls rather than Boost.DLL's loader, which goes through std::filesystem
// (colo builds it with BOOST_DLL_USE_STD_FS) and so through the unversioned copy of
// std::filesystem that PyTorch's wheel exports (colo/files/files.h says why that crashes).
class SharedLibrary {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL): a missing symbol fails here, not later. A path without a
  // '/' is taken in the current directory (as Boost.DLL did), never searched for on the loader's
  // path. Throws std::runtime_error with dlerror()'s text.
  explicit SharedLibrary(const std::string& path);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The address of the exported symbol `name`; nullptr when there is none.
  void* symbol(const char* name) const;

 private:
  void* handle_;
};

// The file of the shared object (or the program) whose code or data holds `address` (dladdr);
// throws std::runtime_error when no loaded object does.
std::string shared_object_containing(const void* address);

}  // namespace colo::detail
