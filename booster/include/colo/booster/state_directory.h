#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace colo {

// The --save directory. Booster::save_state writes many files (model, optimizer, scheduler,
// one random state per rank, progress last), so a crash mid-save must not leave a mix of two
// states where --resume would look. Each save therefore goes to a fresh hidden staging
// directory; once every rank has finished, rank 0 renames it to step-<N> and then replaces the
// symlink `latest` with one pointing to it (a rename, atomic on POSIX), and removes the older
// states. At every moment `latest` names a complete state (or does not exist yet).
//
//   DIR/latest -> step-00000468
//   DIR/step-00000468/{model.safetensors, optimizer.*, lr_scheduler.json, rng_rank*.safetensors,
//                      training_state.json}
class StateDirectory {
 public:
  explicit StateDirectory(std::string root) : root_(std::move(root)) {}

  // Rank 0, before a save: an empty staging directory (left-overs of an interrupted save removed).
  std::string prepare_staging() const;
  std::string staging() const;
  // Rank 0, after every rank finished writing into staging(): publishes it as the state of
  // global step `step` and returns where it now lives.
  std::string publish(int64_t step) const;

  // The directory holding the training state that `path` (a --resume argument) designates: the
  // path itself when it holds training_state.json, else the target of path/latest. Throws
  // std::runtime_error saying what was expected when there is neither.
  static std::string resolve(const std::string& path);

 private:
  std::string root_;
};

}  // namespace colo
