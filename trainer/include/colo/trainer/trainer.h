#pragma once

#include <colo/trainer/trainer_hook.h>

#include <c10/core/Device.h>
#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colo {

class Booster;
struct Boosted;
namespace data {
class DataLoader;
}
namespace dist {
class ProcessGroup;
}

struct TrainerOptions {
  // Micro-batches (loader batches) per optimizer step; the first N-1 run without gradient
  // synchronisation (under Booster::no_sync) unless sync_every_microbatch. A pipelined plugin splits each batch into microbatches itself, so there it
  // must be 1 (fit() says so otherwise).
  TORCH_ARG(int64_t, grad_accum) = 1;
  // Synchronise the gradients after every micro-batch instead (no no_sync): the sharding plugins
  // then reduce-scatter each micro-batch into their shards and keep no whole gradients between
  // them: the 6.45B ViT under gemini on two H200s peaked at 58.5 GiB instead of 69.6, at 5 % less
  // speed with 16 micro-batches (benchmarks/RESULTS.md, 2026-11-27).
  TORCH_ARG(bool, sync_every_microbatch) = false;
  // Optimizer steps between log points (collect/report, the progress line); the last step always
  // has one.
  TORCH_ARG(int64_t, log_every) = 50;
  // Stop after this many optimizer steps in all (counting those before `start_step`); 0: the end
  // of the last epoch. Schedules still span every epoch.
  TORCH_ARG(int64_t, max_steps) = 0;
  // The optimizer steps already taken (a resumed run: TrainingProgress::global_step).
  TORCH_ARG(int64_t, start_step) = 0;
  // Rank 0 prints a progress line at each log point and one after each evaluation.
  TORCH_ARG(bool, progress) = true;
  // The progress line also shows the loader's speed and the time spent waiting for it (worth a
  // look where images are decoded from files).
  TORCH_ARG(bool, show_loader_speed) = false;
  // Records' elapsed_s counts from here (a program's own start, to include its set-up).
  TORCH_ARG(std::chrono::steady_clock::time_point, started) = std::chrono::steady_clock::now();
};

// A duration as the progress line writes it: "45s", "2m05s", "1h03m".
std::string format_duration(double seconds);

// What fit() did.
struct FitResult {
  int64_t steps = 0;           // optimizer steps taken in this call
  int64_t global_step = 0;     // in all, with those before start_step
  double train_seconds = 0.0;  // time in training steps, not in evaluations or saves
  Record last_evaluation;      // empty without a test loader
  bool stopped = false;        // a hook asked to stop (Trainer::request_stop) before the planned end
  std::string stop_reason;     // what it said
};

// The training loop over a boosted model, for every plugin: a pipelined one's steps go through
// Booster::execute_pipeline, the others' through forward / Booster::backward with gradient
// accumulation under Booster::no_sync. Hooks (trainer_hook.h, trainer_hooks.h) do the rest —
// loss, accuracy, learning-rate schedule, throughput, metrics log, checkpoints, stopping:
//
//   colo::Trainer trainer(booster, boosted);
//   trainer.fit(*boosted.dataloader, epochs, &test_loader, 1,
//               {std::make_shared<colo::LRSchedulerHook>(), std::make_shared<colo::LossHook>(),
//                std::make_shared<colo::AccuracyHook>(), std::make_shared<colo::ThroughputHook>()});
//
// Evaluation shards the test loader over the data-parallel ranks itself: each test image counts
// once, the sampler's padding is left out.
// fit() is collective: every rank calls it with the same arguments and the same hooks.
class Trainer {
 public:
  Trainer(Booster& booster, Boosted& boosted, TrainerOptions options = {});

  // Trains up to `epochs` epochs of `train_loader` (continuing from its epoch and position, as a
  // resumed loader holds them), evaluating on `test_loader` (nullable) every `test_interval`
  // epochs and after the last step. Throws std::invalid_argument when the options do not fit the
  // plugin or the loader (saying what to change); exceptions from hooks end the run.
  FitResult fit(data::DataLoader& train_loader, int64_t epochs, data::DataLoader* test_loader = nullptr,
                int64_t test_interval = 1, std::vector<std::shared_ptr<TrainerHook>> hooks = {});

