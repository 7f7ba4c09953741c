#pragma once

#include <colo/booster/boosted.h>
#include <colo/booster/checkpoint_io.h>
#include <colo/booster/plugin_options.h>

#include <c10/core/Device.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
class ProcessGroupMesh;
}  // namespace colo::dist

namespace colo {

// What a plugin is created with: the job's world group and this rank's device. The plugin adds
// its layout: the (dp, pp, tp) mesh over the world, built in its constructor (torch_ddp and
// low_level_zero: the world as data parallel).
struct PluginContext {
  PluginContext() = default;
  PluginContext(std::shared_ptr<dist::ProcessGroup> world_group, c10::Device rank_device)
      : world(std::move(world_group)), device(rank_device) {}

  std::shared_ptr<dist::ProcessGroup> world;
  c10::Device device = c10::Device(c10::kCPU);
  std::shared_ptr<const dist::ProcessGroupMesh> mesh;
};

// Restores gradient synchronisation when it goes out of scope (Booster::no_sync).
class NoSyncGuard {
 public:
  explicit NoSyncGuard(std::function<void()> restore) : restore_(std::move(restore)) {}
  NoSyncGuard(NoSyncGuard&& other) noexcept : restore_(std::move(other.restore_)) { other.restore_ = nullptr; }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;
  ~NoSyncGuard() {
    if (restore_) restore_();
  }

 private:
  std::function<void()> restore_;
};

// What one Booster::execute_pipeline call does and returns.
struct PipelineOptions {
  // The step's loss (the mean over the microbatches) on every rank.
  TORCH_ARG(bool, return_loss) = true;
  // The model's outputs (fp32, the microbatches concatenated) on the last stage.
  TORCH_ARG(bool, return_outputs) = false;
  // Forwards only, without autograd (evaluation); any batch size (microbatches may then differ
  // in size by one).
  TORCH_ARG(bool, forward_only) = false;
};

struct PipelineResult {
  torch::Tensor loss;     // 0-dim fp32 mean over the microbatches, on every rank (with return_loss)
  torch::Tensor outputs;  // concatenated outputs, when asked for, on the last stage (undefined elsewhere)
};

// A training strategy. Plugins are shared objects (libcolo_plugin_<name>.so) loaded by the
// PluginRegistry; each composes engines from core in a fixed order. A plugin parses its
// PluginOptions in its constructor (through an OptionReader) and throws std::invalid_argument
// listing every problem before touching any state.
class Plugin {
 public:
  explicit Plugin(PluginContext context) : context_(std::move(context)) {}
  virtual ~Plugin() = default;
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  virtual std::string name() const = 0;
  const PluginContext& context() const { return context_; }

  // Wraps the user's objects. Called once per model.
  virtual Boosted boost(BoostInputs inputs) = 0;

  virtual void backward(const torch::Tensor& loss, OptimizerWrapper& optimizer) { optimizer.backward(loss); }

  // Gradient accumulation: backward passes inside the guard's scope accumulate locally, without
  // communication; the first backward after it synchronises everything accumulated. The default
  // switches the wrappers' gradient sync off (ModelWrapper/OptimizerWrapper::set_gradient_sync)
  // and back on when the guard goes out of scope.
  virtual NoSyncGuard no_sync(ModelWrapper& model, OptimizerWrapper& optimizer);

  // How the Booster saves and loads this plugin's boosted state. The default, a CheckpointIO over
  // the world, has rank 0 write the whole state that full_state() gathers; a plugin whose ranks
  // hold different parts of the model (pipeline stages) returns its own, in which each part is
  // written by the rank that holds it.
  virtual CheckpointIO& checkpoint_io();

  virtual bool supports_pipeline() const { return false; }
  // One training step's forward and backward over micro-batches of (inputs, targets).
  virtual PipelineResult execute_pipeline(const torch::Tensor& inputs, const torch::Tensor& targets,
                                          ModelWrapper& model, const Criterion& criterion,
                                          OptimizerWrapper& optimizer, const PipelineOptions& options);

 protected:
  PluginContext context_;

 private:
  std::unique_ptr<CheckpointIO> checkpoint_io_;  // the default's, made on first use
};

}  // namespace colo
