#pragma once

#include <colo/amp/master_weights.h>
#include <colo/amp/precision_policy.h>
#include <colo/engine/model_wrapper.h>
#include <colo/ddp/bucketed_all_reduce.h>
#include <colo/nn/cuda_graphed_stack.h>
#include <colo/pipeline/schedule.h>
#include <colo/pipeline/schedule_runner.h>
#include <colo/pipeline/stage_manager.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo {

class DataParallelEngine;

// The model as hybrid_parallel hands it back: this rank's pipeline stage(s), one LayerStack per
// model chunk (module() holds all of them, in chunk order, for parameters and state), and what
// runs them: a pipeline::ScheduleRunner per microbatch count. Its data-parallel side is one
// DataParallelEngine over the stage's layers (apply_data_parallel: replicas, ZeRO-1/2 or gemini's
// chunks), whose gradient-sync handle a pipelined step switches once for the whole step; plain
// passes and checkpoint state go through the engine's model half.
//
// zero_stage 3: a plain forward (one stage, no microbatches) gathers each layer's chunks just in
// time (GeminiModel::forward). A pipelined step (execute_pipeline) runs every layer once per
// microbatch, forward and backward, in the schedule's order: gathering around each use would
// all-gather a layer's chunks 2 x microbatches times a step. So, unless the step is one
// microbatch on one stage (which goes layer by layer as a plain forward does: gathers_layer_by_layer),
// the step gathers the stage's
// chunks once before its first action (wait_for_weights) and they stay until the step's
// gradients are reduce-scattered (which releases each chunk) or release_weights() after the
// step; between steps only this rank's shards are held (torchtitan runs FSDP under a pipeline
// the same way: no resharding after forward).
//
// forward() runs the stage when the pipeline has a single stage (pp_size 1, for evaluation or a
// plain step); with several stages only execute_pipeline can run the model, and forward() says so.
// State (checkpoints) is this rank's layers under canonical names and full shapes, fp32 masters
// where they exist (ZeRO's gathered over the dp group): each stage saves its own layers.
class PipelineModel : public ModelWrapper {
 public:
  struct Parts {
    std::shared_ptr<nn::LayerStack> stack;  // this rank's layers, all chunks
    std::vector<std::shared_ptr<nn::LayerStack>> chunks;
    pipeline::StageManager stages{1, 0, 1};
    // The training schedule for a microbatch count (the caller's: a named schedule, or a file's).
    std::function<pipeline::Schedule(int microbatches)> schedule_for;
    std::shared_ptr<dist::ProcessGroup> pp_group;
    amp::PrecisionPolicy policy{amp::Precision::kFp32};
    // The data-parallel engine over `stack` (apply_data_parallel): its gradient-sync handle,
    // its weight gathers, and its model half for plain passes and checkpoint state.
    std::shared_ptr<DataParallelEngine> data_parallel;
    // cuda_graphs: each chunk's graphs, in chunk order (empty: eager).
    std::vector<std::shared_ptr<nn::CudaGraphedStack>> graphed;
    // tp_mode=2d cuts every batch into q row blocks: a batch (an evaluation's last, a microbatch)
    // that q does not divide goes in padded with zero rows, and its outputs come back trimmed.
    // 1: batches go in as they are.
    int64_t batch_multiple = 1;
  };
  explicit PipelineModel(Parts parts);

  torch::Tensor forward(const torch::Tensor& input) override;
  // `x` with zero rows appended up to a multiple of Parts::batch_multiple (x itself when it is one).
  torch::Tensor pad_batch(const torch::Tensor& x) const;
  // The whole stage and each chunk (LayerStacks of their own over the same layers): evaluation
  // runs every stage in eval mode, as under the other plugins.
  void train(bool on = true) override;

  void set_gradient_sync(bool enabled) override;
  bool gradient_sync() const override;
  void reduce_accumulated_gradients() override;

  std::vector<std::pair<std::string, torch::Tensor>> full_state() const override;
  void load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;
  void check_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) const override;

  // The runner for `microbatches` per step (made on first use).
  pipeline::ScheduleRunner& runner(int microbatches);
  const pipeline::StageManager& stages() const { return parts_.stages; }
  const amp::PrecisionPolicy& policy() const { return parts_.policy; }
  const std::shared_ptr<dist::ProcessGroup>& pp_group() const { return parts_.pp_group; }
  const std::vector<std::shared_ptr<nn::LayerStack>>& chunks() const { return parts_.chunks; }
  const std::vector<std::shared_ptr<nn::CudaGraphedStack>>& graphed() const { return parts_.graphed; }
  // The stage's data-parallel engine (its gradient-sync handle: execute_pipeline's).
  DataParallelEngine& data_parallel() const;
  // Before a pipelined pass: the weights its layers read, ready. ZeRO-1/2: waits for gathers still
  // in flight after a step (the runner calls the layers directly, without LowLevelZeroModel's
  // per-layer waits); ZeRO-3: gathers every chunk of the stage (collective over dp); a no-op otherwise.
  void wait_for_weights();
  // zero_stage 3, a pass of `microbatches` on one stage: one microbatch runs layer by layer
  // (forward_layer_by_layer, each layer's chunks gathered just in time, in the backward too)
  // instead of after wait_for_weights' gather of the whole stage.
  bool gathers_layer_by_layer(int microbatches) const;
  torch::Tensor forward_layer_by_layer(const torch::Tensor& input);
  // After a pipelined pass: ZeRO-3 releases the chunks wait_for_weights gathered (those the
  // gradients' reduce-scatter has not released already); a no-op otherwise.
  void release_weights();
  // Before each step's first forward: drops the state of a backward pass that failed midway.
  void prepare_for_backward();

 private:
  Parts parts_;
  std::map<int, std::unique_ptr<pipeline::ScheduleRunner>> runners_;
};

}  // namespace colo
