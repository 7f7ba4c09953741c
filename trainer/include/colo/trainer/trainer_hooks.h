#pragma once

// The hooks colo provides for colo::Trainer (trainer.h). Each does one job; a program picks the
// ones it wants. The list and its order are the same on every rank (several reduce over ranks).
#include <colo/booster/checkpoint_io.h>
#include <colo/trainer/state_directory.h>
#include <colo/trainer/trainer_hook.h>

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace colo::optim {
class LRScheduler;
}
namespace colo::detail {
class MetricsLog;
class NonFiniteLossGuard;
class ThroughputWindow;
}  // namespace colo::detail

namespace colo {

// "loss": in a training record, the mean micro-batch loss since the last log point over every
// rank that computes one (summed on the device, reduced only at the log point: no host sync per
// step); in an evaluation record, the mean cross-entropy of the test images.
class LossHook : public TrainerHook {
 public:
  void before_fit(Trainer& trainer) override;
  void after_step(Trainer& trainer, const StepResult& step) override;
  void before_evaluation(Trainer& trainer) override;
  void evaluation_batch(Trainer& trainer, const at::Tensor& logits, const at::Tensor& labels) override;
  void collect(Trainer& trainer, Record& record) override;

 private:
  at::Tensor window_;  // fp64 [sum, count] of training losses, on the device
  double eval_sum_ = 0, eval_count_ = 0;
};

// "top1": in an evaluation record, the fraction of test images classified correctly; in a
// training record, that of the training images since the last log point, where an image counts
// as correct when the argmax of its output is the argmax of its target (its label, or under
// mixup / CutMix the class with the largest share of its soft target: Colossal-AI's tutorial's
// MixupAccuracy compares with the unmixed label instead). Counted on the device, reduced at the
// log point.
class AccuracyHook : public TrainerHook {
 public:
  void before_fit(Trainer& trainer) override;
  void training_batch(Trainer& trainer, const at::Tensor& outputs, const at::Tensor& targets) override;
  void before_evaluation(Trainer& trainer) override;
  void evaluation_batch(Trainer& trainer, const at::Tensor& logits, const at::Tensor& labels) override;
  void collect(Trainer& trainer, Record& record) override;

 private:
  at::Tensor window_;  // fp64 [correct, counted] of training images, on the device
  double correct_ = 0, counted_ = 0;
};

// Steps a learning-rate schedule once per optimizer step, or with per_epoch once per finished
// epoch (the schedule's steps are epochs: Colossal-AI's ResNet tutorial), and logs "lr", the rate
// the last step used. Without a scheduler it drives the boosted one (Boosted::lr_scheduler).
class LRSchedulerHook : public TrainerHook {
 public:
  explicit LRSchedulerHook(std::shared_ptr<optim::LRScheduler> scheduler = nullptr, bool per_epoch = false);
  void before_fit(Trainer& trainer) override;
  void before_step(Trainer& trainer) override;
  void after_step(Trainer& trainer, const StepResult& step) override;
  void after_epoch(Trainer& trainer) override;
  void collect(Trainer& trainer, Record& record) override;

 private:
  std::shared_ptr<optim::LRScheduler> scheduler_;
  bool per_epoch_;
  double lr_ = 0;
};

struct ThroughputOptions {
  // Training FLOPs per image (forward + backward, e.g. 3x the forward's) and the peak FLOP/s of one
  // device: with both, records carry "mfu", the model FLOPs utilisation over the world.
  TORCH_ARG(double, flops_per_image) = 0.0;
  TORCH_ARG(double, peak_flops_per_device) = 0.0;
};

// "images_per_s": training images per second since the last log point, evaluations and saves left
// out; "data_wait_s": the longest any rank's loop waited for its loader (reduced over the ranks:
// collect is collective); "loader_images_per_cpu_s": the loader's own speed, only when its
// workers did work since the last record (else the field is absent, and the progress line shows
// "data - img/s/core"); "mfu" where ThroughputOptions allow. No field is ever NaN: a rate that
// cannot be measured is left out.
class ThroughputHook : public TrainerHook {
 public:
  explicit ThroughputHook(ThroughputOptions options = {});
  ~ThroughputHook() override;
  void before_fit(Trainer& trainer) override;
  void before_epoch(Trainer& trainer) override;
  void after_step(Trainer& trainer, const StepResult& step) override;
  void after_epoch(Trainer& trainer) override;
  void collect(Trainer& trainer, Record& record) override;

 private:
  ThroughputOptions options_;
  std::unique_ptr<detail::ThroughputWindow> window_;
  int64_t loader_images_ = 0;
  double loader_cpu_seconds_ = 0, loader_wait_seconds_ = 0;
};

// One JSON object per record and line in `path` (train_vit's --metrics), flushed line by line;
// written on rank 0 only. append: keep what the file holds (a resumed run); else truncate. The
// file is opened on construction (std::runtime_error naming it when it cannot be): build the
// hook on rank 0 only, or give the other ranks an empty path (no file).
class MetricsLogHook : public TrainerHook {
 public:
  MetricsLogHook(const std::string& path, bool append);
  ~MetricsLogHook() override;
  void report(Trainer& trainer, const Record& record) override;

