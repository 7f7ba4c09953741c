#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/booster/plugin_options.h>
#include <torch/arg.h>

namespace colo {

// torch_ddp's options, parsed and validated from the plugin's string map in one step, and
// written back to it: PluginRegistry::global().create(TorchDdpOptions().precision(...)).
struct TorchDdpOptions {
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  TORCH_ARG(bool, find_unused_parameters) = false;
  TORCH_ARG(bool, gradient_as_bucket_view) = true;
  TORCH_ARG(bool, broadcast_buffers) = true;
  TORCH_ARG(bool, overlap_communication) = true;
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  TORCH_ARG(bool, master_weights) = true;
  TORCH_ARG(double, max_grad_norm) = 0.0;
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  // precision=fp8's scaling (PrecisionOptions' fp8_* keys).
  TORCH_ARG(nn::Fp8Recipe, fp8) = {};
  // The model's training forward and backward as CUDA graphs (nn::CudaGraphedStack): one GPU
  // per model replica, no activation checkpointing; over several ranks the all-reduce runs after
  // the backward graph (reduce_after_graph_backward), not overlapped with it.
  TORCH_ARG(bool, cuda_graphs) = false;

 public:
  // Throws std::invalid_argument listing every ill-typed value, violated rule and unknown key
  // (with the valid keys).
  static TorchDdpOptions parse(const PluginOptions& options);
  // The keys parse() reads, for the fields that differ from the defaults: parse(to_options())
  // gives these options back, and a default struct gives an empty map.
  PluginOptions to_options() const;

  static constexpr const char* kPluginName = "torch_ddp";
};

}  // namespace colo
