#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision_policy.h>
#include <colo/engine/optimizer_wrapper.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/nn/layer_stack.h>
#include <torch/arg.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::zero {
class AllocationError;
class ChunkedParameters;
class ReduceScatterGradReducer;
class ShardLayout;
class ShardedAdam;
struct ChunkPlacement;
}  // namespace colo::zero

namespace colo {

enum class GeminiPlacementPolicy { kStatic, kAuto };

struct GeminiOptimizerOptions {
  // Every violated rule, one per entry (empty: valid).
  std::vector<std::string> violations() const;

  // Who is asking, as errors name it ("gemini", "hybrid_parallel"): the engine names no plugin itself.
  TORCH_ARG(std::string, caller) = "GeminiOptimizer";
  // The working weights' dtype (fp32, bf16, fp16). Masters are fp32 whatever it is.
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  // fp16 only.
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // Gradient clipping by the global L2 norm; 0 disables it.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  // MiB of working-dtype parameters a chunk may hold; unset: searched (zero::plan_chunks).
  TORCH_ARG(std::optional<double>, chunk_size_mb) = std::nullopt;
  TORCH_ARG(GeminiPlacementPolicy, placement_policy) = GeminiPlacementPolicy::kStatic;
  // Static placement (zero::static_placement): the fractions of the elements, counted in chunks
  // from the first, whose parameters are sharded, whose parameter shards live in host memory,
  // whose optimizer state (fp32 master, gradient shard, Adam moments) lives in host memory.
  TORCH_ARG(double, shard_param_frac) = 1.0;
  TORCH_ARG(double, offload_param_frac) = 0.0;
  TORCH_ARG(double, offload_optim_frac) = 0.0;
  // Auto placement: the share of the device's memory gemini may fill with model state and the
  // memory measured in the warm-up step that is not model state (activations, workspaces).
  TORCH_ARG(double, steady_cuda_cap_ratio) = 0.9;
  // Auto placement: the device's memory, when not the whole device's (another process shares it),
  // or on a CPU, where there is no device budget to read (tests).
  TORCH_ARG(std::optional<int64_t>, device_memory_bytes) = std::nullopt;
  // Chunks gathered ahead of the layer that needs them (forward and backward).
  TORCH_ARG(int64_t, max_prefetch) = 2;
  // Host memory for parameter shards and gradient staging pinned (per chunk, never one block).
  TORCH_ARG(bool, pin_memory) = true;
  // Gradients reduce-scattered as each chunk's gradients are complete, during backward.
  TORCH_ARG(bool, overlap_communication) = true;
  // The dtype gradients are reduced in; unset: the compute dtype.
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
};

// How gemini cuts parameters into chunks and where each chunk's state starts (auto placement
// moves optimizer state at the first step): shared by GeminiOptimizer and the memory plan.
struct GeminiChunking {
  int64_t capacity = 0;     // elements a chunk may hold
  bool searched = false;    // chosen by zero::plan_chunks' search
  std::vector<std::vector<std::size_t>> chunks;  // parameter indices per chunk, forward order
  std::vector<int64_t> chunk_numels;
  std::vector<zero::ChunkPlacement> placement;
};

// A checkpoint set read piece by piece: what it holds (from the headers alone) and the values of
// the tensors asked for. Over files (GeminiCheckpointIO) or over tensors in memory.
struct CheckpointSetReader {
  std::vector<checkpoint::TensorInfo> entries;
  std::function<checkpoint::NamedTensors(const std::set<std::string>& names)> read;

