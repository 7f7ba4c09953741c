// The hooks that measure: LossHook, AccuracyHook, LRSchedulerHook, ThroughputHook. Each adds its
// fields to the records; none prints or writes.
#include <colo/booster/booster.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/optim/lr_scheduler.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "reduce_over_ranks.h"
#include "throughput_window.h"

namespace colo {
namespace {

using detail::reduce_over_ranks;

bool is_eval(const Record& record) { return record.text_of("event") == "eval"; }

}  // namespace

void LossHook::before_fit(Trainer& trainer) {
  window_ = torch::zeros({2}, torch::TensorOptions().dtype(torch::kFloat64).device(trainer.device()));
}

void LossHook::after_step(Trainer&, const StepResult& step) {
  // Summed where it is computed: no host sync per step.
  for (const auto& loss : step.losses) {
    window_ += torch::stack({loss.to(torch::kFloat64).reshape({}), torch::ones({}, window_.options())});
  }
}

void LossHook::before_evaluation(Trainer&) { eval_sum_ = eval_count_ = 0; }

void LossHook::evaluation_batch(Trainer&, const at::Tensor& logits, const at::Tensor& labels) {
  eval_sum_ += torch::nn::functional::cross_entropy(
                   logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
  eval_count_ += static_cast<double>(labels.size(0));
}

void LossHook::collect(Trainer& trainer, Record& record) {
  if (is_eval(record)) {
    const auto sums = reduce_over_ranks(trainer, {eval_sum_, eval_count_});
    record.real("loss", sums[1] > 0 ? sums[0] / sums[1] : 0.0);
    return;
  }
  auto sums = window_.clone();
  if (trainer.world() && trainer.world()->size() > 1) trainer.world()->all_reduce(sums).wait();
  sums = sums.cpu();
  const double count = sums[1].item<double>();
  record.real("loss", count > 0 ? sums[0].item<double>() / count : NAN);
  window_.zero_();
}

void AccuracyHook::before_fit(Trainer& trainer) {
  window_ = torch::zeros({2}, torch::TensorOptions().dtype(torch::kFloat64).device(trainer.device()));
}

void AccuracyHook::training_batch(Trainer&, const at::Tensor& outputs, const at::Tensor& targets) {
  const auto truth = targets.is_floating_point() ? targets.argmax(1) : targets;
  const auto correct = outputs.argmax(1).eq(truth).sum().to(torch::kFloat64);
  window_ += torch::stack({correct, torch::full({}, static_cast<double>(targets.size(0)), window_.options())});
}

void AccuracyHook::before_evaluation(Trainer&) { correct_ = counted_ = 0; }

void AccuracyHook::evaluation_batch(Trainer&, const at::Tensor& logits, const at::Tensor& labels) {
  correct_ += static_cast<double>(logits.argmax(1).eq(labels).sum().item<int64_t>());
  counted_ += static_cast<double>(labels.size(0));
}

void AccuracyHook::collect(Trainer& trainer, Record& record) {
  if (!is_eval(record)) {
    auto sums = window_.clone();
    if (trainer.world() && trainer.world()->size() > 1) trainer.world()->all_reduce(sums).wait();
    sums = sums.cpu();
    window_.zero_();
    const double counted = sums[1].item<double>();
    if (counted > 0) record.real("top1", sums[0].item<double>() / counted);
    return;
  }
  const auto sums = reduce_over_ranks(trainer, {correct_, counted_});
  record.real("top1", sums[1] > 0 ? sums[0] / sums[1] : 0.0);
}

LRSchedulerHook::LRSchedulerHook(std::shared_ptr<optim::LRScheduler> scheduler, bool per_epoch)
    : scheduler_(std::move(scheduler)), per_epoch_(per_epoch) {}

void LRSchedulerHook::before_fit(Trainer& trainer) {
  if (!scheduler_) scheduler_ = trainer.boosted().lr_scheduler;
  if (!scheduler_) {
    throw std::invalid_argument(
        "LRSchedulerHook: no scheduler; give one to the hook or to Booster::boost (Boosted::lr_scheduler)");
  }
}

void LRSchedulerHook::before_step(Trainer&) { lr_ = scheduler_->last_lr().front(); }

void LRSchedulerHook::after_step(Trainer&, const StepResult&) {
  if (!per_epoch_) scheduler_->step();
}

// Only an epoch trained to its end counts: one stopped at max_steps resumes inside it, at its rate.
void LRSchedulerHook::after_epoch(Trainer& trainer) {
  if (per_epoch_ && trainer.global_step() == (trainer.epoch() + 1) * trainer.steps_per_epoch()) scheduler_->step();
}

void LRSchedulerHook::collect(Trainer&, Record& record) {
  if (!is_eval(record)) record.real("lr", lr_);
}

ThroughputHook::ThroughputHook(ThroughputOptions options) : options_(options) {}
ThroughputHook::~ThroughputHook() = default;

void ThroughputHook::before_fit(Trainer& trainer) {
  window_ = std::make_unique<detail::ThroughputWindow>(std::chrono::steady_clock::now());
  const auto stats = trainer.train_loader().stats();
  loader_images_ = stats.images;
  loader_cpu_seconds_ = stats.worker_cpu_seconds;
  loader_wait_seconds_ = stats.wait_seconds;
}

void ThroughputHook::before_epoch(Trainer&) { window_->resume(std::chrono::steady_clock::now()); }

void ThroughputHook::after_step(Trainer&, const StepResult& step) { window_->add_step(step.images); }

// The epoch's training is over: evaluations and saves do not count.
void ThroughputHook::after_epoch(Trainer&) { window_->pause(std::chrono::steady_clock::now()); }

void ThroughputHook::collect(Trainer& trainer, Record& record) {
  if (is_eval(record)) return;
  // A rate over no time is no number: the field is left out (never NaN, which JSON writes as null).
  const double images_per_s = window_->take(std::chrono::steady_clock::now());
  if (std::isfinite(images_per_s)) record.real("images_per_s", images_per_s);
  // The loader's own speed (images per CPU-second of its threads, this rank) and the time the loop
  // waited for it since the last record: the longest wait of any rank (one slow loader holds
  // every rank back at the next gradient reduction).
  const auto stats = trainer.train_loader().stats();
  if (stats.worker_cpu_seconds > loader_cpu_seconds_) {
    record.real("loader_images_per_cpu_s", static_cast<double>(stats.images - loader_images_) /
                                               (stats.worker_cpu_seconds - loader_cpu_seconds_));
  }
  record.real("data_wait_s",
              reduce_over_ranks(trainer, {stats.wait_seconds - loader_wait_seconds_}, dist::ReduceOp::kMax)[0]);
  loader_images_ = stats.images;
  loader_cpu_seconds_ = stats.worker_cpu_seconds;
  loader_wait_seconds_ = stats.wait_seconds;
  if (options_.flops_per_image() > 0 && options_.peak_flops_per_device() > 0 && std::isfinite(images_per_s)) {
    const double devices = trainer.world() ? static_cast<double>(trainer.world()->size()) : 1.0;
    record.real("mfu", images_per_s * options_.flops_per_image() / (options_.peak_flops_per_device() * devices));
  }
}

}  // namespace colo
