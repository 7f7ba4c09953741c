#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision.h>
#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_options.h>
#include <colo/plugins/torch_ddp_options.h>

#include <torch/arg.h>

#include <string>

namespace colo::plugins {

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
