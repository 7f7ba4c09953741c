#pragma once

#include <torch/torch.h>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo::amp {
class DynamicLossScaler;
}
namespace colo::optim {
class LRScheduler;
}

namespace colo {

// A boosted optimizer: the user's torch optimizer plus what the plugin adds around a step
// (mixed precision masters, loss scaling, gradient clipping, sharded state, reductions).
class OptimizerWrapper {
 public:
  OptimizerWrapper();
  virtual ~OptimizerWrapper();

  // Runs backward on the loss, scaled by loss_scaler() where there is one (fp16).
  virtual void backward(const torch::Tensor& loss);
  // Runs backward from `outputs` given the gradients of the loss with respect to them: what a
  // pipeline stage that does not compute the loss does with the gradient its next stage sent.
  // Hooks and accumulation work as in backward(loss); the gradients already carry the loss
  // scale (the last stage's backward(loss) applied it), so it is not applied again.
  virtual void backward_by_grad(const std::vector<torch::Tensor>& outputs, const std::vector<torch::Tensor>& grads);

  // Applies the accumulated gradients. Returns false when the step was skipped (fp16 overflow,
  // decided on every rank alike). colo's wrappers end it with the work add_after_step gave them.
  virtual bool step() = 0;
  // Work that must follow every step, taken or skipped, on every rank alike (delayed float8
  // scaling's amax update: Fp8DelayedScaling::update), run in the order added.
  void add_after_step(std::function<void()> work) { after_step_.push_back(std::move(work)); }
  // Clears the gradients before the next accumulation: drops them (set to undefined) or zeroes
  // them in place, whichever the plugin's gradient path handles faster.
  virtual void zero_grad() = 0;

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

  // Gradient clipping by global norm; 0 disables it.
  void set_max_grad_norm(double max_norm) { max_grad_norm_ = max_norm; }
  double max_grad_norm() const { return max_grad_norm_; }
  // The global gradient norm of the last step (before clipping), NaN before the first.
  double last_grad_norm() const { return last_grad_norm_; }
  // Steps skipped so far because of fp16 overflow.
  virtual int64_t skipped_steps() const;
  // The dynamic loss scaler of fp16 training; null under other precisions.
  const amp::DynamicLossScaler* loss_scaler() const { return scaler_.get(); }

  // The torch optimizer driven by this wrapper: LR schedulers set its learning rates.
  virtual torch::optim::Optimizer& optimizer() = 0;

  // Optimizer state under canonical parameter names ("<param>.exp_avg", ...), full shapes; and
  // hyper-parameters / counters as numbers. Collective where state is sharded.
  struct FullState {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    std::map<std::string, double> scalars;
  };
  virtual FullState full_state() const = 0;
  virtual void load_full_state(const FullState& state) = 0;

  // State kept beside the optimizer's that its checkpoints carry with it: delayed float8 scaling's
  // amax histories (attach_fp8_scaling). Its entries' and scalars' names begin with `prefix`.
  // `prepare_load` is given the checkpoint's entries under the prefix (none when it has none),
  // checks them and returns the work that loads them; it throws, changing nothing, for ones that
  // do not fit.
  struct CheckpointedCompanion {
    std::string prefix;
    std::function<FullState()> save;
    std::function<std::function<void()>(const FullState&)> prepare_load;
  };
  void add_checkpointed_companion(CheckpointedCompanion companion);
  // Entries of delayed float8 scaling's state. A checkpoint's entries under this prefix that no
  // companion of this optimizer claims (a delayed-scaling run resumed under another precision or
  // fp8_scaling=current) are dropped: that run keeps no such state.
  static constexpr const char* kFp8ScalingPrefix = "fp8_scaling.";
  static bool is_fp8_scaling_entry(const std::string& name);
  // Whether split_companion_state takes `name` out of the optimizer's own state (a companion's
  // entry, or kFp8ScalingPrefix's).
  bool is_companion_entry(const std::string& name) const;

  // What checkpoints save: full_state() and every companion's entries and scalars.
  FullState checkpoint_state() const;
  // Every companion's state alone (GeminiCheckpointIO streams full_state's tensors its own way).
  FullState companion_state() const;
  // What checkpoints load: the companions' entries checked first, then load_full_state with the
  // rest, then the companions loaded. A refusal anywhere changes nothing.
  void load_checkpoint_state(const FullState& state);
  // `state` without the companions' (and kFp8ScalingPrefix's) entries and scalars, and the work
  // that loads the companions from them (checked now: throws for ones that do not fit).
  std::pair<FullState, std::function<void()>> split_companion_state(const FullState& state) const;

 protected:
  double max_grad_norm_ = 0.0;
  double last_grad_norm_ = std::numeric_limits<double>::quiet_NaN();
  // Set by a wrapper whose precision needs loss scaling.
  std::unique_ptr<amp::DynamicLossScaler> scaler_;
  // What step() runs last (add_after_step's work).
  void run_after_step() const {
    for (const auto& work : after_step_) work();
  }

 private:
  std::vector<std::function<void()>> after_step_;
  std::vector<CheckpointedCompanion> companions_;
};

}  // namespace colo
