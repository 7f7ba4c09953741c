#include <colo/trainer/state_directory.h>

#include <colo/files/files.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "run_lock.h"

namespace colo {
namespace files = colo::files;

namespace {

constexpr const char* kStateFile = "training_state.json";  // Booster::save_state writes it last
constexpr const char* kLockFile = ".lock";
constexpr const char* kStagingPrefix = ".staging";  // also the name an older colo staged under

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

bool is_state_name(const std::string& name) { return name.rfind("step-", 0) == 0; }

// Creates `root` (and its parents); a file in the way, a missing permission or a read-only file
// system is an error that says so.
void create_root(const std::string& root) {
  if (files::lexists(root) && !files::is_directory(root)) {
    throw StateDirectoryError(fmt::format(
        "{}: a file is in the way (it is not a directory); remove it or save into another directory", root));
  }
  try {
    files::create_directories(root);
  } catch (const std::runtime_error& e) {
    throw StateDirectoryError(fmt::format("{}: cannot create the directory ({}); save into another directory", root,
                                          e.what()));
  }
}

// A random number naming a run's staging directory: 48 bits, so that it survives a reduction in
// fp64 exactly.
uint64_t fresh_token() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32 | device()) & ((uint64_t{1} << 48) - 1);
  return bits == 0 ? 1 : bits;
}

}  // namespace

StateDirectory::StateDirectory(std::string root, StateDirectoryOptions options) : root_(std::move(root)) {
  if (root_.empty()) throw StateDirectoryError("the state directory's name is empty");
  create_root(root_);
  if (files::exists(files::join(root_, kStateFile))) {
    throw StateDirectoryError(fmt::format(
        "{}: is itself a saved state (it holds {}); save into the directory that holds it, or into another one",
        root_, kStateFile));
  }
  try {
    lock_ = std::make_unique<detail::RunLock>(files::join(root_, kLockFile));
  } catch (const detail::RunLockBusy& holder) {
    throw StateDirectoryError(fmt::format(
        "{}: another run is saving into this directory ({}); two runs saving into one directory would replace "
        "each other's states: wait for that run to end, or save into another directory",
        root_, holder.what()));
  } catch (const std::runtime_error& e) {
    throw StateDirectoryError(
        fmt::format("{}: cannot write into this directory ({}); save into another directory", root_, e.what()));
  }

  const std::vector<std::string> entries = files::list_directory(root_);
  std::vector<std::string> states;
  for (const auto& name : entries) {
    if (is_state_name(name)) states.push_back(name);
  }
  const std::string resumed = options.resumed_from().empty() ? "" : files::canonical_or_absolute(options.resumed_from());
  const bool resumed_here = !resumed.empty() && files::parent_path(resumed) == files::canonical_or_absolute(root_);
  if (resumed_here) owned_.insert(files::file_name(resumed));
  if (options.overwrite()) owned_.insert(states.begin(), states.end());
  if (!states.empty() && !resumed_here && !options.overwrite()) {
    const size_t shown = std::min<size_t>(states.size(), 3);
    std::string list;
    for (size_t i = 0; i < shown; ++i) list += (i ? ", " : "") + states[i];
    throw StateDirectoryError(fmt::format(
        "{}: holds the saved state of another run ({}{}); this run would replace it. Continue that run ({} {}), "
        "save into another directory, or replace its states ({})",
        root_, list, states.size() > shown ? ", ..." : "", options.resume_name(), root_, options.overwrite_name()));
  }
  // What saves of ended runs left half-done (the lock says that no other run is live here).
  for (const auto& name : entries) {
    if (name.rfind(kStagingPrefix, 0) == 0) files::remove_all(files::join(root_, name));
  }
  token_ = fresh_token();
  // The probe: a directory can be made here (the lock file showed that a file can).
  try {
    prepare_staging();
  } catch (const std::runtime_error& e) {
    throw StateDirectoryError(
        fmt::format("{}: cannot write into this directory ({}); save into another directory", root_, e.what()));
  }
}

StateDirectory::~StateDirectory() {
  try {
    files::remove_all(staging());  // a save this run did not finish
  } catch (...) {
  }
}

std::string StateDirectory::staging_path(const std::string& root, uint64_t token) {
  return files::join(root, fmt::format("{}-{:012x}", kStagingPrefix, token));
}

std::string StateDirectory::prepare_staging() const {
  files::remove_all(staging());
  files::create_directories(staging());
  return staging();
}

std::string StateDirectory::publish(int64_t step) {
  if (!files::exists(files::join(staging(), kStateFile))) {
    throw std::runtime_error(
        fmt::format("{}: the saved state is incomplete (no {}); not publishing it", staging(), kStateFile));
  }
  // A state of the same step may exist already (a run resumed and saved again before stepping):
  // the new one gets a fresh name, so the published one stays intact until `latest` moves.
  std::string name = fmt::format("step-{:08}", step);
  for (int k = 2; files::lexists(files::join(root_, name)); ++k) name = fmt::format("step-{:08}.{}", step, k);
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

  for (const auto& old : owned_) {
    if (old != name) files::remove_all(files::join(root_, old));
  }
  owned_ = {name};
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
