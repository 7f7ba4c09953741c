#include "event_file.h"

#include <colo/trainer/tensorboard_hook.h>
#include <colo/files/files.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits.h>

#include "tensorboard_event.pb.h"
#include "tfrecord.h"

namespace colo::detail {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardEventFile::TensorBoardEventFile(const std::string& dir, const std::string& suffix) {
  if (files::exists(dir) && !files::is_directory(dir)) {
    throw TensorBoardError(fmt::format("TensorBoard log directory {}: this is a file, not a directory; name a "
                                       "directory (it is created if missing)",
                                       dir));
  }
  try {
    files::create_directories(dir);
  } catch (const std::exception& e) {
    throw TensorBoardError(fmt::format("TensorBoard log directory {}: {}", dir, e.what()));
  }
  const double wall_time = now_seconds();
  const std::string stem = fmt::format("events.out.tfevents.{:010d}.{}.{}", static_cast<int64_t>(wall_time),
                                       host_name(), static_cast<int64_t>(::getpid()));
  for (int n = 0; fd_ < 0; ++n) {
    path_ = files::join(dir, fmt::format("{}.{}{}", stem, n, suffix));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) {
      throw TensorBoardError(fmt::format("TensorBoard log directory {}: cannot create the event file {}: {}", dir,
                                         files::file_name(path_), std::strerror(errno)));
    }
  }
  tensorboard::proto::Event event;
  event.set_wall_time(wall_time);
  event.set_step(0);
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
}

TensorBoardEventFile::~TensorBoardEventFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardEventFile::write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                                         double wall_time) {
  tensorboard::proto::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    auto* entry = summary->add_value();
    entry->set_tag(tag);
    entry->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void TensorBoardEventFile::write_record(const std::string& payload) {
  const std::string record = tfrecord(payload);
  size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + written, record.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw TensorBoardError(fmt::format("cannot write the TensorBoard event file {}: {}", path_,
                                         n < 0 ? std::strerror(errno) : "nothing was written"));
    }
    written += static_cast<size_t>(n);
  }
}

}  // namespace colo::detail
