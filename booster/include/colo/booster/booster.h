#pragma once

#include <colo/booster/boosted.h>
#include <colo/booster/checkpoint_io.h>
#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/training_state.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace colo {
namespace detail {
class BackgroundWriter;
}

// The facade a training program talks to. It boosts the user's objects through a plugin and
// routes backward, gradient accumulation, pipeline steps and checkpoints to it:
//
//   auto plugin = colo::PluginRegistry::global().create("torch_ddp", {{"precision", "bf16"}});
//   colo::Booster booster(plugin);
//   auto b = booster.boost(model, optimizer, criterion, loader, scheduler);
//   auto loss = b.criterion(b.model->forward(x), y);
//   booster.backward(loss, *b.optimizer); b.optimizer->step(); b.optimizer->zero_grad(); b.lr_scheduler->step();
class Booster {
 public:
  explicit Booster(std::shared_ptr<Plugin> plugin);

  // Know before you launch: what plugin `plugin` (a name or a .so path) with `options` would hold
  // on each rank of a world of inputs.world_size() for the model inputs.model describes (see
  // nn::summarize, nn::summarize_vision_transformer) — parameters, gradients, optimizer state,
  // activations (estimated), on the device or in host memory — without creating the plugin, a
  // process group or the model's state. train_vit --dry-run prints it.
  static MemoryPlan plan_memory(const std::string& plugin, const PluginOptions& options,
                                const MemoryPlanInputs& inputs);

  Plugin& plugin() { return *plugin_; }

  Boosted boost(std::shared_ptr<nn::LayerStack> model, std::shared_ptr<torch::optim::Optimizer> optimizer,
                Criterion criterion, std::shared_ptr<data::DataLoader> dataloader = nullptr,
                std::shared_ptr<optim::LRScheduler> lr_scheduler = nullptr);

  void backward(const torch::Tensor& loss, OptimizerWrapper& optimizer);
  NoSyncGuard no_sync(ModelWrapper& model, OptimizerWrapper& optimizer);
  PipelineResult execute_pipeline(const torch::Tensor& inputs, const torch::Tensor& targets, ModelWrapper& model,
                                  const Criterion& criterion, OptimizerWrapper& optimizer,
                                  const PipelineOptions& options = {});

  void save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options = {});
  void load_model(ModelWrapper& model, const std::string& dir);
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options = {});
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& dir);
  void save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir);
  void load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir);

  // A whole training state: model, optimizer (with loss scaler), scheduler, every rank's RNG
  // states and the progress (epoch, step, data position). load_state restores all of it and
  // returns the progress; training then continues exactly as if it had not stopped.
  // Collective. `dir`'s training_state.json, written last, marks the state complete.
  //
  // With options.async(): waits for the previous asynchronous save (throwing its error), gathers
  // what the ranks share and copies the state to host memory (pinned on CUDA) now, at the step
  // boundary, and returns; a background thread per rank writes the files while training goes on
  // (each rank's RNG file last), and rank 0's writes training_state.json once every rank's files
  // are in. A crash before then leaves a state load_state refuses, never a mix.
  // `when_complete` (may be empty) runs once this rank's part is written — on rank 0, once the
  // whole state is complete: after the call for a synchronous save, on the writer's thread for an
  // asynchronous one (CheckpointHook publishes the state there).
  void save_state(const Boosted& boosted, const TrainingProgress& progress, const std::string& dir,
                  const SaveOptions& options = {}, std::function<void()> when_complete = nullptr);
  TrainingProgress load_state(const Boosted& boosted, const std::string& dir);

  // Makes the first asynchronous save of `boosted` as quick as the later ones: gathers the state
  // as save_state(..., SaveOptions().async(true)) does and takes its host copies (pinned on CUDA),
  // then drops them without writing anything. LibTorch keeps freed pinned memory for reuse, so the
  // first save's copies find it allocated: allocating pinned memory is slow (ViT-L's 4.2 GB: a
  // 2.9 s stall for the first save against 0.11 s for the next ones, on an H200 host). Returns the
  // bytes of the host copies an asynchronous save takes. Collective, like save_state; call it on
  // every rank before training (CheckpointHook does for asynchronous saves). On CPU nothing is
  // kept (plain memory needs no reservation) but the bytes are counted all the same.
  int64_t reserve_async_save(const Boosted& boosted);

  // An asynchronous save's error, thrown once by the first of these after it happened (the
  // Trainer's CheckpointHook checks after every step and waits at the end of fit; the Booster's
  // destructor waits too, and prints an error nobody asked for). check_save does not block.
  void check_save();
  void wait_for_save();
  // No asynchronous save is being written: none was started, or it has finished (its error may
  // wait to be thrown). Does not block.
  bool save_finished() const;
  // This rank's asynchronous save has failed (its error not yet thrown). Does not block.
  bool save_failed() const;
  // Stops this rank's writer waiting for the other ranks' files, waits for it and drops its error:
  // for a rank that reports another rank's failure (CheckpointHook does, so that every rank stops
  // at the same step).
  void abandon_save();

 private:
  void write_state_async(const Boosted& boosted, const TrainingProgress& progress, const std::string& dir,
                         const SaveOptions& options, std::function<void()> when_complete);
  // The collective part of an asynchronous save: gathers the state and queues its writes, with
  // host copies, in `writes` (their bytes added to *copied_bytes when given). In booster.cpp.
  void queue_state_writes(const Boosted& boosted, const std::string& dir, const SaveOptions& options,
                          detail::DeferredWrites& writes, int64_t* copied_bytes = nullptr);

  std::shared_ptr<Plugin> plugin_;
  // Declared after the plugin: destroyed (joined) first.
  std::shared_ptr<detail::BackgroundWriter> writer_;
};

}  // namespace colo
