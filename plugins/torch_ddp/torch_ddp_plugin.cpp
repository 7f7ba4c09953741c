#include "torch_ddp_plugin.h"

#include <colo/booster/data_parallel_recipe.h>
#include <colo/booster/plugin_info.h>
#include <colo/booster/precision_options.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/engine/data_parallel.h>
#include <colo/engine/parallelize.h>
#include <colo/engine/torch_ddp_model.h>
#include <colo/nn/cuda_graphed_stack.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace colo::plugins {

TorchDdpPlugin::TorchDdpPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(TorchDdpOptions::parse(options)) {
  if (!context_.world) {
    throw std::invalid_argument("torch_ddp needs the job's world process group in its PluginContext");
  }
  context_.mesh = std::make_shared<dist::ProcessGroupMesh>(context_.world, dist::dp_pp_tp_shape(context_.world->size(), 1, 1));
  if (options_.cuda_graphs()) {
    if (auto why = nn::cuda_graphs_unavailable_reason(context_.device)) {
      throw std::invalid_argument(fmt::format("torch_ddp: cuda_graphs=true cannot run: {}; set cuda_graphs=false", *why));
    }
    // As in hybrid_parallel: the reduction after the backward graph is written, its capture beside
    // the gradient hooks failed on two GPUs (2026-11-26); refused until that runs.
    if (context_.world->size() > 1) {
      throw std::invalid_argument(fmt::format(
          "torch_ddp: cuda_graphs=true over {} data-parallel ranks is not implemented yet (the gradient all-reduce's "
          "hooks cannot be captured); train on one rank or set cuda_graphs=false",
          context_.world->size()));
    }
  }
}

// Replicas (zero_stage 0): the working weights cast and the masters made, then the all-reduce's
// hooks on the final tensors (a later dtype or device change would drop them). A world of one
// has nothing to average: no hooks, no buckets, autograd's own gradients.
Boosted TorchDdpPlugin::boost(BoostInputs inputs) {
  const auto replicas =
      DataParallelOptions()
          .zero_stage(0)
          .caller(name())
          .replicas(MixedPrecisionOptimizerOptions()
                        .policy(amp::PrecisionPolicy(options_.precision()).master_weights(options_.master_weights()))
                        .loss_scaler(options_.loss_scaler())
                        .max_grad_norm(options_.max_grad_norm()))
          .all_reduce(ddp::BucketedAllReduceOptions()
                          .bucket_cap_mb(options_.bucket_cap_mb())
                          .gradient_as_bucket_view(options_.gradient_as_bucket_view())
                          .find_unused_parameters(options_.find_unused_parameters())
                          .overlap_communication(options_.overlap_communication()))
          .buffer_sync_group(options_.broadcast_buffers() ? context_.world : nullptr);
  // With cuda_graphs, the stack's training passes are captured at the first step; no hook fires
  // in a replay, so the all-reduce runs after each graphed backward instead.
  const auto use_graphs = [this, model = inputs.model](DataParallelEngine& engine) {
    if (!options_.cuda_graphs()) return;
    auto graphed = std::make_shared<nn::CudaGraphedStack>(model);
    reduce_after_graph_backward(*graphed, engine.reducer());
    std::dynamic_pointer_cast<TorchDdpModel>(engine.model())->use_cuda_graphs(std::move(graphed));
  };
  return boost_data_parallel(*this, std::move(inputs), replicas, options_.precision(), options_.fp8(), use_graphs);
}

}  // namespace colo::plugins

COLO_PLUGIN(torch_ddp, "0.1.0", colo::plugins::TorchDdpPlugin)
