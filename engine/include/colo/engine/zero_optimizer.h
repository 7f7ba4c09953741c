#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision_policy.h>
#include <colo/engine/optimizer_wrapper.h>
#include <colo/nn/layer_stack.h>
#include <torch/arg.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::optim {
struct HybridAdamOptions;
}
namespace colo::zero {
class BucketedAllGather;
class GradReducer;
class ShardLayout;
class ShardedAdam;
}  // namespace colo::zero

namespace colo {

struct ZeroOptimizerOptions {
  // Every violated rule, one per entry (empty: valid): what the plugins report and the
  // optimizer refuses.
  std::vector<std::string> violations() const;

  // Who is asking, as errors name it ("low_level_zero", "hybrid_parallel"): the engine names no plugin itself.
  TORCH_ARG(std::string, caller) = "ZeroOptimizer";
  // 1: gradients all-reduced, each rank keeps them all; 2: gradients reduce-scattered, each rank
  // keeps only its shard. Master weights and optimizer state are sharded at both stages.
  TORCH_ARG(int, stage) = 1;
  // The working weights' dtype (fp32, bf16, fp16). Masters are fp32 whatever it is.
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  // fp16 only.
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // Gradient clipping by the global L2 norm over every shard; 0 disables it.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  // MiB of gradients (in the compute dtype) per bucket: per reduction, and per all-gather.
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  // Reductions launched as buckets fill during backward, all-gathers waited for layer by layer
  // in the next forward. Off: reductions at the end of backward, gathers waited in step().
  TORCH_ARG(bool, overlap_communication) = true;
  // Masters, optimizer state, gradient shard and the Adam step on the CPU (transfers through a
  // small pool of pinned buffers): GPU memory keeps only the working weights and activations.
  TORCH_ARG(bool, cpu_offload) = false;
  // The dtype gradients are reduced in; unset: the compute dtype.
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
  // Groups besides the data-parallel one over which this rank's gradients are disjoint (the
  // pipeline's stages): the clipping norm, and with it the fp16 overflow decision, is summed over
  // them too, so that every rank of the mesh clips by the same norm and skips the same steps.
  TORCH_ARG(std::vector<std::shared_ptr<dist::ProcessGroup>>, grad_norm_sum_over) = {};
  // The tensor-parallel group, when the model's layers are sharded (their shard specs say which
  // parameters): sharded gradients are summed over it, replicated ones counted once.
  TORCH_ARG(std::shared_ptr<dist::ProcessGroup>, tp_group) = nullptr;
};

// ZeRO stage 1 / 2 (Colossal-AI's LowLevelZeroOptimizer) over a data-parallel group: the
// OptimizerWrapper of the low_level_zero plugin, and of any plugin with a ZeRO data-parallel axis.
//
// The working weights stay replicated, in the compute dtype; the fp32 master weights and Adam's
// moments are sharded: rank r keeps only its zero::ShardLayout shard of them, 1/dp of the total
// (plus at most dp - 1 padding elements per bucket). The constructor composes core/zero's
// engines in this order:
//   1. the optimizer's parameters (requiring grad) are the sharded ones, in the model's
//      canonical order; every floating model parameter is cast in place to the compute dtype
//      after its exact fp32 value has been kept;
//   2. the shard layout: ddp::assign_buckets' gradient buckets, packed and padded;
//   3. zero::ShardedAdam: the flat fp32 master shard (from the kept values), gradient shard and
//      moments, on the device or, with cpu_offload, in (pinned) CPU memory;
//   4. zero::BucketedAllGather: the working parameters become views into per-bucket gather
//      buffers (before any hook: set_data drops hooks when the dtype changes);
//   5. the gradient reducer, whose hooks go on the final tensors: stage 1
//      zero::AllReduceGradReducer, stage 2 zero::ReduceScatterGradReducer;
//   6. fp16: a DynamicLossScaler.
// A step: the reducer's gradient shard -> unscale and clip in one multiply, with the global
// norm from one SUM all-reduce of the shards' squared norms (the one host synchronisation; an
// fp16 overflow anywhere makes it non-finite everywhere, so every rank skips alike) -> Adam on
// the shard with the user's optimizer's CURRENT hyper-parameters (LR schedulers keep setting
// them on that object) -> all-gather of the updated shards into the working weights.
//
// The user's optimizer must be torch's Adam or AdamW (amsgrad off) or colo's HybridAdam, built
// over (some of) the model's parameters; it is never stepped and keeps no state.
//
// Checkpoints: state under the model's canonical parameter names and full shapes, with
// MixedPrecisionOptimizer's keys ("<param>.step|exp_avg|exp_avg_sq", "master.<param>" for
// bf16/fp16, "lr.<group>", "loss_scaler.<key>"), so that state saved by either loads into the
// other, at any data-parallel size.
class ZeroOptimizer : public OptimizerWrapper {
 public:
  // Throws std::invalid_argument unless the optimizer is Adam-like (see above); `caller` names
  // who asks in the message.
  static void check_optimizer(const torch::optim::Optimizer& optimizer, const std::string& caller);

