// The hooks that act on the run: MetricsLogHook writes the records, CheckpointHook saves the
// training state, NonFiniteLossHook stops a diverged run, EarlyStoppingHook one that stopped
// improving.
#include <colo/booster/booster.h>
#include <colo/trainer/state_directory.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/checkpoint/atomic_file.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/files/files.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include <variant>

#include "metrics_log.h"
#include "nonfinite_loss_guard.h"
#include "reduce_over_ranks.h"

namespace colo {

MetricsLogHook::MetricsLogHook(const std::string& path, bool append) {
  if (!path.empty()) log_ = std::make_unique<detail::MetricsLog>(path, append);
}
MetricsLogHook::~MetricsLogHook() = default;

void MetricsLogHook::report(Trainer& trainer, const Record& record) {
  if (!log_ || !trainer.master()) return;
  nlohmann::json line = nlohmann::json::object();
  // A NaN real becomes JSON's null (nlohmann writes non-finite numbers so).
  for (const auto& [key, value] : record.values()) std::visit([&, k = key](const auto& v) { line[k] = v; }, value);
  log_->write(line);
}

CheckpointHook::CheckpointHook(std::string dir, CheckpointOptions options)
    : dir_(std::move(dir)), options_(std::move(options)) {}

CheckpointHook::CheckpointHook(std::shared_ptr<StateDirectory> directory, CheckpointOptions options)
    : dir_(directory ? directory->root() : ""), options_(std::move(options)), directory_(std::move(directory)) {}

void CheckpointHook::before_fit(Trainer& trainer) {
  std::string latest;
  if (options_.resume_latest() && !dir_.empty() && files::lexists(files::join(dir_, "latest"))) {
    if (directory_) {
      throw std::invalid_argument(
          "CheckpointHook: resume_latest needs the directory's path, not an opened StateDirectory (it opens the "
          "directory as resumed from its latest state)");
    }
    latest = StateDirectory::resolve(dir_);
    options_.state_directory().resumed_from(latest);
  }
  open(trainer);
  if (options_.save().async()) {
    // The first save's pinned host memory, allocated now rather than in a step's stall.
    const int64_t bytes = trainer.booster().reserve_async_save(trainer.boosted());
    if (trainer.booster().plugin().context().device.is_cuda()) {
      trainer.print(fmt::format("asynchronous saves: {:.2f} GiB of pinned host memory reserved for the state's copies",
                                static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0)));
    }
  }
  if (latest.empty()) return;
  const TrainingProgress progress = trainer.booster().load_state(trainer.boosted(), latest);
  trainer.continue_from_step(progress.global_step);
  last_saved_step_ = progress.global_step;
  trainer.print(fmt::format("resumed from {}: step {}", latest, progress.global_step));
}

