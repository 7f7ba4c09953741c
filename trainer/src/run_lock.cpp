#include "run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace colo::detail {
namespace {

// At most this much of a command line goes into the lock file (and so into an error message).
constexpr size_t kMaxCommandLine = 400;

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream raw;
  raw << in.rdbuf();
  std::string text = raw.str();
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& c : text) c = c == '\0' ? ' ' : c;
  if (text.size() > kMaxCommandLine) text = text.substr(0, kMaxCommandLine) + " ...";
  return text.empty() ? "(command line unknown)" : text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "(unknown host)";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return text;
}

// Takes the lock without waiting: 0, or the errno of the failure (EWOULDBLOCK-like when held).
int try_lock(int fd) {
#ifdef F_OFD_SETLK
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &lock) == 0) return 0;
  if (errno != EINVAL) return errno;  // EINVAL: the kernel or file system lacks OFD locks
#endif
  return ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[1024];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

}  // namespace

std::string describe_this_process() {
  return fmt::format("pid {} on host {}, since {}: {}", ::getpid(), host_name(), utc_now(), command_line());
}

RunLock::RunLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error(fmt::format("cannot create the lock file {}: {}", path, std::strerror(errno)));
  }
  if (const int error = try_lock(fd_); error != 0) {
    const bool held = error == EWOULDBLOCK || error == EAGAIN || error == EACCES;
    const std::string holder = held ? read_all(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (held) throw RunLockBusy(holder.empty() ? "a process that is starting (it has not written who it is yet)" : holder);
    throw std::runtime_error(fmt::format("cannot lock {}: {}", path, std::strerror(error)));
  }
  const std::string me = describe_this_process() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(fmt::format("cannot write the lock file {}: {}", path, std::strerror(error)));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace colo::detail
