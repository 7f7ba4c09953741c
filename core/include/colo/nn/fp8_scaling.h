#pragma once

#include <colo/amp/amax_history.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::nn {

// How precision=fp8's products scale their float8 operands (issue 39).
//   current: each operand by float8_max / max|operand| of that very call (a max|x| pass before each
//     cast; nothing to keep). The default.
//   delayed: Transformer Engine's default recipe. Each operand by a scale from its amax history of
//     earlier steps (amp::AmaxHistory), so the cast records the operand's amax in the same pass it
//     writes float8: one pass per operand instead of two. The first step of a run (no history yet)
//     scales as `current` does and records its amaxes.
enum class Fp8Scaling { kCurrent, kDelayed };

Fp8Scaling parse_fp8_scaling(const std::string& name);  // "current" | "delayed"
const char* to_string(Fp8Scaling scaling);

struct Fp8Recipe {
  TORCH_ARG(Fp8Scaling, scaling) = Fp8Scaling::kCurrent;
  // Delayed scaling's history (length, reduction, margin); unused under current scaling.
  TORCH_ARG(amp::DelayedScalingOptions, delayed) = {};
};

class Fp8DelayedScaling;

// One float8 linear layer's delayed scales and amax slots: 0-d fp32 views into its model's
// Fp8DelayedScaling, which keeps them current step after step. The forward's input and weight are
// e4m3, the backward's output gradient e5m2.
struct Fp8OperandScales {
  torch::Tensor input_scale, input_amax;
  torch::Tensor weight_scale, weight_amax;
  torch::Tensor grad_scale, grad_amax;
  // Whether a step has ended since the state was made or loaded (Fp8DelayedScaling::primed).
  std::shared_ptr<const bool> primed;
};

// A model's delayed-scaling state: one amp::AmaxHistory for the e4m3 operands (two per layer) and
// one for the e5m2 output gradients (one per layer), so that a step's update is a few kernels for
// the whole model. Made by use_fp8_linears under Fp8Scaling::kDelayed; update() must follow every
// optimizer step (the plugins register it with the optimizer: OptimizerWrapper::add_after_step).
class Fp8DelayedScaling {
 public:
  Fp8DelayedScaling(int64_t layers, amp::DelayedScalingOptions options, const torch::TensorOptions& device);

  int64_t layers() const { return layers_; }
  std::shared_ptr<const Fp8OperandScales> layer(int64_t index) const;

  // Whether a step has ended since the state was made (or loaded): before that the scales are
  // placeholders and the layers scale as current scaling does, recording their amaxes.
  bool primed() const { return *primed_; }

  // After each optimizer step: every operand's newest amax into its scale (amp::AmaxHistory::update,
  // max-reduced over `agree_over` first: collective there), then a new step's slots.
  void update(const std::vector<dist::ProcessGroup*>& agree_over = {});

  const amp::AmaxHistory& forward() const { return forward_; }
  const amp::AmaxHistory& backward() const { return backward_; }
  // The non-finite amaxes dropped so far, over all operands.
  int64_t nonfinite_amaxes() const;

  // "forward.history", "forward.scale", ... and "primed": the state a resumed run continues from.
  torch::OrderedDict<std::string, torch::Tensor> state() const;
  void load_state(const torch::OrderedDict<std::string, torch::Tensor>& state);

  // The layers' canonical names ("blocks.3.attn.qkv"; "layer<i>" until set), which name their
  // checkpoint entries: a pipeline stage holds some layers, and a checkpoint saved under one layout
  // resumes under another. Throws std::invalid_argument for a count other than layers() or a repeat.
  void set_layer_names(std::vector<std::string> names);
  const std::vector<std::string>& layer_names() const { return names_; }

  // The state per layer, as checkpoints keep it: "<layer>.<operand>.amax_history" ([history_length],
  // newest first), ".scale" ([1]) and ".nonfinite_amaxes" ([1], int64) for the operands input,
  // weight (e4m3) and grad (e5m2), on the CPU.
  std::vector<std::pair<std::string, torch::Tensor>> layer_entries() const;
  // The inverse: checks `entries` (every layer's, each of its shape) and `primed`, then returns the
  // work that loads them; throws std::invalid_argument naming what does not fit (a missing layer,
  // another history length), changing nothing. Entries of other names are ignored.
  std::function<void()> prepare_load(const std::vector<std::pair<std::string, torch::Tensor>>& entries,
                                     bool primed);

 private:
  int64_t layers_;
  amp::AmaxHistory forward_;
  amp::AmaxHistory backward_;
  std::shared_ptr<bool> primed_ = std::make_shared<bool>(false);
  std::vector<std::shared_ptr<Fp8OperandScales>> slots_;
  std::vector<std::string> names_;
};

}  // namespace colo::nn
