#include <colo/booster/state_directory.h>

#include <colo/files/files.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace colo {
namespace files = colo::files;

namespace {

constexpr const char* kStateFile = "training_state.json";  // Booster::save_state writes it last

// Makes renames inside `dir` durable: without it a crash can forget them even after they
// returned.
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot open {} to sync it: {}", dir, std::strerror(errno)));
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (status != 0) throw std::runtime_error(fmt::format("cannot sync {}: {}", dir, std::strerror(error)));
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", from, to, std::strerror(errno)));
  }
}

}  // namespace

std::string StateDirectory::staging() const { return files::join(root_, ".staging"); }

std::string StateDirectory::prepare_staging() const {
  files::create_directories(root_);
  files::remove_all(staging());
  files::create_directories(staging());
  return staging();
}

std::string StateDirectory::publish(int64_t step) const {
  if (!files::exists(files::join(staging(), kStateFile))) {
    throw std::runtime_error(
        fmt::format("{}: the saved state is incomplete (no {}); not publishing it", staging(), kStateFile));
  }
  // A state of the same step may exist already (a run resumed and saved again before stepping):
  // the new one gets a fresh name, so the published one stays intact until `latest` moves.
  std::string name = fmt::format("step-{:08}", step);
  for (int k = 2; files::exists(files::join(root_, name)); ++k) name = fmt::format("step-{:08}.{}", step, k);
  rename_path(staging(), files::join(root_, name));

  const std::string link = files::join(root_, "latest");
  const std::string temporary_link = files::join(root_, ".latest.tmp");
  files::remove(temporary_link);
  // Relative target: the directory may be moved.
  if (::symlink(name.c_str(), temporary_link.c_str()) != 0) {
    throw std::runtime_error(fmt::format("cannot create the symlink {}: {}", temporary_link, std::strerror(errno)));
  }
  rename_path(temporary_link, link);
  sync_directory(root_);

  for (const auto& other : files::list_directory(root_)) {
    if (other.rfind("step-", 0) == 0 && other != name) files::remove_all(files::join(root_, other));
  }
  return files::join(root_, name);
}

std::string StateDirectory::resolve(const std::string& path) {
  if (files::exists(files::join(path, kStateFile))) return path;
  const std::string latest = files::join(path, "latest");
  if (files::exists(files::join(latest, kStateFile))) return files::canonical_or_absolute(latest);
  if (!files::exists(path)) {
    throw std::runtime_error(fmt::format("--resume {}: no such directory; give a directory written by --save", path));
  }
  throw std::runtime_error(fmt::format(
      "--resume {}: holds no complete training state (neither {} nor latest/{}); give a directory written by "
      "train_vit --save, or one of its step-* directories",
      path, kStateFile, kStateFile));
}

}  // namespace colo
