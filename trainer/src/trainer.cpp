#include <colo/booster/booster.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/env/fault_injection.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <utility>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "progress_line.h"

namespace colo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

Trainer::Trainer(Booster& booster, Boosted& boosted, TrainerOptions options)
    : booster_(booster), boosted_(boosted), options_(std::move(options)) {
  const auto& context = booster_.plugin().context();
  world_ = context.world;
  rank_ = world_ ? world_->rank() : 0;
  device_ = context.device;
  pipelined_ = booster_.plugin().supports_pipeline();
  // Tensor- and pipeline-parallel peers share batches: images per step count data-parallel ranks.
  dp_size_ = boosted_.mesh ? boosted_.mesh->size(dist::MeshAxis::kDp) : 1;
}

data::DataLoader& Trainer::train_loader() {
  if (!train_loader_) throw std::logic_error("Trainer::train_loader(): only inside fit()");
  return *train_loader_;
}

double Trainer::elapsed_seconds() const { return seconds_since(options_.started()); }

bool Trainer::log_due() const {
  return global_step_ > 0 && (global_step_ % options_.log_every() == 0 || global_step_ == stop_step_);
}

void Trainer::print(const std::string& line) const {
  if (!master()) return;
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// An epoch ends when fewer batches remain than one optimizer step takes (their images are left
// out, like the sampler's remainder): a saved state is always at a step boundary.
bool Trainer::epoch_finished(const data::DataLoader& loader) const {
  const int64_t batches_per_step = pipelined_ ? 1 : options_.grad_accum();
  return loader.state().next_batch + batches_per_step > loader.num_batches();
}

StepResult Trainer::run_step(data::DataLoader& loader) {
  StepResult result;
  auto& model = *boosted_.model;
  auto& optimizer = *boosted_.optimizer;
  if (pipelined_) {
    // The plugin splits the batch into microbatches and runs its schedule; the last stage's loss
    // is broadcast over the pipeline, so every rank holds its replica's.
    auto batch = loader.next();
    result.images = batch->size() * dp_size_;
    const auto out = booster_.execute_pipeline(batch->images, batch->criterion_targets(), model, boosted_.criterion,
                                               optimizer, PipelineOptions().return_outputs(true));
    if (out.loss.defined()) result.losses.push_back(out.loss.detach().reshape({}));
    if (out.outputs.defined()) {  // the last stage
      for (auto& hook : hooks_) hook->training_batch(*this, out.outputs, batch->criterion_targets());
    }
  } else {
    const int64_t accum = options_.grad_accum();
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto batch = loader.next();
      result.images += batch->size() * dp_size_;
      auto forward_backward = [&] {
        const auto output = model.forward(batch->images);
        auto loss = boosted_.criterion(output, batch->criterion_targets());
        booster_.backward(accum > 1 ? loss / static_cast<double>(accum) : loss, optimizer);
        result.losses.push_back(loss.detach());
        for (auto& hook : hooks_) hook->training_batch(*this, output.detach(), batch->criterion_targets());
      };
      if (micro + 1 < accum && !options_.sync_every_microbatch()) {
        auto no_sync = booster_.no_sync(model, optimizer);
        forward_backward();
      } else {
        forward_backward();  // synchronises the gradients of all micro-batches
      }
    }
  }
  optimizer.step();
  optimizer.zero_grad();
  return result;
}

void Trainer::print_record(const Record& r) const {
  if (!options_.progress() || !master()) return;
  detail::ProgressPosition at;
  at.in_fit = train_loader_ != nullptr;
  at.epochs = epochs_;
  at.global_step = global_step_;
  at.stop_step = stop_step_;
  at.eta_seconds = train_seconds_ / static_cast<double>(std::max<int64_t>(1, steps_this_run_)) *
                   static_cast<double>(stop_step_ - global_step_);
  at.show_loader_speed = options_.show_loader_speed();
  print(detail::progress_line(r, at));
}

void Trainer::log_step() {
  Record record;
  record.text("event", "train");
  record.integer("epoch", epoch_ + 1);
  record.integer("step", global_step_);
  record.integer("skipped_steps", boosted_.optimizer->skipped_steps());
  // Plugins measure the gradient norm only when they clip.
  if (std::isfinite(boosted_.optimizer->last_grad_norm())) record.real("grad_norm", boosted_.optimizer->last_grad_norm());
  for (auto& hook : hooks_) hook->collect(*this, record);
  record.real("elapsed_s", elapsed_seconds());
  print_record(record);
  for (auto& hook : hooks_) hook->report(*this, record);
}