void CheckpointHook::open(Trainer& trainer) {
  if (dir_.empty() || !staging_.empty()) return;
  std::string error;
  if (trainer.master() && !directory_) {
    try {
      directory_ = std::make_shared<StateDirectory>(dir_, options_.state_directory());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Rank 0's staging token, or 0 when it could not open the directory: every rank learns which.
  const double token = trainer.master() && directory_ ? static_cast<double>(directory_->token()) : 0.0;
  const double agreed = detail::reduce_over_ranks(trainer, {token})[0];
  if (agreed == 0.0) {
    throw StateDirectoryError(trainer.master() ? error
                                               : fmt::format("{}: rank 0 cannot save there (its error says why)", dir_));
  }
  staging_ = StateDirectory::staging_path(dir_, static_cast<uint64_t>(agreed));
}

void CheckpointHook::end_step(Trainer& trainer) {
  const int64_t every = options_.every_steps();
  if (every > 0 && trainer.global_step() % every == 0) save(trainer);
}

void CheckpointHook::end_epoch(Trainer& trainer) {
  if (options_.at_epoch_end()) save(trainer);
}

void CheckpointHook::after_step(Trainer& trainer, const StepResult& /*step*/) { settle_async_save(trainer, false); }

void CheckpointHook::after_fit(Trainer& trainer) { settle_async_save(trainer, true); }

// Collective: every rank learns at the same step whether any rank's writer failed (so that none
// goes on alone into a collective, and rank 0 stops waiting for the failed rank's files), or
// whether all have finished (and the checks stop until the next asynchronous save).
void CheckpointHook::settle_async_save(Trainer& trainer, bool until_finished) {
  auto& booster = trainer.booster();
  const double ranks = trainer.world() ? static_cast<double>(trainer.world()->size()) : 1.0;
  while (writing_step_ >= 0) {
    const bool finished = booster.save_finished();  // first: a finished writer's error is already set
    const bool failed = finished && booster.save_failed();
    const auto counts = detail::reduce_over_ranks(trainer, {failed ? 1.0 : 0.0, finished ? 1.0 : 0.0});
    if (counts[0] > 0) {
      const int64_t step = writing_step_;
      writing_step_ = -1;
      std::string where;
      if (failed) {
        try {
          booster.wait_for_save();
        } catch (const std::exception& e) {
          where = fmt::format("on this rank: {}", e.what());
        }
      } else {
        booster.abandon_save();
        where = fmt::format("on {} other rank{} (its error says why)", counts[0], counts[0] == 1.0 ? "" : "s");
      }
      throw std::runtime_error(fmt::format("{}: the asynchronous save of step {} failed {}; {}/latest still names "
                                           "the last state saved before it",
                                           dir_, step, where, dir_));
    }
    if (counts[1] == ranks) {
      writing_step_ = -1;
      booster.wait_for_save();
      return;
    }
    if (!until_finished) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void CheckpointHook::save(Trainer& trainer) {
  if (dir_.empty() || trainer.global_step() == last_saved_step_) return;
  open(trainer);
  const auto start = std::chrono::steady_clock::now();
  const auto& world = trainer.world();
  const bool several = world && world->size() > 1;
  // An asynchronous save before this one still writes into staging: it ends (or throws) first.
  settle_async_save(trainer, true);
  if (trainer.master()) directory_->prepare_staging();
  if (several) world->barrier().wait();  // staging is empty before anyone writes
  TrainingProgress progress;
  progress.epoch = trainer.train_loader().epoch();
  progress.global_step = trainer.global_step();
  progress.data = trainer.train_loader().state();
  std::function<void()> publish;
  if (trainer.master()) {
    // Rank 0, once the state is complete (for an asynchronous save, on the writer's thread: it
    // captures no Trainer, which may be gone by then).
    publish = [directory = directory_, staging = staging_, extra = options_.extra_files(),
               step = trainer.global_step(), start, async = options_.save().async()] {
      for (const auto& [name, contents] : extra) checkpoint::atomic_write_file(files::join(staging, name), contents);
      const auto where = directory->publish(step);
      std::fputs(fmt::format("saved the training state of step {} to {} ({:.1f} s{})\n", step, where,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                             async ? ", in the background" : "")
                     .c_str(),
                 stdout);
      std::fflush(stdout);
    };
  }
  trainer.booster().save_state(trainer.boosted(), progress, staging_, options_.save(), std::move(publish));
  if (options_.save().async()) {
    writing_step_ = trainer.global_step();
    trainer.print(fmt::format("copied the training state of step {} to host memory ({:.3f} s); writing it in the "
                              "background",
                              trainer.global_step(),
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  }
  if (several) world->barrier().wait();
  last_saved_step_ = trainer.global_step();
}

NonFiniteLossHook::NonFiniteLossHook(NonFiniteLossOptions options) : options_(std::move(options)) {}
NonFiniteLossHook::~NonFiniteLossHook() = default;

void NonFiniteLossHook::before_fit(Trainer& trainer) {
  guard_ = std::make_unique<detail::NonFiniteLossGuard>(options_.max_steps(), trainer.device(), options_.limit_name(),
                                                        options_.advice());
}

void NonFiniteLossHook::after_step(Trainer& trainer, const StepResult& step) {
  for (const auto& loss : step.losses) guard_->observe(loss);
  guard_->end_step(trainer.global_step());
}

// After the step's record is out, so that the log shows the step the run stopped at.
void NonFiniteLossHook::end_step(Trainer& trainer) {
  if (guard_->due(trainer.global_step(), trainer.stop_step())) {
    guard_->check(trainer.global_step(), trainer.world(), trainer.boosted().optimizer->skipped_steps());
  }
}

EarlyStoppingHook::EarlyStoppingHook(EarlyStoppingOptions options)
    : options_(std::move(options)), best_(std::numeric_limits<double>::quiet_NaN()) {
  if (options_.patience() < 1) {
    throw std::invalid_argument(fmt::format("EarlyStoppingOptions::patience {}: must be at least 1 (records without "
                                            "improvement that stop the run)",
                                            options_.patience()));
  }
  if (!(options_.min_delta() >= 0.0)) {
    throw std::invalid_argument(
        fmt::format("EarlyStoppingOptions::min_delta {}: must be at least 0", options_.min_delta()));
  }
  if (options_.event() != "eval" && options_.event() != "train") {
    throw std::invalid_argument(
        fmt::format("EarlyStoppingOptions::event '{}': records are \"eval\" or \"train\"", options_.event()));
  }
}

void EarlyStoppingHook::before_fit(Trainer&) {
  best_ = std::numeric_limits<double>::quiet_NaN();
  records_without_improvement_ = 0;
}

void EarlyStoppingHook::report(Trainer& trainer, const Record& record) {
  if (record.text_of("event") != options_.event()) return;
  const auto& metric = options_.metric();
  if (!record.has(metric)) {
    std::vector<std::string> fields;
    for (const auto& [key, value] : record.values()) fields.push_back(key);
    throw std::invalid_argument(fmt::format(
        "EarlyStoppingHook watches '{}', which the {} records lack (they have: {}): add the hook that fills it "
        "(AccuracyHook: top1, LossHook: loss) or watch another field",
        metric, options_.event(), fmt::join(fields, ", ")));
  }
  const double ranks = trainer.world() ? static_cast<double>(trainer.world()->size()) : 1.0;
  const double value = detail::reduce_over_ranks(trainer, {record.number(metric)})[0] / ranks;
  const double sign = options_.higher_is_better() ? 1.0 : -1.0;
  if (std::isfinite(value) && (std::isnan(best_) || sign * (value - best_) > options_.min_delta())) {
    best_ = value;
    records_without_improvement_ = 0;
    return;
  }
  if (++records_without_improvement_ < options_.patience()) return;
  trainer.request_stop(fmt::format("{} has not improved on its best, {:.6g}, for {} {} record{} (patience {})", metric,
                                   best_, records_without_improvement_, options_.event(),
                                   records_without_improvement_ == 1 ? "" : "s", options_.patience()));
}

}  // namespace colo
