#include <colo/env/variables.h>
#include <colo/files/files.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace colo::files {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int error) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(error));
}

bool stat_path(const std::string& path, struct stat& info) { return ::stat(path.c_str(), &info) == 0; }

}  // namespace

std::string join(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b.front() == '/')) return b;
  if (b.empty()) return a;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string parent_path(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const auto slash = trimmed.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : trimmed.substr(0, slash);
}

std::string file_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool exists(const std::string& path) {
  struct stat info {};
  return stat_path(path, info);
}

bool lexists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return stat_path(path, info) && S_ISREG(info.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return stat_path(path, info) && S_ISDIR(info.st_mode);
}

uint64_t file_size(const std::string& path) {
  struct stat info {};
  if (!stat_path(path, info)) fail("cannot stat", path, errno);
  return static_cast<uint64_t>(info.st_size);
}

void create_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  const std::string parent = parent_path(path);
  if (parent != path && parent != "." && parent != "/") create_directories(parent);
  if (::mkdir(path.c_str(), 0777) != 0 && !(errno == EEXIST && is_directory(path))) {
    fail("cannot create directory", path, errno);
  }
}

bool remove(const std::string& path) {
  if (::remove(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail("cannot remove", path, errno);
}

void remove_all(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return;
    fail("cannot stat", path, errno);
  }
  if (S_ISDIR(info.st_mode)) {
    for (const auto& name : list_directory(path)) remove_all(join(path, name));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) fail("cannot remove directory", path, errno);
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    fail("cannot remove", path, errno);
  }
}

std::vector<std::string> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) fail("cannot list directory", path, errno);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string absolute(const std::string& path) {
  if (!path.empty() && path.front() == '/') return path;
  char buffer[PATH_MAX];
  if (::getcwd(buffer, sizeof buffer) == nullptr) fail("cannot read the current directory for", path, errno);
  return path.empty() ? std::string(buffer) : join(buffer, path);
}

std::string canonical_or_absolute(const std::string& path) {
  char buffer[PATH_MAX];
  if (::realpath(path.c_str(), buffer) != nullptr) return buffer;
  return absolute(path);
}

std::string temp_directory() {
  return env::text("TMPDIR").value_or("/tmp");
}

std::string make_temp_directory(const std::string& prefix) {
  std::string pattern = join(temp_directory(), prefix + "XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    const int error = errno;
    throw std::runtime_error("cannot create a temporary directory " + pattern + ": " + std::strerror(error) +
                             " (set TMPDIR to a writable directory)");
  }
  return pattern;
}

TemporaryDirectory::~TemporaryDirectory() {
  try {
    remove_all(path_);
  } catch (...) {  // see the header: a destructor must not throw
  }
}

}  // namespace colo::files
