#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

namespace colo {

namespace detail {
class RunLock;
}

// The directory cannot serve this run: another live run saves into it, it holds another run's
// states, or it cannot be created or written. The message names the directory and what to do.
class StateDirectoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StateDirectoryOptions {
  // The state this run resumed from (StateDirectory::resolve's answer), or empty. When it lies in
  // the directory, this run continues the one that saved it: that state is this run's to replace.
  TORCH_ARG(std::string, resumed_from) = "";
  // Take over a directory holding the states of another run (one that has ended: a live one holds
  // the lock). They are removed once this run has published a state of its own, not before: a run
  // that fails before its first save leaves them as they were.
  TORCH_ARG(bool, overwrite) = false;
  // How errors name the two ways out of a directory that holds another run's states: a program
  // names its own flags (train_vit: "--resume", "--overwrite").
  TORCH_ARG(std::string, resume_name) = "StateDirectoryOptions::resumed_from";
  TORCH_ARG(std::string, overwrite_name) = "StateDirectoryOptions::overwrite";
};

// The --save directory of one run. Booster::save_state writes many files (model, optimizer,
// scheduler, one random state per rank, progress last), so a crash mid-save must not leave a mix
// of two states where --resume would look. Each save therefore goes to this run's own hidden
// staging directory; once every rank has finished, rank 0 renames it to step-<N> and then
// replaces the symlink `latest` with one pointing to it (a rename, atomic on POSIX), and removes
// the older states that are this run's. At every moment `latest` names a complete state (or does
// not exist yet).
//
//   DIR/latest -> step-00000468
//   DIR/step-00000468/{model.safetensors, optimizer.*, lr_scheduler.json, rng_rank*.safetensors,
//                      training_state.json}
//   DIR/.lock                      who saves here (kept: see detail::RunLock)
//   DIR/.staging-<run token>/      the save in progress
//
// A run removes only states it owns: those it published, the state it resumed from when that lies
// in DIR, and with overwrite the states DIR held when it opened. It never removes another's.
//
// Only rank 0 opens the directory (the constructor): it creates DIR, takes the lock that keeps a
// second run out for as long as this object lives (released by the kernel when the process ends,
// however it ends), and refuses a directory that holds another run's states. Every problem is
// found here, at start-up, not at the first save. The other ranks only write into staging_path().
class StateDirectory {
 public:
  // Throws StateDirectoryError naming `root` and what to do.
  explicit StateDirectory(std::string root, StateDirectoryOptions options = {});
  ~StateDirectory();
  StateDirectory(const StateDirectory&) = delete;
  StateDirectory& operator=(const StateDirectory&) = delete;

  const std::string& root() const { return root_; }
  // A number naming this run's staging directory, different for every run: the other ranks learn
  // it from rank 0 (CheckpointHook reduces it over the ranks) and find staging_path(root, token).
  uint64_t token() const { return token_; }
  static std::string staging_path(const std::string& root, uint64_t token);
  std::string staging() const { return staging_path(root_, token_); }

  // Rank 0, before a save: an empty staging directory (what an interrupted save of this run left
  // there removed).
  std::string prepare_staging() const;
  // Rank 0, after every rank finished writing into staging(): publishes it as the state of
  // global step `step`, removes this run's older states, and returns where the new one lives.
  std::string publish(int64_t step);

  // The directory holding the training state that `path` (a --resume argument) designates: the
  // path itself when it holds training_state.json, else the target of path/latest. Throws
  // std::runtime_error saying what was expected when there is neither.
  static std::string resolve(const std::string& path);

 private:
  std::string root_;
  std::unique_ptr<detail::RunLock> lock_;
  uint64_t token_ = 0;
  std::set<std::string> owned_;  // names of states in root_ this run may remove
};

}  // namespace colo
