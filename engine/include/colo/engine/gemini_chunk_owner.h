#pragma once
// gemini's chunks and everything that decides where they live, owned by the model's side
// (Colossal-AI's GeminiManager with its ChunkManager): the chunk plan, the placement (static, or
// auto after a measured warm-up step), the chunked parameters and the gradient reducer. The
// model (GeminiModel) holds it and gathers through it; the optimizer (GeminiOptimizer) borrows
// it to step each chunk's state; checkpoints stream through it (GeminiStateStreamer). So the
// model never calls into the optimizer.

#include <colo/amp/precision.h>
#include <colo/amp/precision_policy.h>
#include <colo/nn/layer_stack.h>
#include <colo/zero/chunk_plan.h>
#include <torch/arg.h>
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
}  // namespace colo::zero

namespace colo {

enum class GeminiPlacementPolicy { kStatic, kAuto };

struct GeminiChunkOptions {
  // Every violated rule, one per entry (empty: valid).
  std::vector<std::string> violations() const;

  // Who is asking, as errors name it ("gemini", "hybrid_parallel"): the engine names no plugin itself.
  TORCH_ARG(std::string, caller) = "GeminiChunkOwner";
  // The working weights' dtype (fp32, bf16, fp16). Masters are fp32 whatever it is.
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
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
// moves optimizer state at the first step): shared by GeminiChunkOwner and the memory plan.
struct GeminiChunking {
  int64_t capacity = 0;     // elements a chunk may hold
  bool searched = false;    // chosen by zero::plan_chunks' search
  std::vector<std::vector<std::size_t>> chunks;  // parameter indices per chunk, forward order
  std::vector<int64_t> chunk_numels;
  std::vector<zero::ChunkPlacement> placement;
};

// ZeRO stage 3 with chunks (Colossal-AI's Gemini) over a data-parallel group: the chunks of a
// model's trainable parameters and their fp32 state.
//
// The constructor, in order:
//   1. the optimizer's parameters (requiring grad), in the model's canonical (forward) order, are
//      the chunked ones and keep their exact fp32 values; every floating model parameter is cast
//      to the compute dtype (the optimizer is only read: which parameters, which groups);
//   2. plan() packs them into chunks; the placement (static fractions, or auto: all optimizer
//      state in host memory until the first step has measured the rest) says where each chunk's
//      state lives;
//   3. per chunk, its fp32 state, a zero::ShardedAdam over its one-bucket ShardLayout: master
//      shard, gradient shard and moments, on the device or in host memory;
//   4. zero::ChunkedParameters: the parameters become views into per-chunk buffers; sharded
//      chunks keep this rank's shard and release the buffer (in fp32 with the state on the same
//      side, the shard IS the master: no second copy);
//   5. a zero::ReduceScatterGradReducer over the chunks in reverse (backward) order, adding each
//      chunk's averaged gradient into its gradient shard and releasing the chunk as soon as its
//      gradients are taken.
class GeminiChunkOwner {
 public:
  // The chunks of parameters of `numels` elements (forward order) and their initial placement;
  // `on_gpu`: the device is a GPU (auto placement keeps parameter shards there).
  static GeminiChunking plan(const std::vector<int64_t>& numels, const std::vector<std::string>& names,
                             const GeminiChunkOptions& options, bool on_gpu);

  // The model must be on its device, with the same values on every rank of `group`. A model split
  // by tensor parallelism is chunked as this rank's pieces (`group` is then the data-parallel
  // group of ranks holding the same pieces). Throws std::invalid_argument for an optimizer whose
  // state cannot be kept in Adam shards (listing those it can), invalid options, or an optimizer
  // parameter that is not a model parameter; nothing changes before these checks.
  GeminiChunkOwner(std::shared_ptr<nn::LayerStack> model, const std::shared_ptr<torch::optim::Optimizer>& optimizer,
                   std::shared_ptr<dist::ProcessGroup> group, GeminiChunkOptions options);
  ~GeminiChunkOwner();
  GeminiChunkOwner(const GeminiChunkOwner&) = delete;
  GeminiChunkOwner& operator=(const GeminiChunkOwner&) = delete;

  const GeminiChunkOptions& options() const { return options_; }
  const amp::PrecisionPolicy& precision_policy() const { return policy_; }
  const std::shared_ptr<nn::LayerStack>& model() const { return model_; }
  const std::shared_ptr<dist::ProcessGroup>& group() const { return group_; }
  const torch::Device& device() const { return device_; }

  // The chunked parameters (canonical order, canonical names) and each one's optimizer group;
  // every model parameter, chunked or not.
  const std::vector<std::string>& param_names() const { return names_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<std::size_t>& param_groups() const { return group_of_param_; }
  // Per chunked parameter, the distinct pieces tensor parallelism cut it into (1: whole; nn::pieces_of).
  const std::vector<int64_t>& tp_pieces() const { return tp_pieces_; }
  const std::vector<std::string>& model_param_names() const { return model_names_; }
  const std::vector<torch::Tensor>& model_params() const { return model_params_; }

  zero::ChunkedParameters& chunks() const { return *chunks_; }
  std::size_t num_chunks() const { return chunk_members_.size(); }
  // Chunk c's parameters (indices into params()), in its order; chunked parameter i's chunk.
  const std::vector<std::size_t>& chunk_members(std::size_t c) const { return chunk_members_.at(c); }
  std::size_t chunk_of(std::size_t i) const { return chunk_of_.at(i); }
  // Chunk c's fp32 state (master, gradient and moment shards, step count), where its placement says.
  zero::ShardedAdam& chunk_state(std::size_t c) const { return *adam_.at(c); }
  // The chunk capacity in elements, and whether it was searched.
  int64_t chunk_capacity() const { return chunk_capacity_; }
  bool chunk_capacity_searched() const { return chunk_capacity_searched_; }

  // Where chunk c's state lives now (auto placement settles at the first step).
  const zero::ChunkPlacement& placement(std::size_t c) const;
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
  // Auto placement: the model calls this at the start of the first forward with gradients; the
  // first step's settle_placement() then measures the device's peak since.
  void begin_warmup();
  // Auto placement, once, before the first update (nothing after, or under static placement):
  // each chunk's optimizer state moves where the measured budget allows.
  void settle_placement();

  // The gradient path: before each forward with gradients (drops the state of a backward pass
  // that failed midway); the synchronisation switch; the end of the gradients' reduction before
  // a step; zeroing them, the unchunked parameters' ordinary gradients too.
  void prepare_for_backward();
  void set_gradient_sync(bool enabled);
  bool gradient_sync() const;
  void reduce_accumulated_gradients();
  void finalize_gradients();
  void zero_grad();

  // A pass that ran out of device memory, as an error that says what helps.
  zero::AllocationError out_of_memory(const std::string& pass, const torch::Device& device, const c10::Error& e) const;

 private:
  void move_optimizer_state(std::size_t c, bool to_host);
  torch::TensorOptions state_options(bool on_host) const;

  std::shared_ptr<nn::LayerStack> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  GeminiChunkOptions options_;
  amp::PrecisionPolicy policy_;
  torch::Device device_{torch::kCPU};
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
  std::vector<std::size_t> group_of_param_;
  std::vector<int64_t> tp_pieces_;
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
