#pragma once

#include <colo/nn/vit_config.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colo::planner {

// Seconds one layer takes for a micro-batch of `samples`, measured (colo-plan profile):
//   forward                  forward with autograd recording (what training runs)
//   backward                 the whole backward (input and weight gradients)
//   input_grad, weight_grad  the backward split as zero bubble splits it (B and W)
//   checkpointed_forward     forward under activation checkpointing (no graph kept)
//   checkpointed_backward    its backward: the recomputed forward, then the backward
struct LayerTimes {
  int64_t samples = 0;
  double forward = 0;
  double backward = 0;
  double input_grad = 0;
  double weight_grad = 0;
  double checkpointed_forward = 0;
  double checkpointed_backward = 0;
};

// One layer kind ("patch_embedding", "encoder_block", "head") at one tensor-parallel shard: what
// rank 0 of a tp group computes (the block's heads and hidden units divided by tp; under
// sequence parallelism its norms and residuals on 1/tp of the tokens), measured on one device.
struct LayerProfile {
  std::string layer;
  int tp = 1;
  bool sequence_parallel = false;
  std::vector<LayerTimes> points;  // by increasing samples
};

// Adam's step over n fp32 elements (and the copy back to the working dtype): fixed + n × per element.
struct OptimizerTimes {
  double fixed_s = 0;
  double per_element_s = 0;
  double seconds(double elements) const { return elements > 0 ? fixed_s + elements * per_element_s : 0.0; }
};

// What a plugin's step costs beyond torch_ddp's on one rank, per parameter (measure_plugin_overheads):
// its own bookkeeping around the layers (gemini's chunks, ZeRO's flat buffers and fp32 masters),
// which no layer's time holds. Measured on the model cut to `depth` blocks at `samples` images;
// the step model prices a layout's rank with per_element_s × the parameters it holds whole.
struct PluginOverhead {
  std::string key;  // plugin_overhead_key: "gemini", "low_level_zero zero1", "low_level_zero zero2"
  int64_t depth = 0;
  int64_t samples = 0;
  int64_t elements = 0;        // the measured model's parameters
  double step_s = 0;           // the plugin's step, the median of the rounds
  double baseline_step_s = 0;  // torch_ddp's
  double per_element_s = 0;    // detail::overhead_per_element
};

// The key a layout's plugin overhead is found by: "low_level_zero zero<stage>", else the plugin.
std::string plugin_overhead_key(const std::string& plugin, int zero_stage);
// The keys measure_plugin_overheads measures, in its order (what a profile file may carry).
const std::vector<std::string>& plugin_overhead_keys();

// A profile file: per-layer costs of one model on one device in one precision. Portable: the
// planner reads it on any machine.
struct CostProfile {
  std::string source;     // the file it came from
  std::string device;     // "cpu", "cuda" (with the device's name when known)
  std::string precision;  // fp32, bf16, fp16, fp8
  int threads = 0;        // intra-op threads of the CPU measurement
  int blocks_per_call = 1;  // encoder blocks chained in each timed call (ProfileOptions::blocks_per_call)
  nn::ViTConfig model;
  std::vector<LayerProfile> layers;
  OptimizerTimes device_optimizer;
  std::optional<OptimizerTimes> host_optimizer;  // CUDA: Adam on the CPU (offloaded state)
  double host_to_device_GBps = 0;                // CUDA: pinned copies
  double device_to_host_GBps = 0;
  double matmul_tflops = 0;  // an n×n×n product in the precision, this device
  std::vector<PluginOverhead> plugin_overheads;  // empty: not measured (files before them, --no-plugin-overheads)

  // The overhead measured for `key`, or null.
  const PluginOverhead* overhead(const std::string& key) const;

  // Whether a layer kind was measured at this shard.
  bool has(const std::string& layer, int tp, bool sequence_parallel) const;
  // The times at `samples`, interpolated linearly between measured sizes (extrapolated along the
  // nearest segment outside them, never below a tenth of the smallest measurement). Throws
  // std::invalid_argument naming what to measure when the shard was not profiled.
  LayerTimes at(const std::string& layer, int tp, bool sequence_parallel, int64_t samples) const;
};

// Reads a profile file. Throws PlannerFileError naming the file, line and field.
CostProfile read_profile_file(const std::string& path);
CostProfile parse_profile(const std::string& text, const std::string& source);
std::string to_json(const CostProfile& profile);

// Whether `profile` was measured for `model`'s shapes (width, depth aside: one block stands for
// all); the first difference in words otherwise.
std::optional<std::string> profile_mismatch(const CostProfile& profile, const nn::ViTConfig& model);

}  // namespace colo::planner