// The test loader split over the data-parallel ranks as the training loader is (boost does that
// one): each test image is evaluated once, by the replica whose shard holds it.
void Trainer::shard_test_loader(data::DataLoader& loader) const {
  if (loader.options().drop_last()) {
    throw std::invalid_argument(fmt::format(
        "Trainer::evaluate: the test loader drops samples (DataLoaderOptions::drop_last): {} of its {} images would "
        "not be evaluated; build it with drop_last(false) (the Trainer leaves the sampler's padding out itself)",
        loader.sampler().dataset_size() -
            loader.num_batches() * loader.options().batch_size() * loader.sampler().num_replicas(),
        loader.sampler().dataset_size()));
  }
  const int64_t dp_rank = boosted_.mesh ? boosted_.mesh->coordinate(dist::MeshAxis::kDp) : 0;
  if (loader.sampler().num_replicas() == dp_size_ && loader.sampler().rank() == dp_rank) return;
  try {
    loader.reshard(dp_size_, dp_rank);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format(
        "Trainer::evaluate: the test loader cannot be split over the {} data-parallel ranks: {}", dp_size_, e.what()));
  }
}

Record Trainer::evaluate(data::DataLoader& loader, std::vector<std::shared_ptr<TrainerHook>> hooks) {
  for (const auto& hook : hooks) {
    if (!hook) throw std::invalid_argument("Trainer::evaluate: a hook is null");
  }
  const bool in_fit = train_loader_ != nullptr;
  // Given hooks replace fit()'s for this evaluation; outside fit() without any, the loss and the
  // top-1 accuracy are measured (what the progress line shows).
  if (hooks.empty()) {
    hooks = in_fit ? hooks_
                   : std::vector<std::shared_ptr<TrainerHook>>{std::make_shared<LossHook>(),
                                                              std::make_shared<AccuracyHook>()};
  }
  std::swap(hooks_, hooks);
  struct Restore {
    std::vector<std::shared_ptr<TrainerHook>>& hooks;
    std::vector<std::shared_ptr<TrainerHook>>& saved;
    ~Restore() { std::swap(hooks, saved); }
  } restore{hooks_, hooks};
  return run_evaluation(loader, in_fit);
}

Record Trainer::run_evaluation(data::DataLoader& loader, bool in_fit) {
  const auto start = Clock::now();
  shard_test_loader(loader);
  auto& model = *boosted_.model;
  const bool was_training = model.is_training();
  model.eval();
  for (auto& hook : hooks_) hook->before_evaluation(*this);
  {
    torch::NoGradGuard no_grad;
    const auto& sampler = loader.sampler();
    const int64_t replicas = sampler.num_replicas();
    const int64_t shard = sampler.rank();
    const int64_t dataset_size = sampler.dataset_size();
    const int64_t batch_size = loader.options().batch_size();
    loader.reset();
    int64_t batch_index = 0;
    while (auto batch = loader.next()) {
      const int64_t n = batch->size();
      // Without shuffling, shard element i is sample shard + i * replicas; positions past the data
      // set's end are the wrap-around padding. Ranks that see the same shard (tensor-parallel
      // peers) count it alike, which scales every count by the same factor: ratios stay exact.
      const int64_t first = shard + batch_index * batch_size * replicas;
      const int64_t valid = std::clamp<int64_t>((dataset_size - first + replicas - 1) / replicas, 0, n);
      ++batch_index;
      if (valid == 0) continue;
      torch::Tensor outputs;
      if (pipelined_) {
        outputs = booster_
                      .execute_pipeline(batch->images, torch::Tensor(), model, boosted_.criterion, *boosted_.optimizer,
                                        PipelineOptions().forward_only(true).return_outputs(true).return_loss(false))
                      .outputs;
        if (!outputs.defined()) continue;  // not the last stage
      } else {
        outputs = model.forward(batch->images);
      }
      const auto logits = outputs.narrow(0, 0, valid).to(torch::kFloat);
      const auto labels = batch->labels.narrow(0, 0, valid);
      for (auto& hook : hooks_) hook->evaluation_batch(*this, logits, labels);
    }
    loader.reset();
  }
  model.train(was_training);

  Record record;
  record.text("event", "eval");
  if (in_fit) record.integer("epoch", epoch_ + 1);
  record.integer("step", global_step_);
  record.integer("images", loader.sampler().dataset_size());
  for (auto& hook : hooks_) hook->collect(*this, record);
  record.real("seconds", seconds_since(start));
  record.real("elapsed_s", elapsed_seconds());
  print_record(record);
  for (auto& hook : hooks_) hook->report(*this, record);
  if (in_fit) {
    last_evaluated_step_ = global_step_;
    last_evaluation_ = record;
  }
  return record;
}

void Trainer::request_stop(const std::string& reason) {
  if (stop_requested_) return;
  stop_requested_ = true;
  stop_reason_ = reason;
  if (options_.progress()) print(fmt::format("stopping at step {}: {}", global_step_, reason));
}

void Trainer::continue_from_step(int64_t global_step) {
  if (!in_before_fit_) throw std::logic_error("Trainer::continue_from_step: only a hook's before_fit may call it");
  global_step_ = global_step;
}

