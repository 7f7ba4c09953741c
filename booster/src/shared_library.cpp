#include "shared_library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace colo::detail {

SharedLibrary::SharedLibrary(const std::string& path) {
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();  // clear an earlier error, so that the text below is this call's
  handle_ = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* error = dlerror();
    throw std::runtime_error(error != nullptr ? error : "dlopen failed for " + file);
  }
}

SharedLibrary::~SharedLibrary() { ::dlclose(handle_); }

void* SharedLibrary::symbol(const char* name) const { return ::dlsym(handle_, name); }

std::string shared_object_containing(const void* address) {
  Dl_info info{};
  if (::dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
    throw std::runtime_error("dladdr found no shared object holding the plugin registry's code");
  }
  return info.dli_fname;
}

}  // namespace colo::detail