  static CheckpointSetReader over(const checkpoint::NamedTensors& tensors);
};

// ZeRO stage 3 with chunks (Colossal-AI's Gemini) over a data-parallel group: the OptimizerWrapper
// of the gemini plugin, and the owner of the chunked parameters its model wrapper gathers.
//
// The constructor, in order:
//   1. the optimizer's parameters (requiring grad), in the model's canonical (forward) order,
//      keep their exact fp32 values; every floating model parameter is cast to the compute dtype;
//   2. zero::plan_chunks packs them into chunks; the placement (static fractions, or auto: all
//      optimizer state in host memory until the first step has measured the rest) says where
//      each chunk's state lives;
//   3. per chunk, a zero::ShardedAdam over its one-bucket ShardLayout: fp32 master shard, gradient
//      shard and moments, on the device or in host memory;
//   4. zero::ChunkedParameters: the parameters become views into per-chunk buffers; sharded
//      chunks keep this rank's shard and release the buffer (in fp32 with the state on the same
//      side, the shard IS the master: no second copy);
//   5. a zero::ReduceScatterGradReducer over the chunks in reverse (backward) order, adding each
//      chunk's averaged gradient into its gradient shard and releasing the chunk as soon as its
//      gradients are taken;
//   6. fp16: a DynamicLossScaler.
// A step: the gradient shards → unscale and clip with the global norm (one all-reduce) → per
// chunk, Adam where its state lives (fused on the GPU, vectorised on the CPU) → the working
// shard takes the rounded master (replicated chunks all-gather it).
//
// Checkpoints: ZeroOptimizer's format (full names and shapes, "<param>.step|exp_avg|exp_avg_sq",
// "master.<param>" under bf16/fp16, "lr.<group>", "loss_scaler.<key>"), gathered and scattered
// chunk by chunk, so that state moves between gemini, low_level_zero and torch_ddp at any world size.
class GeminiOptimizer : public OptimizerWrapper {
 public:
  // Throws std::invalid_argument, listing the optimizers gemini can shard, unless it is one;
  // `caller` names who asks in the message.
  static void check_optimizer(const torch::optim::Optimizer& optimizer, const std::string& caller);
  // The chunks of parameters of `numels` elements (forward order) and their initial placement;
  // `on_gpu`: the device is a GPU (auto placement keeps parameter shards there).
  static GeminiChunking chunking(const std::vector<int64_t>& numels, const std::vector<std::string>& names,
                                 const GeminiOptimizerOptions& options, bool on_gpu);

  // The model must be on its device, with the same values on every rank of `group`. Throws
  // std::invalid_argument for an optimizer gemini cannot shard (listing those it can), invalid
  // options, or an optimizer parameter that is not a model parameter.
  GeminiOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<nn::LayerStack> model,
                  std::shared_ptr<dist::ProcessGroup> group, GeminiOptimizerOptions options);
  ~GeminiOptimizer() override;

  void backward(const torch::Tensor& loss) override;
  bool step() override;
  void set_gradient_sync(bool enabled) override;
  bool gradient_sync() const override;
  void reduce_accumulated_gradients() override;
  // Before each forward with gradients: drops the state of a backward pass that failed midway.
  void prepare_for_backward();
  void zero_grad() override;
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  FullState full_state() const override;
  void load_full_state(const FullState& state) override;

  // Which of a chunk's fp32 shards.
  enum class ChunkState { kMaster, kExpAvg, kExpAvgSq };
  // Chunk c's parameters' full values of one shard state, in the chunk's order, shaped as the
  // parameters. Collective over the group.
  std::vector<torch::Tensor> gather_chunk(std::size_t c, ChunkState which) const;
  std::size_t num_chunks() const { return chunk_members_.size(); }
  // Chunked parameter i's chunk, and its place in it.
  std::size_t chunk_of(std::size_t i) const { return chunk_of_.at(i); }

  // Values of chunked parameters' state made one chunk at a time: get(i), for chunked parameters
  // asked for in their order, gathers i's chunk when it is not the one held and forgets a chunk
  // once its last parameter was taken, so that at most one chunk is ever whole. Collective: every
  // rank asks for the same parameters in the same order.
  class ChunkStream {
   public:
    ChunkStream(const GeminiOptimizer& optimizer, ChunkState which) : optimizer_(optimizer), which_(which) {}
    torch::Tensor get(std::size_t i);

