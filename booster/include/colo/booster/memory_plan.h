#pragma once

#include <colo/amp/precision.h>
#include <colo/nn/model_summary.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace colo {

// What a memory plan is made for: the model (described, not built), the job's size and batch.
struct MemoryPlanInputs {
  nn::ModelSummary model;
  // The world the plugin would run on.
  TORCH_ARG(int, world_size) = 1;
  // Samples per optimizer step over the whole job: each data-parallel rank takes its share, in
  // accumulation_steps passes (a pipelined hybrid_parallel run cuts its share into microbatches
  // itself).
  TORCH_ARG(int64_t, global_batch_size) = 1;
  // Passes per step, all but the last under no_sync (which keeps the gradients whole between
  // synchronised passes).
  TORCH_ARG(int64_t, accumulation_steps) = 1;
  // Every pass synchronises (no no_sync; colo_vit_bench --sync-every-microbatch): the sharding
  // plugins reduce-scatter each pass into their shards, so no whole gradients are kept between passes.
  TORCH_ARG(bool, sync_every_pass) = false;
  // Whether a rank keeps whole gradients between the passes of a step (several passes, no_sync).
 public:
  bool keeps_gradients_between_passes() const { return accumulation_steps_ > 1 && !sync_every_pass_; }
  TORCH_ARG(bool, activation_checkpointing) = false;
  // fp32 values per parameter element the optimizer keeps besides the master (Adam: 2 moments).
  TORCH_ARG(int, optimizer_states) = 2;
  // One device's memory: gemini's auto placement plans against it; unset: not known, and what
  // auto would place is shown on the device.
  TORCH_ARG(std::optional<int64_t>, device_memory_bytes) = std::nullopt;
  // The device is a GPU (host memory is another memory); false: CPU ranks, where "host" state
  // shares the one memory (plans then match what the CPU build allocates).
  TORCH_ARG(bool, device_is_gpu) = true;
  // Saves are asynchronous (SaveOptions::async): the writer's host copy of the state is planned.
  TORCH_ARG(bool, async_checkpoint) = false;
};

// One kind of memory a rank holds.
struct MemoryPart {
  std::string what;
  int64_t bytes = 0;
  bool on_host = false;   // host memory (pinned or not); else the rank's device
  bool estimate = false;  // activations and working buffers: estimated, not counted from tensors
};

struct RankMemory {
  std::string ranks;     // "0", or "0-7" for ranks that hold the same
  std::string position;  // "dp 0, pp 1, tp 0" (empty for plain data parallelism)
  std::vector<MemoryPart> parts;
  // The parameter chunks this rank gathers and reduce-scatters, one collective each (gemini, and
  // hybrid_parallel at zero_stage 3): what a collective's fixed cost is paid for, where the
  // bucketed engines pay it per bucket_cap_mb. 0: its parameters are not chunked.
  int64_t chunks = 0;
  int64_t device_bytes() const;
  int64_t host_bytes() const;
  // The bytes of the parts whose `what` starts with `prefix` (device and host).
  int64_t bytes_of(const std::string& prefix) const;
};

// A plugin's plan for each rank: what it would allocate and where, without allocating it
// (Booster::plan_memory). Figures for model state are exact (the plugins' own layout functions
// make them; a test holds them against the tensors a boosted model holds); activations and
// working buffers are estimates from the layers' ActivationFootprint (see docs/memory_planning.md).
struct MemoryPlan {
  std::string plugin;
  std::string options;  // "key=value ..."
  int world_size = 1;
  std::vector<RankMemory> ranks;
  std::vector<std::string> notes;

  // The layout the plan is for: data-parallel ranks (the global batch's split), and whether the
  // plugin runs a pipeline (which cuts each rank's batch into microbatches itself).
  int data_parallel_size = 1;
  bool pipelined = false;

  // Samples per forward/backward pass on a data-parallel rank: global / (dp × accumulation),
  // through per_rank_batch (parallelize.h), the run's own split: throws std::invalid_argument
  // when the global batch does not split so.
  static int64_t samples_per_pass(const MemoryPlanInputs& inputs, int dp);

  // A table: per rank (group), each part with its bytes and place, the totals.
  std::string to_string() const;
};

