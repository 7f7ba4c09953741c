#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision.h>
#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_options.h>

#include <torch/arg.h>

#include <string>

namespace colo::plugins {

// torch_ddp's options, parsed and validated from the plugin's string map in one step.
struct TorchDdpOptions {
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  TORCH_ARG(bool, find_unused_parameters) = false;
  TORCH_ARG(bool, gradient_as_bucket_view) = true;
  TORCH_ARG(bool, broadcast_buffers) = true;
  TORCH_ARG(bool, overlap_communication) = true;
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  TORCH_ARG(bool, master_weights) = true;
  TORCH_ARG(double, max_grad_norm) = 0.0;
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // The model's training forward and backward as CUDA graphs (nn::CudaGraphedStack): one GPU
  // per model replica, no activation checkpointing; over several ranks the all-reduce runs after
  // the backward graph (reduce_after_graph_backward), not overlapped with it.
  TORCH_ARG(bool, cuda_graphs) = false;

 public:
  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key
  // (with the valid keys).
  static TorchDdpOptions parse(const PluginOptions& options);
};

// Data parallelism (PyTorch's DistributedDataParallel): every rank holds the whole model and
// trains on its shard of each global batch; gradients are averaged over the world by a
// ddp::BucketedAllReduce, in buckets overlapped with backward (or all at its end). Precision fp32 | bf16 | fp16
// through a MixedPrecisionOptimizer (fp32 masters, fp16 loss scaling, gradient clipping).
//
// boost(), in order:
//   1. the model moves to the context's device;
//   2. parameters and buffers are broadcast from rank 0 (every replica starts alike);
//   3. the optimizer is wrapped: working weights cast to the compute dtype, fp32 masters;
//   4. the BucketedAllReduce attaches its hooks to the (now final) working weights;
//   5. the model is wrapped (inputs cast to the compute dtype, outputs returned in fp32);
//   6. the data loader is re-sharded over the world (dp = world); criterion and LR
//      scheduler pass through (the scheduler keeps driving the user's optimizer object).
class TorchDdpPlugin : public Plugin {
 public:
  TorchDdpPlugin(const PluginOptions& options, const PluginContext& context);

  std::string name() const override { return "torch_ddp"; }
  const TorchDdpOptions& options() const { return options_; }

  Boosted boost(BoostInputs inputs) override;

  // What torch_ddp would hold on each rank (see Booster::plan_memory); torch_ddp_memory_plan.cpp.
  static MemoryPlan plan_memory(const PluginOptions& options, const MemoryPlanInputs& inputs);

 private:
  TorchDdpOptions options_;
};

}  // namespace colo::plugins