FitResult Trainer::fit(data::DataLoader& loader, int64_t epochs, data::DataLoader* test_loader, int64_t test_interval,
                       std::vector<std::shared_ptr<TrainerHook>> hooks) {
  if (epochs < 1) throw std::invalid_argument(fmt::format("Trainer::fit: epochs {}: must be at least 1", epochs));
  if (test_interval < 1) {
    throw std::invalid_argument(
        fmt::format("Trainer::fit: test_interval {}: must be at least 1 (epochs between evaluations)", test_interval));
  }
  if (options_.grad_accum() < 1 || options_.log_every() < 1 || options_.max_steps() < 0) {
    throw std::invalid_argument(fmt::format(
        "TrainerOptions: grad_accum {} and log_every {} must be at least 1, max_steps {} at least 0 (0: no limit)",
        options_.grad_accum(), options_.log_every(), options_.max_steps()));
  }
  if (pipelined_ && options_.grad_accum() > 1) {
    throw std::invalid_argument(fmt::format(
        "TrainerOptions::grad_accum {}: plugin {} runs a pipeline, which splits every batch into microbatches "
        "itself; set grad_accum 1 and the plugin's microbatch option instead",
        options_.grad_accum(), booster_.plugin().name()));
  }
  for (const auto& hook : hooks) {
    if (!hook) throw std::invalid_argument("Trainer::fit: a hook is null");
  }
  hooks_ = std::move(hooks);
  train_loader_ = &loader;
  epochs_ = epochs;
  steps_per_epoch_ = loader.num_batches() / (pipelined_ ? 1 : options_.grad_accum());
  if (steps_per_epoch_ == 0) {
    throw std::invalid_argument(fmt::format(
        "Trainer::fit: the training loader has {} batch{} per rank, fewer than one optimizer step takes ({}): "
        "lower the batch size or the accumulation steps",
        loader.num_batches(), loader.num_batches() == 1 ? "" : "es", options_.grad_accum()));
  }
  const int64_t total_steps = epochs * steps_per_epoch_;
  stop_step_ = options_.max_steps() > 0 ? std::min(options_.max_steps(), total_steps) : total_steps;
  global_step_ = options_.start_step();
  steps_this_run_ = 0;
  train_seconds_ = 0;
  last_evaluated_step_ = -1;
  last_evaluation_ = Record();
  stop_requested_ = false;
  stop_reason_.clear();
  // A tiny op queued after the last step: reading it waits for the device's queued work, which
  // belongs to training, not to the evaluation's time.
  auto device_sync = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));

  in_before_fit_ = true;
  for (auto& hook : hooks_) hook->before_fit(*this);
  in_before_fit_ = false;
  for (epoch_ = loader.epoch(); epoch_ < epochs && global_step_ < stop_step_ && !stop_requested_; ++epoch_) {
    if (loader.epoch() != epoch_) loader.set_epoch(epoch_);  // keeps a resumed position
    boosted_.model->train();
    for (auto& hook : hooks_) hook->before_epoch(*this);
    while (global_step_ < stop_step_ && !stop_requested_ && !epoch_finished(loader)) {
      env::inject_fault_at_step(rank_, global_step_);  // COLO_FAULT (tests of restarts); nothing when unset
      for (auto& hook : hooks_) hook->before_step(*this);
      const auto step_start = Clock::now();
      StepResult step = run_step(loader);
      ++global_step_;
      ++steps_this_run_;
      step.seconds = seconds_since(step_start);
      train_seconds_ += step.seconds;
      for (auto& hook : hooks_) hook->after_step(*this, step);
      if (log_due()) log_step();
      for (auto& hook : hooks_) hook->end_step(*this);
    }
    const bool finished = epoch_finished(loader);
    (void)device_sync.add_(0).sum().item<double>();
    for (auto& hook : hooks_) hook->after_epoch(*this);
    if (test_loader && ((epoch_ + 1) % test_interval == 0 || global_step_ == stop_step_)) evaluate(*test_loader);
    if (finished) loader.set_epoch(epoch_ + 1);  // a state saved now resumes at the next epoch
    for (auto& hook : hooks_) hook->end_epoch(*this);
  }
  if (test_loader && last_evaluated_step_ != global_step_) {
    epoch_ = std::max<int64_t>(0, loader.epoch() - 1);
    evaluate(*test_loader);
  }
  for (auto& hook : hooks_) hook->after_fit(*this);

  FitResult result;
  result.steps = steps_this_run_;
  result.global_step = global_step_;
  result.train_seconds = train_seconds_;
  result.last_evaluation = last_evaluation_;
  result.stopped = stop_requested_;
  result.stop_reason = stop_reason_;
  train_loader_ = nullptr;
  hooks_.clear();
  return result;
}

}  // namespace colo