namespace memory_planning {

// Bytes of element type `dtype` for n elements.
int64_t bytes(int64_t elements, c10::ScalarType dtype);

// Activations one rank keeps for backward over layers [begin, end) of the summary, for
// `samples` samples held at once, in `precision`'s compute dtype, with tensor parallelism over
// `tp` ranks (the layers' tensor-parallel parts divided) and `sequence_parallel` (the replicated
// rest divided too): each layer keeps its footprint, or, checkpointed, only its input; backward
// adds one layer's recomputed activations and gradient buffers of the widest layer. Under fp8 the
// float8 linears' inputs count one byte each and their weights' float8 copies once per pass
// (ActivationFootprint::kept_float8, float8_weights). Layers without a footprint count 0 and are
// named in `unknown`.
int64_t activation_bytes(const nn::ModelSummary& model, std::size_t begin, std::size_t end, int64_t samples,
                         amp::Precision precision, bool checkpointing, int tp, bool sequence_parallel,
                         std::vector<std::string>* unknown);

// The model state a replicated-weights engine holds for this rank's parameters (trainable ones
// of `numels` elements, in forward order, and `frozen` elements more): the working weights, the
// bucketed all-reduce's gradient buckets (ddp::BucketedAllReduce), fp32 masters and their
// gradients (MixedPrecisionOptimizer) and the optimizer's state. torch_ddp, and hybrid_parallel
// at zero_stage 0.
struct ReplicatedEngine {
  amp::Precision precision = amp::Precision::kFp32;
  bool master_weights = true;
  double bucket_cap_mb = 25.0;
  bool gradient_as_bucket_view = true;
  std::optional<c10::ScalarType> communication_dtype;
  int optimizer_states = 2;
};
std::vector<MemoryPart> replicated_engine_parts(const std::vector<int64_t>& numels, int64_t frozen,
                                                const ReplicatedEngine& engine);

// The same for ZeroOptimizer over `dp` ranks (low_level_zero, hybrid_parallel at zero_stage 1/2):
// the working weights in the all-gather's bucket buffers and the working shard, the fp32 shard
// state (master, gradient, moments; in host memory under cpu_offload), stage 1's gradient
// buckets, the staging pools of offload.
struct ZeroEngine {
  int stage = 1;
  amp::Precision precision = amp::Precision::kFp32;
  double bucket_cap_mb = 25.0;
  bool cpu_offload = false;
  std::optional<c10::ScalarType> communication_dtype;
  int dp = 1;
  int optimizer_states = 2;
  bool device_is_gpu = true;
};
std::vector<MemoryPart> zero_engine_parts(const std::vector<int64_t>& numels, int64_t frozen, const ZeroEngine& engine);

// The same for gemini's chunks over `dp` ranks under hybrid_parallel's zero_stage 3
// (GeminiChunkOwner with every chunk sharded; optimizer state in host memory under cpu_offload):
// the working shards, the fp32 shard state, and what a step gathers. `layer_of`: each trainable
// parameter's layer (the widest layer's chunks bound a plain forward's gathered window);
// `pipelined`: steps run through execute_pipeline, which gathers every chunk of the stage for the
// step and accumulates the microbatches' gradients whole.
struct ChunkedEngine {
  amp::Precision precision = amp::Precision::kFp32;
  bool cpu_offload = false;
  std::optional<c10::ScalarType> communication_dtype;
  int dp = 1;
  int optimizer_states = 2;
  bool device_is_gpu = true;
  bool pipelined = false;
  int64_t max_prefetch = 2;
  std::optional<double> chunk_size_mb;  // unset: searched
};

// The trainable parameters' element counts in forward order over layers [begin, end), and the
// frozen elements; `share(name, numel)` gives what this rank holds of each (tensor parallelism).
struct RankParameters {
  std::vector<int64_t> trainable;
  std::vector<std::size_t> layer_of;  // per trainable parameter, its layer's index in the model
  std::vector<std::string> names;     // per trainable parameter
  int64_t frozen = 0;
};
RankParameters rank_parameters(const nn::ModelSummary& model, std::size_t begin, std::size_t end,
                               const std::function<int64_t(const std::string&, int64_t)>& share = nullptr);

// ChunkedEngine's parts for this rank's parameters (`parameters.trainable` in forward order, with
// their layers and names).
// `chunks`, when given, receives the number of chunks (RankMemory::chunks).
std::vector<MemoryPart> chunked_engine_parts(const RankParameters& parameters, const ChunkedEngine& engine,
                                             int64_t* chunks = nullptr);

// "key=value key=value".
std::string options_text(const std::map<std::string, std::string>& options);

// The plan of a plugin whose ranks all hold the same (data parallelism over the world): `parts`
// (model state) plus the whole model's activations at the per-rank batch, in `precision`.
MemoryPlan data_parallel_plan(const std::string& plugin, const std::map<std::string, std::string>& options,
                              const MemoryPlanInputs& inputs, std::vector<MemoryPart> parts, amp::Precision precision);

}  // namespace memory_planning

}  // namespace colo
