#pragma once

#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/per_stage_checkpoint_io.h>
#include <colo/plugins/hybrid_parallel_options.h>

#include <memory>
#include <string>

namespace colo::plugins {

// Pipeline, tensor and data parallelism (Colossal-AI's HybridParallelPlugin) on a dp × pp × tp
// mesh over the world (tp innermost; dp is what world / (pp × tp) leaves). The user boosts the
// whole layer stack; each rank keeps its stages.
//
// boost(), in order:
//   0. tensor parallelism over the tp group (shard_tensor_parallel): tp_mode=1d through the
//      model's shardformer policy, tp_mode=2d through Vit2dSharder on a q × q grid (a batch q does
//      not divide is padded and trimmed: PipelineModel::Parts::batch_multiple), tp_mode=2.5d
//      through Vit25dSharder on tp_depth layers of a q × q grid (padded to a multiple of d·q),
//      tp_mode=3d through Vit3dSharder on a q × q × q cube (padded to a multiple of q²);
//   1. the stack is cut into pp × num_model_chunks virtual stages (partition, layers_per_stage;
//      the last layer, the head, goes with the one before it); this rank keeps chunk c = virtual
//      stage c·pp + its pp rank; the rest of the stack is no longer this rank's business;
//   2. its layers move to the device, broadcast from dp rank 0 (replicas of a stage start alike);
//   3. the user's optimizer is restricted to them (restrict_optimizer), then wrapped over the dp
//      group: zero_stage 0, a MixedPrecisionOptimizer with DDP's all-reduce (apply_ddp); 1 and 2,
//      a ZeroOptimizer; 3, gemini's chunks of the stage's layers (a GeminiChunkOwner held by a
//      GeminiModel, stepped by a GeminiOptimizer). Every way the clipping norm and the fp16
//      overflow flag are agreed over the whole mesh (summed over pp, over tp's pieces, and over
//      dp where gradients are sharded);
//   4. the model is wrapped (PipelineModel: the chunks, a ScheduleRunner per microbatch count);
//   5. the data loader is re-sharded over the dp group (the ranks of a replica share batches).
//
// execute_pipeline: the batch is split into microbatches and run through the schedule
// (pp_style); every backward of the step runs with gradient sync off and the data-parallel
// reduction happens once, after the rank's last backward (ZeRO-2 included, which Colossal-AI and
// DeepSpeed refuse with a pipeline; ZeRO-3's chunks are gathered once for the step:
// PipelineModel). Gradient accumulation over several calls: Booster::no_sync.
class HybridParallelPlugin : public Plugin {
 public:
  HybridParallelPlugin(const PluginOptions& options, const PluginContext& context);

  std::string name() const override { return "hybrid_parallel"; }
  const HybridParallelOptions& options() const { return options_; }

  Boosted boost(BoostInputs inputs) override;
  bool supports_pipeline() const override { return options_.pipelined(); }
  PipelineResult execute_pipeline(const torch::Tensor& inputs, const torch::Tensor& targets, ModelWrapper& model,
                                  const Criterion& criterion, OptimizerWrapper& optimizer,
                                  const PipelineOptions& options) override;
  CheckpointIO& checkpoint_io() override { return *checkpoint_io_; }

  // What hybrid_parallel would hold on each rank of the mesh (see Booster::plan_memory):
  // hybrid_parallel_memory_plan.cpp.
  static MemoryPlan plan_memory(const PluginOptions& options, const MemoryPlanInputs& inputs);
  // The virtual stages' layer ranges for layers of `layer_params` parameters each (the costs of
  // the balanced partition).
  static std::vector<pipeline::LayerRange> partition(const std::vector<double>& layer_params,
                                                     const HybridParallelOptions& options, int num_stages);
  // Microbatches for a batch of `batch` samples on a data-parallel rank; throws
  // std::invalid_argument when the batch does not split into them (training needs equal
  // microbatches). execute_pipeline and plan_memory both split through here.
  static int microbatches_for(const HybridParallelOptions& options, int64_t batch, bool forward_only);
  static int eval_microbatches(const HybridParallelOptions& options, int64_t batch);

 private:
  // boost's step 0: shards `model` over the tp group as tp_mode says (1d: the model's policy
  // through ShardFormer; 2d: Vit2dSharder on a q x q grid of the tp ranks; 2.5d: Vit25dSharder on
  // tp_depth layers of a q x q grid; 3d: Vit3dSharder on a q x q x q cube).
  void shard_tensor_parallel(nn::LayerStack& model, const torch::optim::Optimizer& optimizer,
                             const std::shared_ptr<dist::ProcessGroup>& tp) const;

  HybridParallelOptions options_;
  std::unique_ptr<PerStageCheckpointIO> checkpoint_io_;
};

}  // namespace colo::plugins
