#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

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

// The delayed-scaling state of `operands` float8 operands of one format (a model's layer inputs
// and weights in e4m3, say): the amax of each of their last steps, and the scales their next casts
// multiply by (value · scale, saturated to ±fp8_max). A cast that scales by scale(i) records its
// operand's max|x| into current_amax(i) in the same pass (a max, so several casts of one operand in
// a step — microbatches, recomputation — share the slot); update() at the step's end turns every
// operand's history into its next scale and starts new slots, in a handful of kernels for all
// operands together. Everything stays on the tensors' device: no host sync.
//
// A non-finite amax (an inf or nan reached the operand) is not kept in the history: update()
// drops it, counts it in nonfinite_amaxes(), and keeps that operand's previous scale; the step's
// float8 values are non-finite themselves, so its loss is too, and the training's non-finite loss
// guard (or fp16's loss scaler) decides about the step. An amax of 0 (an all-zero operand) also
// keeps the scale.
class AmaxHistory {
 public:
  // `fp8_max`: the float8 format's largest finite value (448 for e4m3, 57344 for e5m2). Throws
  // std::invalid_argument naming each invalid option (history_length >= 1, margin >= 0, operands >= 1).
  AmaxHistory(DelayedScalingOptions options, double fp8_max, const torch::TensorOptions& device = {},
              int64_t operands = 1);

  const DelayedScalingOptions& options() const { return options_; }
  double fp8_max() const { return fp8_max_; }
  int64_t operands() const { return history_.size(1); }
  // Operand i's newest slot, a 0-d fp32 view into history(): casts write max(slot, max|x|) into it.
  torch::Tensor current_amax(int64_t operand = 0) const { return history_[0][operand]; }
  // Every operand's newest slot, [operands] (a view).
  torch::Tensor current_amaxes() const { return history_[0]; }
  // [history_length, operands] fp32, newest first.
  const torch::Tensor& history() const { return history_; }
  // [operands] fp32: fp8_max / (reduced amax · 2^margin), 1 until a finite positive amax was recorded.
  const torch::Tensor& scale() const { return scale_; }
  // Operand i's scale, a 0-d view that update() keeps current.
  torch::Tensor scale(int64_t operand) const { return scale_[operand]; }
  // [operands] fp32: 1 / scale(), the factors a float8 product (at::_scaled_mm) takes to undo the cast.
  torch::Tensor inverse_scale() const { return scale_.reciprocal(); }
  // [operands] int64: the non-finite amaxes update() dropped so far.
  const torch::Tensor& nonfinite_amaxes() const { return nonfinite_; }

  // Takes the newest amaxes into the scales and rolls the history one step (the new slots are 0).
  // `agree_over`: groups whose ranks hold the same operands (data parallelism: the same layers on
  // other samples; tensor parallelism: pieces of one layer's operands). The newest amaxes are
  // max-reduced over each first (non-finite ones as +inf, so that every rank drops them), so that
  // every rank takes the same scales, the ones one process with the whole batch would take.
  // Collective over those groups.
  void update(const std::vector<dist::ProcessGroup*>& agree_over = {});

  // {"history", "scale", "nonfinite_amaxes"} for checkpoints; load_state throws
  // std::invalid_argument naming a missing key, a history of another length or another number of
  // operands.
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
