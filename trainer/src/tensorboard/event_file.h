#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace colo::detail {

// One TensorBoard event file, written as TensorBoard reads it: in `dir` (created if missing), a new
// file named events.out.tfevents.<unix time>.<host>.<pid>.<n><suffix> (n: the first number that
// names no file there yet, so no file is ever overwritten), its first event the format's version
// ("brain.Event:2"), then one event per write. Every event goes to the file as it is written (no
// buffer in this process): TensorBoard shows a running job's scalars, and a crash loses none.
// Errors throw TensorBoardError (colo/trainer/tensorboard_hook.h) naming the directory or file.
class TensorBoardEventFile {
 public:
  TensorBoardEventFile(const std::string& dir, const std::string& suffix);
  ~TensorBoardEventFile();
  TensorBoardEventFile(const TensorBoardEventFile&) = delete;
  TensorBoardEventFile& operator=(const TensorBoardEventFile&) = delete;

  const std::string& path() const { return path_; }
  // One event at `step` holding these (tag, value) scalars, stamped `wall_time` (seconds since the
  // Unix epoch).
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars, double wall_time);

 private:
  void write_record(const std::string& payload);

  std::string path_;
  int fd_ = -1;
};

}  // namespace colo::detail