  // The model must be on its device, with the same values on every rank of `group`. Throws
  // std::invalid_argument for an unsupported optimizer or invalid options, or an optimizer
  // parameter that is not a model parameter.
  ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<nn::LayerStack> model,
                std::shared_ptr<dist::ProcessGroup> group, ZeroOptimizerOptions options);
  ~ZeroOptimizer() override;

  bool step() override;
  void set_gradient_sync(bool enabled) override;
  bool gradient_sync() const override;
  void reduce_accumulated_gradients() override;
  void zero_grad() override;
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  // Tensors "<param>.step" (0-dim), "<param>.exp_avg", "<param>.exp_avg_sq" after the first
  // step, and "master.<param>" for every model parameter under bf16/fp16; scalars "lr.<group>"
  // and, for fp16, "loss_scaler.<key>". Collective over the group.
  FullState full_state() const override;
  // The reverse; each rank keeps its slices. Validates everything first and throws
  // std::invalid_argument listing every unknown, missing or mis-shaped entry before changing
  // anything. Every parameter must carry the same step count (ZeRO steps all together).
  void load_full_state(const FullState& state) override;

  // The fp32 master value of every sharded parameter, full shape, canonical names, layout order.
  // Collective over the group.
  std::vector<std::pair<std::string, torch::Tensor>> full_masters() const;
  // Replaces the masters (each rank its slices) and the working weights with `values`, one
  // full tensor per sharded parameter by canonical name (present and shaped right: checked by
  // the caller, e.g. ModelWrapper::load_full_state). Local: no communication.
  void load_masters(const std::map<std::string, torch::Tensor>& values);

  const ZeroOptimizerOptions& options() const { return options_; }
  const dist::ProcessGroup& group() const { return *group_; }
  // The sharded parameters (working tensors) and their canonical names, in layout order.
  const std::vector<std::string>& param_names() const { return names_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const zero::ShardLayout& layout() const { return *layout_; }
  const zero::ShardedAdam& shard() const { return *adam_; }
  zero::GradReducer& reducer() { return *reducer_; }
  zero::BucketedAllGather& gather() const { return *gather_; }
  // Null unless fp16.

 private:
  // step()'s work before add_after_step's.
  bool take_step();
  // Each parameter group's hyper-parameters, read from the user's optimizer now.
  std::vector<optim::HybridAdamOptions> hyperparameters() const;

  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<nn::LayerStack> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ZeroOptimizerOptions options_;
  amp::PrecisionPolicy policy_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> tp_pieces_;  // per sharded parameter: the distinct pieces tp holds of it (1: whole)
  // Every model parameter (canonical order): zero_grad clears them all, masters are saved for all.
  std::vector<std::string> model_names_;
  std::vector<torch::Tensor> model_params_;
  // Model parameters outside the optimizer (or frozen): replicated, never stepped.
  std::vector<torch::Tensor> unsharded_;
  std::shared_ptr<zero::ShardLayout> layout_;
  std::shared_ptr<zero::ShardedAdam> adam_;
  std::shared_ptr<zero::BucketedAllGather> gather_;
  // Last: destroyed first, so that its hooks are gone before what they use.
  std::unique_ptr<zero::GradReducer> reducer_;
};

}  // namespace colo
