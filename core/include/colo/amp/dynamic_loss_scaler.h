#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::amp {

struct LossScalerOptions {
  TORCH_ARG(double, initial_scale) = 65536.0;  // 2^16
  TORCH_ARG(double, min_scale) = 1.0;
  TORCH_ARG(double, max_scale) = 16777216.0;  // 2^24
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  // Consecutive overflow-free steps after which the scale grows.
  TORCH_ARG(int64_t, growth_interval) = 1000;
  // Overflowing steps tolerated (skipped without backing off) before the scale backs off.
  TORCH_ARG(int64_t, hysteresis) = 2;
};

// Dynamic loss scaling for fp16 training, with the semantics of Colossal-AI's and Megatron's
// DynamicGradScaler (DeepSpeed's with delayed_shift = hysteresis):
//
//   overflow (an inf/nan in any gradient, on any rank):
//       the optimizer step is skipped (skipped_steps() counts it), the growth tracker resets,
//       hysteresis_left() decreases by one, and once it is 0 the scale is multiplied by
//       backoff_factor (not below min_scale). hysteresis_left() stays 0 after that, so every
//       further overflow backs off at once, until the scale grows again.
//   no overflow:
//       the growth tracker counts the step; after growth_interval consecutive clean steps the
//       scale is multiplied by growth_factor (not above max_scale), the tracker restarts and
//       hysteresis_left() is refilled to `hysteresis`.
//
// Hysteresis thus absorbs isolated spikes after a stable period without shrinking the scale,
// while a run of overflows still backs off every step.
//
// Typical step (fp16 working weights with fp32 masters):
//   scaler.scale_loss(loss).backward();
//   masters.copy_grads_to_master();
//   auto clip = unscale_and_clip(master_grads, scaler.inv_scale(), max_norm, groups);
//   if (scaler.update(clip.found_inf)) { optimizer.step(); masters.copy_master_to_working(); }
//   optimizer.zero_grad(); model->zero_grad();
class DynamicLossScaler {
 public:
  // Throws std::invalid_argument listing every invalid option.
  explicit DynamicLossScaler(LossScalerOptions options = {});

  const LossScalerOptions& options() const { return options_; }
  double scale() const { return scale_; }
  double inv_scale() const { return 1.0 / scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_left() const { return hysteresis_left_; }
  int64_t skipped_steps() const { return skipped_steps_; }

  // loss * scale. Compute the loss in fp32 (cast the logits up before the criterion): the scale
  // itself (2^16) exceeds fp16's largest finite value.
  torch::Tensor scale_loss(const torch::Tensor& loss) const { return loss * scale_; }

  // True when any of `grads` holds an inf or nan on this rank or, when `group` is given, on any
  // rank of it (one all-reduce MAX of a flag). Undefined tensors are ignored. Use it when
  // gradients are not clipped; unscale_and_clip() reports the same thing as found_inf.
  bool has_overflow(const std::vector<torch::Tensor>& grads, dist::ProcessGroup* group = nullptr) const;

  // Records the outcome of one step and adjusts the scale (see above). Returns true when the
  // optimizer step should be taken, false when it must be skipped (overflow).
  bool update(bool found_inf);

  // {"scale", "growth_tracker", "hysteresis_left", "skipped_steps"}: plain numbers, for JSON
  // checkpoints. load_state_dict throws std::invalid_argument naming a missing or invalid key.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_;
  int64_t skipped_steps_ = 0;
};

}  // namespace colo::amp