 private:
  std::unique_ptr<detail::MetricsLog> log_;
};

// A file rank 0 writes beside a saved state: (name, contents). (A type name: TORCH_ARG's macro
// argument cannot hold the comma of a pair.)
using ExtraFiles = std::vector<std::pair<std::string, std::string>>;

struct CheckpointOptions {
  // Save every N optimizer steps (0: never by step count).
  TORCH_ARG(int64_t, every_steps) = 0;
  // Save at the end of every epoch (after its evaluation), and when fit() stops at max_steps.
  TORCH_ARG(bool, at_epoch_end) = true;
  // Files rank 0 writes beside the state (name, contents), e.g. what the run was.
  TORCH_ARG(ExtraFiles, extra_files) = {};
  // How the directory is opened: the state the run resumed from, whether it may replace another
  // run's states (StateDirectoryOptions).
  TORCH_ARG(StateDirectoryOptions, state_directory) = {};
  // Booster::save_state's options: async(true) copies the state to host memory at the step and
  // writes and publishes it in the background (SaveOptions::async).
  TORCH_ARG(SaveOptions, save) = {};
  // Before the first step, continue from the directory's latest complete state when it has one
  // (Booster::load_state, then Trainer::continue_from_step), else start fresh: one program and
  // command line serve the first start and every restart (colo-run --max-restarts). The state
  // must be this program's own run's: the hook cannot tell (train_vit checks its train_vit.json).
  // Needs the hook built with the directory's path (it opens the directory as resumed from there).
  TORCH_ARG(bool, resume_latest) = false;
};

// Saves the whole training state (Booster::save_state: model, optimizer, scheduler, random
// states, data position) into a StateDirectory at `dir` (dir/latest names the newest complete
// state; Booster::load_state and StateDirectory::resolve read it back). The directory is opened
// at start-up, in before_fit (rank 0 takes its lock and checks it; every rank fails at once when
// it cannot be used, with StateDirectoryError), not at the first save; the hook holds it, and so
// keeps other runs out of it, for as long as it lives.
class CheckpointHook : public TrainerHook {
 public:
  CheckpointHook(std::string dir, CheckpointOptions options = {});
  // A directory the program opened at its own start-up (on rank 0; the other ranks build the hook
  // with its path): problems surface before the model is even built.
  CheckpointHook(std::shared_ptr<StateDirectory> directory, CheckpointOptions options = {});
  void before_fit(Trainer& trainer) override;
  void end_step(Trainer& trainer) override;
  void end_epoch(Trainer& trainer) override;
  // An asynchronous save's error surfaces at the step after it happened, and fit() ends only once
  // the last save is published.
  void after_step(Trainer& trainer, const StepResult& step) override;
  void after_fit(Trainer& trainer) override;
  // Saves now. Collective.
  void save(Trainer& trainer);

 private:
  // Collective: rank 0 opens the directory (unless given), every rank learns the staging path.
  void open(Trainer& trainer);
  // Collective, while an asynchronous save is in flight: throws on every rank when any rank's
  // writer failed; with until_finished, returns only once every rank's writer has finished.
  void settle_async_save(Trainer& trainer, bool until_finished);

  std::string dir_;
  CheckpointOptions options_;
  std::shared_ptr<StateDirectory> directory_;  // rank 0's
  std::string staging_;                        // this run's, on every rank; empty until open
  int64_t last_saved_step_ = -1;
  int64_t writing_step_ = -1;  // the step of an asynchronous save in flight, or -1
};

// The training loss stopped being a number for too long: the run diverged (or its weights hold
// NaNs) and every further step is wasted. The message names the steps and what to change.
class NonFiniteLossError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NonFiniteLossOptions {
  // Consecutive optimizer steps with a NaN or infinite loss (on any rank) that end the run
  // (checked every that many steps, and at the last); 0: never.
  TORCH_ARG(int64_t, max_steps) = 10;
  // How the error names the limit and what it advises: a program names its own flags.
  TORCH_ARG(std::string, limit_name) = "max_nonfinite_steps";
  TORCH_ARG(std::string, advice) =
      "Lower the learning rate, lengthen the warm-up, clip gradients, or train in another precision";
};

// Stops the run with NonFiniteLossError when the loss is not finite for max_steps consecutive
// steps. The fp16 loss scaler's skipped steps have a finite loss and do not count.
class NonFiniteLossHook : public TrainerHook {
 public:
  explicit NonFiniteLossHook(NonFiniteLossOptions options = {});
  ~NonFiniteLossHook() override;
  void before_fit(Trainer& trainer) override;
  void after_step(Trainer& trainer, const StepResult& step) override;
  void end_step(Trainer& trainer) override;

 private:
  NonFiniteLossOptions options_;
  std::unique_ptr<detail::NonFiniteLossGuard> guard_;
};

struct EarlyStoppingOptions {
  // The record field watched, in records of `event` ("eval": evaluations; "train": log points).
  TORCH_ARG(std::string, metric) = "top1";
  TORCH_ARG(std::string, event) = "eval";
  // Whether a larger value is better (accuracy) or a smaller one (loss).
  TORCH_ARG(bool, higher_is_better) = true;
  // Records in a row without an improvement of more than min_delta over the best so far that
  // stop the run (at least 1).
  TORCH_ARG(int64_t, patience) = 3;
  TORCH_ARG(double, min_delta) = 0.0;
};

// Stops the run (Trainer::request_stop, no error) once the watched field, averaged over the
// ranks (so that every rank decides alike, whether or not the field was reduced already), has not
// improved for `patience` records in a row; a NaN counts as no improvement. A record of that
// event without the field is a std::invalid_argument naming the fields it has (AccuracyHook gives
// "top1", LossHook "loss"; every hook's collect runs before any report, so hook order is free).
class EarlyStoppingHook : public TrainerHook {
 public:
  explicit EarlyStoppingHook(EarlyStoppingOptions options = {});
  void before_fit(Trainer& trainer) override;
  void report(Trainer& trainer, const Record& record) override;
  // The best value seen in this fit() (NaN before the first record).
  double best() const { return best_; }

 private:
  EarlyStoppingOptions options_;
  double best_;
  int64_t records_without_improvement_ = 0;
};

}  // namespace colo
