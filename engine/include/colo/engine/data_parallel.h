#pragma once

// Data parallelism as one step: apply_data_parallel(stack, optimizer, dp, options) builds, over the
// data-parallel group `dp`, the engine zero_stage names and hands back both its halves and one
// handle for what every caller does with them:
//
//   zero_stage 0   replicas: MixedPrecisionOptimizer + a bucketed all-reduce (TorchDdpModel)
//   zero_stage 1/2 ZeRO: ZeroOptimizer, optimizer state (and gradients) sharded (LowLevelZeroModel)
//   zero_stage 3   gemini's chunks: GeminiChunkOwner + GeminiOptimizer, weights sharded too
//                  (GeminiModel)
//
// torch_ddp, low_level_zero and gemini are this step over the world; hybrid_parallel applies it to
// each rank's pipeline stage (its layers, already split by tensor parallelism), as torchtitan's
// pipeline_llm applies one parallelize_fn to every stage chunk. The model half runs the stack layer
// by layer where the engine needs per-layer work: ZeRO-1/2 waits for each layer's weight gathers
// before it runs; ZeRO-3 gathers each layer's chunks before and releases them after, in the
// backward too.
#include <colo/ddp/bucketed_all_reduce.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/engine/mixed_precision_optimizer.h>
#include <colo/engine/zero_optimizer.h>

#include <torch/torch.h>

#include <memory>
#include <string>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class LayerStack;
}

namespace colo {

class GeminiModel;
class ModelWrapper;
class OptimizerWrapper;

// Each engine keeps its own options; only the chosen engine's are read. `caller` replaces each
// engine's own caller (errors name whoever composed the engine).
struct DataParallelOptions {
  // 0 replicas, 1 and 2 ZeRO, 3 gemini's chunks. Anything else is refused, naming the range.
  TORCH_ARG(int, zero_stage) = 0;
  TORCH_ARG(std::string, caller) = "apply_data_parallel";
  // zero_stage 0. grad_norm.agree_over defaults to the data-parallel group (replicas agree after
  // the all-reduce).
  TORCH_ARG(MixedPrecisionOptimizerOptions, replicas) = {};
  TORCH_ARG(ddp::BucketedAllReduceOptions, all_reduce) = {};
  // zero_stage 0: broadcast this group's rank 0 buffers before each training forward (null: none).
  TORCH_ARG(std::shared_ptr<dist::ProcessGroup>, buffer_sync_group) = nullptr;
  // zero_stage 1, 2 (the stage is zero_stage's).
  TORCH_ARG(ZeroOptimizerOptions, zero) = {};
  // zero_stage 3: the chunks (plan, placement, offload) and their step.
  TORCH_ARG(GeminiChunkOptions, chunks) = {};
  TORCH_ARG(GeminiOptimizerOptions, gemini) = {};
};

// Refuses an optimizer the chosen engine cannot step (ZeRO and gemini step Adam/AdamW only), or a
// zero_stage out of range, before anything changes. apply_data_parallel checks it again.
void check_data_parallel_optimizer(const torch::optim::Optimizer& optimizer, const DataParallelOptions& options);

// What apply_data_parallel built: the two halves, and one gradient-sync handle over whichever of
// them reduces gradients (the all-reduce of replicas, the ZeRO optimizer's reducer, the chunks').
class DataParallelEngine {
 public:
  int zero_stage() const { return zero_stage_; }
  // The optimizer half: MixedPrecisionOptimizer, ZeroOptimizer or GeminiOptimizer.
  const std::shared_ptr<OptimizerWrapper>& optimizer() const { return optimizer_; }
  // The model half over the whole stack: TorchDdpModel, LowLevelZeroModel or GeminiModel (input
  // cast, fp32 outputs, per-layer weight gathers, checkpoint state with the fp32 masters).
  const std::shared_ptr<ModelWrapper>& model() const { return model_; }

  // The gradient-sync handle. Off: backward passes accumulate locally; reduce_accumulated_gradients
  // (collective over dp) then reduces what accumulated, as a synchronised backward would have.
  void set_gradient_sync(bool enabled);
  bool gradient_sync() const;
  void reduce_accumulated_gradients();
  // Before a forward whose backward follows: drops the state of a backward that failed midway.
  void prepare_for_backward();

  // For callers that run the stack's layers themselves (a pipeline's runner) instead of through
  // model(): gather_weights() makes every weight readable (ZeRO-1/2: waits for gathers in flight;
  // ZeRO-3: gathers every chunk, collective over dp); release_weights() lets ZeRO-3's go again.
  // No-ops for replicas.
  void gather_weights();
  void release_weights();

  // The all-reduce of replicas (null for the other stages, or a group of one rank): CUDA graph
  // replays fire no hooks, so their owner reduces after each graphed backward.
  const std::shared_ptr<ddp::BucketedAllReduce>& reducer() const { return reducer_; }
  // zero_stage 3's model half (null otherwise): runs the stack gathering layer by layer.
  const std::shared_ptr<GeminiModel>& gemini() const { return gemini_; }

 private:
  friend std::shared_ptr<DataParallelEngine> apply_data_parallel(std::shared_ptr<nn::LayerStack>,
                                                                 std::shared_ptr<torch::optim::Optimizer>,
                                                                 std::shared_ptr<dist::ProcessGroup>,
                                                                 const DataParallelOptions&);
  DataParallelEngine() = default;

  int zero_stage_ = 0;
  std::shared_ptr<OptimizerWrapper> optimizer_;
  std::shared_ptr<ModelWrapper> model_;
  std::shared_ptr<ddp::BucketedAllReduce> reducer_;  // 0, dp > 1
  std::shared_ptr<ZeroOptimizer> zero_;              // 1, 2
  std::shared_ptr<GeminiChunkOwner> chunks_;         // 3
  std::shared_ptr<GeminiModel> gemini_;              // 3
};

// Builds the engine over `stack` (on its device, every rank of `dp` holding the same values:
// broadcast_model first) for the user's `optimizer` (over the stack's parameters: restrict_optimizer
// first where the stack is a part of the model). Throws std::invalid_argument naming options.caller()
// for what the engine refuses.
std::shared_ptr<DataParallelEngine> apply_data_parallel(std::shared_ptr<nn::LayerStack> stack,
                                                        std::shared_ptr<torch::optim::Optimizer> optimizer,
                                                        std::shared_ptr<dist::ProcessGroup> dp,
                                                        const DataParallelOptions& options);

}  // namespace colo
