#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/grad_clip.h>
#include <colo/amp/master_weights.h>
#include <colo/amp/precision_policy.h>
#include <colo/engine/optimizer_wrapper.h>
#include <colo/nn/layer_stack.h>
#include <torch/arg.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo {

struct MixedPrecisionOptimizerOptions {
  TORCH_ARG(amp::PrecisionPolicy, policy) = amp::PrecisionPolicy(amp::Precision::kFp32);
  // Used when the policy needs a loss scaler (fp16).
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // Gradient clipping by global L2 norm; 0 disables it.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  // How this rank's gradient squares combine into the global norm (amp::GradNormPlan): sum_over
  // the groups whose ranks hold disjoint parts (pipeline stages, say); agree_over the ranks
  // holding the same gradients (data-parallel replicas after their all-reduce), over which the
  // overflow decision is taken together so that all skip a step or none does. agree_over is
  // consulted only with a loss scaler: without one, replicas compute the same norm anyway.
  TORCH_ARG(amp::GradNormPlan, grad_norm) = {};
};

// An OptimizerWrapper for plain and mixed-precision training, for any plugin whose ranks hold
// whole parameters (replicated or split by layer):
//
//   fp32          the user's optimizer steps the model's parameters directly
//   bf16 / fp16   the model's parameters are cast in place to the compute dtype (the working
//                 weights), fp32 master copies are made (amp::MasterWeights) and the
//                 optimizer's parameter groups are re-pointed at them BEFORE its first step, so
//                 its state is fp32 too; after each step the masters are rounded back into the
//                 working weights
//   fp16          a DynamicLossScaler: backward() scales the loss, step() unscales, and skips
//                 the step on overflow on every rank of grad_norm.agree_over alike (counted)
//
// A step: pre-step hook (e.g. "wait for gradient reduction") -> gradients to the masters ->
// unscale and clip in one pass (amp::unscale_and_clip semantics; only when scaling or clipping)
// -> optimizer step (unless skipped) -> masters to working weights.
//
// State is saved under the model's canonical parameter names (LayerStack::
// canonical_named_parameters), so that it loads under any other plugin or layout.
class MixedPrecisionOptimizer : public OptimizerWrapper {
 public:
  // `optimizer` must have been built over (some of) `model`'s parameters, already on their
  // device. With master weights, every floating parameter of the model is cast to the compute
  // dtype here; any optimizer state already present is carried over to the masters. Throws
  // std::invalid_argument for an optimizer parameter that is not a model parameter.
  MixedPrecisionOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<nn::LayerStack> model,
                          MixedPrecisionOptimizerOptions options = {});

  // Runs before every step (every rank calls step()).
  void set_pre_step_hook(std::function<void()> hook) { pre_step_hook_ = std::move(hook); }

  bool step() override;
  // Zeroes the working gradients in place (gradients that are bucket views stay views).
  void zero_grad() override;
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  // Tensors: "<param>.<key>" for each key of colo::optim::get_param_state (exp_avg, exp_avg_sq,
  // step, ...), and "master.<param>" (fp32) when there are master weights. Scalars: "lr.<group>"
  // and, with a loss scaler, "loss_scaler.<key>" (scale, growth_tracker, hysteresis_left,
  // skipped_steps).
  FullState full_state() const override;
  // The reverse. Validates everything first and throws std::invalid_argument listing every
  // unknown, missing or mis-shaped entry before changing anything. Master weights and loss
  // scaler state may be absent altogether (a checkpoint of another precision): the current
  // ones are then kept; partly present, the missing entries are errors.
  void load_full_state(const FullState& state) override;

  const amp::PrecisionPolicy& policy() const { return options_.policy(); }
  // Null unless the policy needs one (fp16).
  // Null unless the policy keeps fp32 masters.
  const std::shared_ptr<amp::MasterWeights>& master_weights() const { return masters_; }
  // The model parameters the optimizer updates, under their canonical names, in the
  // optimizer's order: the working tensors and the ones stepped (masters, or the same tensors).
  const std::vector<std::string>& param_names() const { return names_; }
  const std::vector<torch::Tensor>& working_params() const { return working_; }

 private:
  // step()'s work before add_after_step's.
  bool take_step();
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<nn::LayerStack> model_;
  MixedPrecisionOptimizerOptions options_;
  std::shared_ptr<amp::MasterWeights> masters_;
  std::function<void()> pre_step_hook_;
  // Per optimizer parameter (optimizer order): canonical name, working and stepped tensor.
  std::vector<std::string> names_;
  std::vector<torch::Tensor> working_;
  std::vector<torch::Tensor> stepped_;
  // Per stepped parameter: the distinct pieces the tp group holds of it (1: whole; the model's cuts).
  std::vector<int64_t> tp_pieces_;
  // Every parameter of the model (canonical order): zero_grad clears them all, and masters
  // are saved for all of them.
  std::vector<std::string> model_names_;
  std::vector<torch::Tensor> model_params_;
};

}  // namespace colo
