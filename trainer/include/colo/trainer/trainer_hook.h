#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace colo {

class Trainer;

// One entry of the training log: named numbers (and a few words), as a progress line and a
// metrics-log line show them. The Trainer starts a record at each log point ("event": "train")
// and after each evaluation ("event": "eval"); every hook adds its fields in collect(), then every
// hook sees the whole record in report(). Integers and reals are kept apart so that a JSON writer
// prints a step as 12, not 12.0; a NaN real means "no value" (JSON's null).
class Record {
 public:
  using Value = std::variant<int64_t, double, std::string>;

  void integer(const std::string& key, int64_t value) { values_[key] = value; }
  void real(const std::string& key, double value) { values_[key] = value; }
  void text(const std::string& key, const std::string& value) { values_[key] = value; }

  bool has(const std::string& key) const { return values_.count(key) > 0; }
  // The value of `key` as a number (an integer converted); NaN when absent or text.
  double number(const std::string& key) const;
  // The value of `key` as text; empty when absent or a number.
  std::string text_of(const std::string& key) const;
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  std::map<std::string, Value> values_;
};

// What one optimizer step produced, for the hooks' after_step.
struct StepResult {
  // The loss of each micro-batch (each accumulation step; under a pipeline, the step's mean loss),
  // detached, on the device: reading one syncs the host. Every rank holds it, every pipeline stage
  // too (execute_pipeline broadcasts the last stage's loss over the pipeline group).
  std::vector<at::Tensor> losses;
  int64_t images = 0;    // images in the step over all data-parallel ranks (the global batch)
  double seconds = 0.0;  // wall time of the step on this rank (queued device work not awaited)
};

// What a training loop does at its events, written once and plugged into any Trainer. Every
// method has an empty default: a hook overrides the events it needs. Every rank calls the same
// hooks in the same order at the same events, so a hook may run collectives over trainer.world()
// in any event (LossHook all-reduces its window in collect()); a hook that writes files or prints
// does so on trainer.master() only.
//
// The order of events in fit():
//   before_fit
//   per epoch: before_epoch,
//              per step: before_step, (the step: training_batch per batch), after_step,
//                        at a log point: collect, (the Trainer's progress line), report,
//                        end_step
//              after_epoch (the epoch's training is over),
//              when due: before_evaluation, evaluation_batch per batch, collect, (the line), report,
//              end_epoch (the epoch's records are out: save or stop here)
//   a final evaluation if the last step was not evaluated, after_fit.
class TrainerHook {
 public:
  virtual ~TrainerHook() = default;

  virtual void before_fit(Trainer&) {}
  virtual void before_epoch(Trainer&) {}
  virtual void before_step(Trainer&) {}
  virtual void after_step(Trainer&, const StepResult&) {}
  // Each training batch's outputs (detached; under a pipeline, the last stage's, fp32, of the whole
  // batch) and what the criterion took: labels int64 [B], or a mixing loader's soft targets
  // float [B, C]. Called before the optimizer step; read nothing on the host here (no sync).
  virtual void training_batch(Trainer&, const at::Tensor& /*outputs*/, const at::Tensor& /*targets*/) {}
  // After the step's record (if it had one) was reported: actions that save or stop the run go
  // here, so that the log shows the step they acted at.
  virtual void end_step(Trainer&) {}
  virtual void after_epoch(Trainer&) {}
  virtual void end_epoch(Trainer&) {}

  virtual void before_evaluation(Trainer&) {}
  // One evaluation batch on the rank that has the model's outputs (under a pipeline, the last
  // stage): logits in fp32 and their labels, the sampler's padding already cut off.
  virtual void evaluation_batch(Trainer&, const at::Tensor& /*logits*/, const at::Tensor& /*labels*/) {}

  // Add this hook's fields to `record` (record.text_of("event") says which: "train" or "eval").
  // Collective where the hook reduces over ranks: every rank calls it.
  virtual void collect(Trainer&, Record&) {}
  // The finished record: write it, act on it.
  virtual void report(Trainer&, const Record&) {}

  virtual void after_fit(Trainer&) {}
};

}  // namespace colo
