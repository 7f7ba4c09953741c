#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace colo::amp {

// How a delayed-scaling float8 operand turns its amax history into a scale (issue 39; Transformer
// Engine's DelayedScaling recipe): the largest amax of the last `history_length` steps (kMax), or
// the newest one alone (kMostRecent).
enum class AmaxReduction { kMax, kMostRecent };

AmaxReduction parse_amax_reduction(const std::string& name);  // "max" | "most_recent"
const char* to_string(AmaxReduction reduction);

struct DelayedScalingOptions {
  TORCH_ARG(int64_t, history_length) = 16;
  TORCH_ARG(AmaxReduction, reduction) = AmaxReduction::kMax;
  // The scale is divided by 2^margin: headroom for an amax that grows between steps.
  TORCH_ARG(int64_t, margin) = 0;
};

// One float8 operand's delayed-scaling state: the amax of each of its last steps, and the scale
// its next casts multiply by (value · scale, saturated to ±fp8_max). A cast that scales by scale()
// records its operand's max|x| into current_amax() in the same pass (a max, so several casts of one
// operand in a step share the slot); update() at the step's end turns the history into the next
// step's scale and starts a new slot. Everything stays on the tensors' device: no host sync.
//
// A non-finite amax (an inf or nan reached the operand) is not kept in the history: update()
// drops it, counts it in nonfinite_amaxes(), and keeps the previous scale; the step's float8 values
// are non-finite themselves, so its loss is too, and the training's non-finite loss guard (or fp16's
// loss scaler) decides about the step. An amax of 0 (an all-zero operand) also keeps the scale.
class AmaxHistory {
 public:
  // `fp8_max`: the float8 format's largest finite value (448 for e4m3, 57344 for e5m2). Throws
  // std::invalid_argument naming each invalid option (history_length >= 1, margin >= 0).
  AmaxHistory(DelayedScalingOptions options, double fp8_max, const torch::TensorOptions& device = {});

  const DelayedScalingOptions& options() const { return options_; }
  double fp8_max() const { return fp8_max_; }
  // The newest slot, a 0-d fp32 view into history(): casts write max(slot, max|x|) into it.
  torch::Tensor current_amax() const { return history_[0]; }
  // [history_length] fp32, newest first.
  const torch::Tensor& history() const { return history_; }
  // 0-d fp32: fp8_max / (reduced amax · 2^margin), 1 until a finite positive amax was recorded.
  const torch::Tensor& scale() const { return scale_; }
  // 0-d fp32: 1 / scale(), the factor a float8 product (at::_scaled_mm) takes to undo the cast.
  torch::Tensor inverse_scale() const { return scale_.reciprocal(); }
  // 0-d int64: the non-finite amaxes update() dropped so far.
  const torch::Tensor& nonfinite_amaxes() const { return nonfinite_; }

  // Takes the newest amax into the scale and rolls the history one step (the new slot is 0).
  void update();

  // {"history", "scale", "nonfinite_amaxes"} for checkpoints; load_state throws
  // std::invalid_argument naming a missing key or a history of another length.
  torch::OrderedDict<std::string, torch::Tensor> state() const;
  void load_state(const torch::OrderedDict<std::string, torch::Tensor>& state);

 private:
  DelayedScalingOptions options_;
  double fp8_max_;
  torch::Tensor history_;
  torch::Tensor scale_;
  torch::Tensor nonfinite_;
};

}  // namespace colo::amp
