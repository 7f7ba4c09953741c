#include <colo/checkpoint/atomic_file.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <colo/checkpoint/checkpoint_error.h>

namespace colo::checkpoint {
namespace {

// POSIX calls, not std::filesystem: PyTorch's wheel exports its own copy of std::filesystem from
// an older libstdc++, and calls that bind to it crash when colo is built by a newer compiler.

std::string errno_text() { return std::strerror(errno); }

// fsync through a fresh descriptor: std::ofstream does not expose its own, and on Linux a
// sync through any descriptor of the inode flushes the file's data.
void fsync_path(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(path + ": cannot open " + what + " to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string error = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw CheckpointError(path + ": fsync of " + what + " failed: " + error);
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

void atomic_write_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const auto slash = path.rfind('/');
  const std::string dir = directory_of(path);
  const std::string filename = slash == std::string::npos ? path : path.substr(slash + 1);
  if (filename.empty() || filename == "." || filename == "..") {
    throw CheckpointError(path + ": not a file path (it names a directory)");
  }
  if (!is_directory(dir)) {
    throw CheckpointError(path + ": cannot write: directory " + dir + " does not exist (create it first)");
  }
  // Unique among threads and processes writing into the same directory.
  static std::atomic<unsigned> counter{0};
  const std::string temporary = dir + "/." + filename + ".tmp-" + std::to_string(::getpid()) + "-" +
                                std::to_string(counter.fetch_add(1));
  try {
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      if (!out) throw CheckpointError(path + ": cannot create temporary file " + temporary + ": " + errno_text());
      write(out);
      out.flush();
      if (!out) throw CheckpointError(path + ": writing temporary file " + temporary + " failed (disk full?)");
      out.close();
      if (!out) throw CheckpointError(path + ": closing temporary file " + temporary + " failed (disk full?)");
    }
    fsync_path(temporary, O_RDONLY, "the temporary file");
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      throw CheckpointError(path + ": cannot rename " + temporary + " over it: " + errno_text());
    }
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  fsync_path(dir, O_RDONLY | O_DIRECTORY, "its directory");
}

void atomic_write_file(const std::string& path, std::string_view bytes) {
  atomic_write_file(path, [bytes](std::ostream& out) { out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); });
}

bool remove_file_durably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    throw CheckpointError(path + ": cannot remove it: " + errno_text());
  }
  fsync_path(directory_of(path), O_RDONLY | O_DIRECTORY, "its directory");
  return true;
}

}  // namespace colo::checkpoint
