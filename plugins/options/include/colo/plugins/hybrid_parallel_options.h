#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/booster/plugin_options.h>
#include <colo/pipeline/partition.h>
#include <colo/pipeline/schedule.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colo {

// hybrid_parallel's options, parsed and validated together from the plugin's string map: one
// error lists every problem (and the valid keys, for an unknown one); written back to it by
// to_options(): PluginRegistry::global().create(HybridParallelOptions().tp_size(2).pp_size(2)...).
struct HybridParallelOptions {
  // The mesh: dp is what the world leaves (world / (tp * pp)).
  TORCH_ARG(int, tp_size) = 1;
  // Split the tokens over the tp ranks between the parallel regions (needs tp_size > 1); the key
  // is enable_sequence_parallelism.
  TORCH_ARG(bool, sequence_parallel) = false;
  // How the tp ranks split the layers (tensor_parallel_mode.h): 1d (Megatron), 2d (a q × q grid,
  // tp_size = q²), 2.5d (tp_depth layers of it, tp_size = q² · tp_depth) or 3d (tp_size = q³).
  // Only 1d is built: the plugin refuses the others, naming what is missing.
  TORCH_ARG(std::string, tp_mode) = "1d";
  TORCH_ARG(int, tp_depth) = 1;
  TORCH_ARG(int, pp_size) = 1;
  // Microbatches per step: a count, or a size (one of the two when pp_size > 1; 0 = unset).
  TORCH_ARG(int64_t, num_microbatches) = 0;
  TORCH_ARG(int64_t, microbatch_size) = 0;
  // Samples per microbatch of a forward-only pass (evaluation); 0: the batch in 2 x pp_size
  // microbatches (eval_microbatches says why).
  TORCH_ARG(int64_t, eval_microbatch_size) = 0;
  // The training schedule: a name in pipeline::builtin_schedules(), or the actions of a file
  // (pipeline/schedule_text.h) read, validated and simulated when the options are parsed; the file
  // also sets num_microbatches and num_model_chunks. Give one of the two.
  TORCH_ARG(std::string, pp_style) = "1f1b";
  TORCH_ARG(std::string, pp_schedule_file) = "";
  // No key: parse() reads it from pp_schedule_file (to_options() writes that file's name).
  TORCH_ARG(std::optional<pipeline::Schedule>, schedule_from_file) = std::nullopt;
  TORCH_ARG(int, num_model_chunks) = 1;
  // uniform or balanced; kExplicit has no key: parse() sets it where layers_per_stage is given.
  // Uniform counts blocks: the input layer goes with the first, the head with the last
  // (pipeline::stack_partition_options).
  TORCH_ARG(pipeline::PartitionMethod, partition) = pipeline::PartitionMethod::kUniform;
  TORCH_ARG(std::vector<int>, layers_per_stage) = {};
  // The dp axis: 0 all-reduce (DDP), 1 / 2 ZeRO over the dp group, 3 gemini's chunks over it
  // (every chunk sharded, gathered per layer in a plain forward and per step under a pipeline:
  // PipelineModel).
  TORCH_ARG(int, zero_stage) = 0;
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  // zero_stage 3: MiB of parameters (in the compute dtype) per chunk; unset: searched from the
  // layer sizes (GeminiChunkOptions::chunk_size_mb).
  TORCH_ARG(std::optional<double>, chunk_size_mb) = std::nullopt;
  TORCH_ARG(bool, overlap_communication) = true;
  // The fp32 optimizer state (masters, gradient shards, moments) in host memory, stepped by the
  // CPU (zero_stage 1, 2 and 3).
  TORCH_ARG(bool, cpu_offload) = false;
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
  // Precision (PrecisionOptions' keys).
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  TORCH_ARG(double, max_grad_norm) = 0.0;
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // precision=fp8's scaling (PrecisionOptions' fp8_* keys).
  TORCH_ARG(nn::Fp8Recipe, fp8) = {};
  // Training passes of each model chunk as CUDA graphs (nn::CudaGraphedStack, a capture slot per
  // microbatch the chunk's stage holds at once): tp_size 1, zero_stage 0, any schedule but
  // zero_bubble, any data-parallel size (the reduction runs after the backward graphs).
  TORCH_ARG(bool, cuda_graphs) = false;

 public:
  // Whether steps run through execute_pipeline: pp_size > 1, or microbatches configured.
  bool pipelined() const { return pp_size_ > 1 || num_microbatches_ > 0 || microbatch_size_ > 0; }
  // The training schedule for `microbatches` per step: the file's (for its own count only), or
  // pp_style's. Throws std::invalid_argument for a count it has no schedule for.
  pipeline::Schedule training_schedule(int microbatches) const;
  // Whether that schedule's B leaves the weight gradient to a later W.
  bool splits_backward() const;

  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key.
  static HybridParallelOptions parse(const PluginOptions& options);
  // The keys parse() reads, for the fields that differ from the defaults: parse(to_options())
  // gives these options back, and a default struct gives an empty map. What parse derives is
  // written as the key it came from: a schedule file's schedule, chunks and microbatches as
  // pp_schedule_file; the explicit partition as layers_per_stage. Throws std::invalid_argument
  // for what no key holds (a schedule_from_file without its file, an explicit partition without
  // layers_per_stage, a communication_dtype other than fp32, fp16 or bf16).
  PluginOptions to_options() const;

  static constexpr const char* kPluginName = "hybrid_parallel";
};

}  // namespace colo