   private:
    const GeminiOptimizer& optimizer_;
    ChunkState which_;
    std::size_t held_chunk_ = static_cast<std::size_t>(-1);
    std::vector<torch::Tensor> held_;
  };

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

  // The fp32 master of every chunked parameter, full shape, canonical names, gathered chunk by
  // chunk. Collective over the group.
  std::vector<std::pair<std::string, torch::Tensor>> full_masters() const;
  // Writes chunk c's full values (one tensor per parameter, in the chunk's order) into its
  // masters and working parameters, and, unless empty, into Adam's moments. Local.
  void load_chunk(std::size_t c, const std::vector<torch::Tensor>& masters, const std::vector<torch::Tensor>& exp_avg = {},
                  const std::vector<torch::Tensor>& exp_avg_sq = {});
  // Writes `values` (one full tensor per chunked parameter by canonical name) into the masters
  // and the working parameters, chunk by chunk. Local.
  void load_masters(const std::map<std::string, torch::Tensor>& values);

  const GeminiOptimizerOptions& options() const { return options_; }
  const dist::ProcessGroup& group() const { return *group_; }
  const std::vector<std::string>& param_names() const { return names_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  zero::ChunkedParameters& chunks() const { return *chunks_; }
  const zero::ShardedAdam& chunk_state(std::size_t c) const { return *adam_.at(c); }
  // Where chunk c's state lives now (auto placement settles at the first step).
  const zero::ChunkPlacement& placement(std::size_t c) const;
  // The chunk capacity in elements, and whether it was searched.
  int64_t chunk_capacity() const { return chunk_capacity_; }
  bool chunk_capacity_searched() const { return chunk_capacity_searched_; }
  // Auto placement: true once the first step has measured and placed the optimizer state.
  bool placement_settled() const { return settled_; }
  // What auto placement took off the top of the device's budget before placing optimizer
  // state: the resident parameters plus the warm-up step's working memory (activations,
  // gathered chunks, library workspaces such as cuBLAS's; 0 on a CPU). 0 until settled.
  int64_t placement_overhead_bytes() const { return placement_overhead_bytes_; }
  // Bytes of fp32 optimizer state (master, gradient, two moments) this rank keeps on the device
  // and in host memory, measured from the tensors.
  int64_t optimizer_state_device_bytes() const;
  int64_t optimizer_state_host_bytes() const;
  // Auto placement: call at the start of the first forward; the first step then measures the
  // device's peak since.
  void begin_warmup();
  // A pass that ran out of device memory, as an error that says what helps.
  zero::AllocationError out_of_memory(const std::string& pass, const torch::Device& device, const c10::Error& e) const;

 private:
  void settle_auto_placement();
  void move_optimizer_state(std::size_t c, bool to_host);
  torch::TensorOptions state_options(bool on_host) const;

  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<nn::LayerStack> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  GeminiOptimizerOptions options_;
  amp::PrecisionPolicy policy_;
  torch::Device device_{torch::kCPU};
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
  std::vector<std::size_t> group_of_param_;
  std::vector<std::string> model_names_;
  std::vector<torch::Tensor> model_params_;
  std::vector<torch::Tensor> unsharded_;
  std::vector<std::vector<std::size_t>> chunk_members_;
  std::vector<std::size_t> chunk_of_;  // per chunked parameter
  std::vector<std::shared_ptr<const zero::ShardLayout>> layouts_;
  std::vector<zero::ChunkPlacement> placement_;
  std::vector<std::shared_ptr<zero::ShardedAdam>> adam_;
  int64_t chunk_capacity_ = 0;
  bool chunk_capacity_searched_ = false;
  bool settled_ = true;
  int64_t placement_overhead_bytes_ = 0;
  bool warmup_started_ = false;
  std::unique_ptr<zero::ChunkedParameters> chunks_;
  // Last: destroyed first, so that its hooks are gone before what they use.
  std::unique_ptr<zero::ReduceScatterGradReducer> reducer_;
};

}  // namespace colo
