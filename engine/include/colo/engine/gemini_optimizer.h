#pragma once
// gemini's step: the optimizer proper over the chunks a GeminiChunkOwner gives it. The chunks,
// their placement and the gradient reducer belong to the owner (the model's side); checkpoints
// stream through GeminiStateStreamer.

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/optimizer_wrapper.h>
#include <torch/arg.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colo {

struct CheckpointSetReader;

struct GeminiOptimizerOptions {
  // Every violated rule, one per entry (empty: valid).
  std::vector<std::string> violations() const;

  // Who is asking, as errors name it ("gemini", "hybrid_parallel"): the engine names no plugin itself.
  TORCH_ARG(std::string, caller) = "GeminiOptimizer";
  // fp16 only (the precision is the chunk owner's).
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // Gradient clipping by the global L2 norm; 0 disables it.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  // Groups besides the data-parallel one over which this rank's gradients are disjoint (the
  // pipeline's stages): the clipping norm, and with it the fp16 overflow decision, is summed over them.
  TORCH_ARG(std::vector<std::shared_ptr<dist::ProcessGroup>>, grad_norm_sum_over) = {};
  // The tensor-parallel group, when the chunked model's layers are split (GeminiChunkOwner::tp_pieces):
  // split gradients are summed over it, replicated ones counted once.
  TORCH_ARG(std::shared_ptr<dist::ProcessGroup>, tp_group) = nullptr;
};

// ZeRO stage 3 with chunks (Colossal-AI's GeminiOptimizer): the OptimizerWrapper that steps the
// fp32 state of every chunk of a GeminiChunkOwner, which it borrows. fp16: a DynamicLossScaler.
//
// A step: the owner finishes reducing the gradient shards (and, under auto placement, settles
// where each chunk's state lives) → unscale and clip with the global norm (one all-reduce) → per
// chunk, Adam where its state lives (fused on the GPU, vectorised on the CPU; the device's chunks
// first, so that their kernels run while the CPU steps the host's) → the working shard takes the
// rounded master (replicated chunks all-gather it).
//
// Checkpoints: ZeroOptimizer's format (full names and shapes, "<param>.step|exp_avg|exp_avg_sq",
// "master.<param>" under bf16/fp16, "lr.<group>", "loss_scaler.<key>"), gathered and scattered
// chunk by chunk by GeminiStateStreamer, so that state moves between gemini, low_level_zero and
// torch_ddp at any world size.
class GeminiOptimizer : public OptimizerWrapper {
 public:
  // Throws std::invalid_argument, listing the optimizers gemini can shard, unless it is one;
  // `caller` names who asks in the message.
  static void check_optimizer(const torch::optim::Optimizer& optimizer, const std::string& caller);

  // `optimizer` must be the one `chunks` was built over (the same parameters in the same groups).
  // Throws std::invalid_argument for an optimizer gemini cannot shard (listing those it can),
  // invalid options, or an optimizer that steps other parameters than the owner chunked.
  GeminiOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<GeminiChunkOwner> chunks,
                  GeminiOptimizerOptions options);
  ~GeminiOptimizer() override;

  void backward(const torch::Tensor& loss) override;
  bool step() override;
  void set_gradient_sync(bool enabled) override;
  bool gradient_sync() const override;
  void reduce_accumulated_gradients() override;
  void zero_grad() override;
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  FullState full_state() const override;
  void load_full_state(const FullState& state) override;
  // full_state()'s entries, in its order, each made when written (checkpoint::PendingTensor):
  // chunked state is gathered one chunk at a time, so saving never holds the whole state.
  // Collective: every rank must make every entry's values, in order.
  std::vector<checkpoint::PendingTensor> pending_full_state() const;
  // The plain numbers of full_state() (learning rates, loss scaler).
  std::map<std::string, double> full_state_scalars() const;
  // load_full_state from a set read chunk by chunk: everything is checked from the entries'
  // shapes first (nothing changes on an error), then each chunk's entries are read and scattered
  // into its shards. Local.
  void load_full_state(const CheckpointSetReader& tensors, const std::map<std::string, double>& scalars);

  const GeminiOptimizerOptions& options() const { return options_; }
  // The chunks this optimizer steps (the model's).
  const std::shared_ptr<GeminiChunkOwner>& chunk_owner() const { return chunks_; }

 private:
  // step()'s work before add_after_step's.
  bool take_step();
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<GeminiChunkOwner> chunks_;
  GeminiOptimizerOptions options_;
};

}  // namespace colo