  // Evaluates on `test_loader` now and returns the record (printed as a progress line). The loader
  // is split over the data-parallel ranks here (DataLoader::reshard with the mesh's dp size and
  // rank, as boost splits the training loader), so any loader over the whole test set will do;
  // each test image counts once, the sampler's padding is left out, and a loader that drops
  // samples (drop_last) is refused. The hooks: `hooks` when given; else inside fit() (a hook
  // evaluating) fit()'s, outside it a LossHook and an AccuracyHook. They see before_evaluation,
  // evaluation_batch, collect and report, as in fit(). Collective.
  Record evaluate(data::DataLoader& test_loader, std::vector<std::shared_ptr<TrainerHook>> hooks = {});

  // Where training is, for hooks.
  Booster& booster() { return booster_; }
  Boosted& boosted() { return boosted_; }
  const TrainerOptions& options() const { return options_; }
  // The plugin's world (null: a job of one), this rank, and whether it speaks for the job.
  const std::shared_ptr<dist::ProcessGroup>& world() const { return world_; }
  int rank() const { return rank_; }
  bool master() const { return rank_ == 0; }
  c10::Device device() const { return device_; }
  // The loader fit() trains from (valid inside fit()).
  data::DataLoader& train_loader();
  int64_t epoch() const { return epoch_; }  // counted from 0
  int64_t epochs() const { return epochs_; }
  int64_t global_step() const { return global_step_; }
  int64_t stop_step() const { return stop_step_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t steps_this_run() const { return steps_this_run_; }
  double train_seconds() const { return train_seconds_; }
  double elapsed_seconds() const;
  // Whether the step just taken ends with a log point.
  bool log_due() const;
  // A line on rank 0's console (flushed: colo-run forwards whole lines).
  void print(const std::string& line) const;

  // Ends fit() early, without an error: training stops after the current step (after its
  // end_step hooks) or, asked during an epoch's evaluation or end_epoch, at the end of that
  // epoch; the epoch's after_epoch and end_epoch hooks run, then the final evaluation where the
  // last step was not evaluated, then after_fit; the train loader keeps its position (a state
  // saved then resumes there). Every rank must ask at the same step: decide from values reduced
  // over the ranks (EarlyStoppingHook averages its field over them first). The first reason is kept.
  void request_stop(const std::string& reason);
  // A hook that restored a saved state in before_fit (CheckpointHook with resume_latest) says at
  // which global step training continues; the train loader must hold the restored position (it
  // does when it is the boosted one). Throws std::logic_error outside before_fit.
  void continue_from_step(int64_t global_step);
  bool stop_requested() const { return stop_requested_; }

 private:
  StepResult run_step(data::DataLoader& loader);
  void log_step();
  bool epoch_finished(const data::DataLoader& loader) const;
  void print_record(const Record& record) const;
  void shard_test_loader(data::DataLoader& loader) const;
  Record run_evaluation(data::DataLoader& loader, bool in_fit);

  Booster& booster_;
  Boosted& boosted_;
  TrainerOptions options_;
  std::shared_ptr<dist::ProcessGroup> world_;
  int rank_ = 0;
  c10::Device device_ = c10::kCPU;
  bool pipelined_ = false;
  int64_t dp_size_ = 1;

  std::vector<std::shared_ptr<TrainerHook>> hooks_;
  data::DataLoader* train_loader_ = nullptr;
  int64_t epoch_ = 0, epochs_ = 0, global_step_ = 0, stop_step_ = 0, steps_per_epoch_ = 0, steps_this_run_ = 0;
  int64_t last_evaluated_step_ = -1;
  double train_seconds_ = 0.0;
  Record last_evaluation_;
  bool stop_requested_ = false;
  bool in_before_fit_ = false;
  std::string stop_reason_;
};

}  // namespace colo
