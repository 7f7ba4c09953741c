#pragma once

#include <cstdint>
#include <string>
#include <vector>

// File-system helpers on POSIX calls, used instead of std::filesystem everywhere in colo.
//
// Why: PyTorch's wheel (the CUDA build's LibTorch) exports its own, older copy of
// std::filesystem from libtorch_cpu.so without symbol versions. Calls from code built by a newer
// g++ can bind to that copy instead of libstdc++'s, and mixing the two implementations crashes
// (std::filesystem::remove_all did, on the GPU machine). Plain paths as std::string and POSIX
// calls are immune to that, and are all colo needs.
//
// Boost.DLL, built with BOOST_DLL_USE_STD_FS, would go through std::filesystem too (path
// handling on every load; read_symlink and equivalent when a load fails), so the plugin registry
// does not load through it: it calls dlopen, dlsym and dladdr itself (booster/src/shared_library.h).
// Plugins still export their entry with BOOST_DLL_ALIAS, a declaration that calls nothing. The
// test no_std_filesystem (tests/no_std_filesystem.sh) checks every colo binary, in the CPU build
// and (labelled gpu) in the CUDA build, for calls into std::filesystem.
//
// These helpers need no LibTorch: they are their own small library (colo_files), compiled into
// libcolo_core and into colo-run, the launcher that must start on machines without LibTorch.
//
// Errors are thrown as std::runtime_error naming the path, the operation and errno's text.
namespace colo::files {

// "a" + "b" -> "a/b" (no doubled slash; an absolute `b` replaces `a`, as std::filesystem does).
std::string join(const std::string& a, const std::string& b);
template <typename... Rest>
std::string join(const std::string& a, const std::string& b, const Rest&... rest) {
  return join(join(a, b), rest...);
}
// The part before the last slash ("." when there is none), and the part after it.
std::string parent_path(const std::string& path);
std::string file_name(const std::string& path);

bool exists(const std::string& path);
// Whether there is an entry at `path` itself: a symbolic link counts even when it dangles.
bool lexists(const std::string& path);
bool is_regular_file(const std::string& path);
bool is_directory(const std::string& path);
// Size in bytes; throws when the file cannot be stat'ed.
uint64_t file_size(const std::string& path);

// mkdir -p. Succeeds when the directory exists already; throws when a component is a file.
void create_directories(const std::string& path);
// Removes a file or an empty directory; false when there was nothing to remove.
bool remove(const std::string& path);
// rm -rf (does not follow symbolic links); a missing path is not an error.
void remove_all(const std::string& path);
// Names of the entries of a directory (without "." and ".."), sorted; throws when unreadable.
std::vector<std::string> list_directory(const std::string& path);

// An absolute path (the current directory joined in front of a relative one), not resolved.
std::string absolute(const std::string& path);
// realpath() where the path exists, absolute() otherwise.
std::string canonical_or_absolute(const std::string& path);
// $TMPDIR or /tmp.
std::string temp_directory();
// A fresh, private directory under temp_directory() named <prefix>XXXXXX (mkdtemp).
std::string make_temp_directory(const std::string& prefix);

// make_temp_directory() that removes the directory, with everything in it, when it goes out of
// scope (errors then are ignored: a left-over temporary directory is harmless, a throwing
// destructor is not).
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix) : path_(make_temp_directory(prefix)) {}
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return join(path_, name); }
  std::string operator/(const std::string& name) const { return file(name); }
  std::vector<std::string> entries() const { return list_directory(path_); }

 private:
  std::string path_;
};

}  // namespace colo::files
