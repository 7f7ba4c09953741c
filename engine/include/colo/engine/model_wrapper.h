#pragma once

#include <colo/nn/layer_stack.h>

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo {

// A boosted model. LibTorch modules have no virtual forward, so the Booster hands back this
// wrapper: forward() does whatever the plugin needs around the user's layer stack (casting
// inputs to the compute dtype, gathering sharded parameters, ...).
class ModelWrapper {
 public:
  explicit ModelWrapper(std::shared_ptr<nn::LayerStack> module) : module_(std::move(module)) {}
  virtual ~ModelWrapper() = default;

  virtual torch::Tensor forward(const torch::Tensor& input) { return module_->forward(input); }
  torch::Tensor operator()(const torch::Tensor& input) { return forward(input); }

  // Data-parallel gradient synchronisation, a switch every plugin's wrappers answer to
  // (Booster::no_sync, and the pipeline's "reduce once, after the last backward"). Off, backward
  // passes accumulate gradients locally without communicating; the next synchronised pass, or
  // reduce_accumulated_gradients(), reduces everything accumulated. Wrappers that reduce nothing
  // ignore it.
  virtual void set_gradient_sync(bool enabled) { (void)enabled; }
  virtual bool gradient_sync() const { return true; }
  // Reduces, now and without a backward pass, the gradients accumulated with sync off, as a
  // synchronised backward pass would have. Collective over the data-parallel group.
  virtual void reduce_accumulated_gradients() {}

  virtual void train(bool on = true) { module_->train(on); }
  void eval() { train(false); }
  bool is_training() const { return module_->is_training(); }

  // The (possibly cast or sharded) user model this wrapper drives.
  nn::LayerStack& module() { return *module_; }

  // The whole model's state under canonical (timm) names, full shapes, fp32 where training
  // keeps fp32 masters: what checkpoints store. Collective where state is sharded: every rank calls.
  virtual std::vector<std::pair<std::string, torch::Tensor>> full_state() const;
  // Loads full state (canonical names, full shapes); each rank keeps what it holds. Throws with
  // every missing, unexpected or mis-shaped name listed.
  virtual void load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);
  // load_full_state's checks alone: throws as it does, changes nothing. Names, shapes and dtypes
  // only, so tensors without storage (meta) will do: Booster::load_state checks a checkpoint's
  // headers this way before it loads anything.
  virtual void check_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) const;

 protected:

  std::shared_ptr<nn::LayerStack> module_;
};

}  // namespace colo
