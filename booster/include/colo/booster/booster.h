#pragma once

#include <colo/booster/boosted.h>
#include <colo/booster/checkpoint_io.h>
#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/training_state.h>

#include <memory>
#include <string>

namespace colo {

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
  void save_state(const Boosted& boosted, const TrainingProgress& progress, const std::string& dir);
  TrainingProgress load_state(const Boosted& boosted, const std::string& dir);

 private:
  std::shared_ptr<Plugin> plugin_;
};

}  // namespace colo
