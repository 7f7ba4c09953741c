#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision.h>
#include <colo/booster/plugin_options.h>
#include <colo/pipeline/partition.h>
#include <colo/pipeline/schedule.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace colo::plugins {

// hybrid_parallel's options, parsed and validated together from the plugin's string map: one
// error lists every problem (and the valid keys, for an unknown one).
struct HybridParallelOptions {
  // The mesh: dp is what the world leaves (world / (tp * pp)).
  TORCH_ARG(int, tp_size) = 1;
  // Split the tokens over the tp ranks between the parallel regions (needs tp_size > 1).
  TORCH_ARG(bool, sequence_parallel) = false;
  TORCH_ARG(int, pp_size) = 1;
  // Microbatches per step: a count, or a size (one of the two when pp_size > 1; 0 = unset).
  TORCH_ARG(int64_t, num_microbatches) = 0;
  TORCH_ARG(int64_t, microbatch_size) = 0;
  // Samples per microbatch of a forward-only pass (evaluation); 0: the batch in 2 x pp_size
  // microbatches (eval_microbatches says why).
  TORCH_ARG(int64_t, eval_microbatch_size) = 0;
  TORCH_ARG(pipeline::ScheduleStyle, pp_style) = pipeline::ScheduleStyle::kOneFOneB;
  TORCH_ARG(int, num_model_chunks) = 1;
  TORCH_ARG(pipeline::PartitionMethod, partition) = pipeline::PartitionMethod::kUniform;
  TORCH_ARG(std::vector<int>, layers_per_stage) = {};
  // The dp axis: 0 all-reduce (DDP), 1 / 2 ZeRO over the dp group.
  TORCH_ARG(int, zero_stage) = 0;
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  TORCH_ARG(bool, overlap_communication) = true;
  TORCH_ARG(bool, cpu_offload) = false;
  TORCH_ARG(std::optional<c10::ScalarType>, communication_dtype) = std::nullopt;
  // Precision (PrecisionOptions' keys).
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  TORCH_ARG(double, max_grad_norm) = 0.0;
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // Training passes of each model chunk as CUDA graphs (nn::CudaGraphedStack, a capture slot per
  // microbatch the chunk's stage holds at once): tp_size 1, zero_stage 0, any schedule but
  // zero_bubble, any data-parallel size (the reduction runs after the backward graphs).
  TORCH_ARG(bool, cuda_graphs) = false;


 public:
  // Whether steps run through execute_pipeline: pp_size > 1, or microbatches configured.
  bool pipelined() const { return pp_size_ > 1 || num_microbatches_ > 0 || microbatch_size_ > 0; }

  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key.
  static HybridParallelOptions parse(const PluginOptions& options);
};

}  // namespace colo::plugins
