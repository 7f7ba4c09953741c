#pragma once

#include <colo/dist/process_group.h>
#include <colo/nn/vit_config.h>
#include <colo/planner/cluster.h>
#include <colo/planner/profile.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace colo::planner {

// What colo-plan profile measures (measure_profile): each layer kind of `model` in `precision`
// at each micro-batch size, for each tensor-parallel shard a tp size gives one rank (built on this
// one device: the block's linears cut to a rank's share; under sequence parallelism its norms and
// residuals on 1/tp of the tokens, the linears' inputs gathered locally), with and without
// activation checkpointing and with the backward split as zero bubble splits it; Adam's step per
// element; on a GPU also Adam on the host and pinned host<->device copies; a matmul's rate.
struct ProfileOptions {
  explicit ProfileOptions(nn::ViTConfig model) : model_(std::move(model)) {}
  TORCH_ARG(nn::ViTConfig, model);
  TORCH_ARG(std::string, precision) = "bf16";
  TORCH_ARG(std::vector<int64_t>, microbatches) = std::vector<int64_t>{1, 2, 4, 8, 16, 32};
  TORCH_ARG(std::vector<int>, tp_sizes) = std::vector<int>{1};
  TORCH_ARG(bool, sequence_parallel) = true;  // also the sp shard of every tp > 1
  TORCH_ARG(c10::Device, device) = c10::Device(c10::kCPU);
  TORCH_ARG(int, warmup) = 2;
  TORCH_ARG(int, repeats) = 5;  // the median of these
  // Calls of a layer timed back to back, without a synchronisation between them (0: 4 on a GPU,
  // 1 on the CPU). Inside a step the CPU launches one layer while the GPU runs the one before,
  // so a small micro-batch's layer costs max(launch, kernels), not their sum plus a
  // synchronisation: timed alone, a small micro-batch's block costs more than inside a step
  // (docs/planning.md, "The error, measured").
  TORCH_ARG(int, back_to_back) = 0;
  // Also time each layer with one call, and keep what a call costs beyond it (detail::
  // marginal_seconds): the first call's wait for the device and the last one's tail drop out,
  // which back-to-back timing only divides by the calls (on four H200s a ViT-L block at 32
  // images was priced 24 % above its cost inside a pipeline; docs/planning.md). Needs 2 or more
  // calls back to back; doubles the layer timing.
  TORCH_ARG(bool, marginal) = false;
  // Encoder blocks run in one call, as a pipeline stage or a whole model runs them (0: 4 on a GPU,
  // 1 on the CPU); a block's times are the chain's divided by its length. One block timed alone
  // pays whatever a forward or backward call costs beyond its blocks, which a stage of several
  // blocks shares: on four H200s a ViT-L block at 32 images was priced at 1.91 ms alone against
  // ~1.2-1.4 ms inside a pipeline, 1.41 ms four to a call (benchmarks/RESULTS.md, 2026-11-27).
  TORCH_ARG(int, blocks_per_call) = 0;
  // Elements of the Adam measurements (at least two sizes: a line is fitted through them).
  TORCH_ARG(std::vector<int64_t>, optimizer_sizes) = std::vector<int64_t>{1 << 20, 1 << 22, 1 << 24};
  // The plugins' own step costs (measure_plugin_overheads): off in the library's default (it loads
  // the plugins and trains the model), on in colo-plan profile. The model is cut to
  // `overhead_depth` blocks (its own depth when smaller) so torch_ddp's whole copy fits where the
  // full model would not; `overhead_steps` timed steps at `overhead_samples` images per round (0:
  // the largest of `microbatches`).
  TORCH_ARG(bool, plugin_overheads) = false;
  TORCH_ARG(int64_t, overhead_depth) = 6;
  TORCH_ARG(int64_t, overhead_samples) = 0;
  TORCH_ARG(int, overhead_steps) = 6;
};

// Measures the profile. `progress` (may be empty) gets a line per measurement. Throws
// std::invalid_argument for options that cannot be measured (a tp size that does not divide the
// heads, fp8 where float8 products are missing).
CostProfile measure_profile(const ProfileOptions& options, const std::function<void(const std::string&)>& progress = {});

// What gemini (static), low_level_zero at ZeRO-1 and at ZeRO-2 cost a step beyond torch_ddp on
// one rank of `options.device()` (no other ranks: the communication is the cluster model's), per
// parameter: `repeats` rounds of a step of each on the ViT cut to overhead_depth blocks, the
// medians' difference. measure_profile calls it when options.plugin_overheads() is on. Throws
// std::invalid_argument for a depth or step count below 1 or a negative batch (0: the largest of
// `microbatches`), and outside colo-run's one-rank world.
std::vector<PluginOverhead> measure_plugin_overheads(const ProfileOptions& options,
                                                     const std::function<void(const std::string&)>& progress = {});

// An n×n×n matrix product's rate on `device` in `dtype` (n = 8192 on a GPU, 1024 on the CPU), in
// TFLOP/s: what the measured cluster takes as its peak.
double measure_matmul_tflops(const c10::Device& device, c10::ScalarType dtype);

// colo-plan profile --collectives: every collective over `world` (the ranks colo-run started,
// Gloo on CPU ranks, NCCL on GPUs) at sizes from 4 KiB to `largest_bytes`, a line of latency +
// bytes / bus bandwidth fitted through each (collective_model.h's convention), and how much of
// an all-reduce a matmul beside it hides (overlap_efficiency). Every rank takes part; the result
// is a cluster of one node of world->size() ranks, `device` and `memory_gib` per rank.
// Each size is timed as a step meets its collectives: `repeats` calls back to back, matmuls for
// about `between_seconds` before each and no barrier, and a call costs the trimmed mean of their
// times (detail::call_seconds), not the median of calls after a barrier each: between CPU ranks a
// Gloo collective takes either ~0.5 ms or ~4 ms at any size up to 1 MiB, a step pays the mean,
// and a median lands on either mode (docs/planning.md, "How collectives are measured"). Then what a
// collective costs beyond its line when waited on right after computation (see
// synchronous_between_seconds).
struct CollectiveProfileOptions {
  TORCH_ARG(int64_t, largest_bytes) = 16 << 20;
  TORCH_ARG(int, repeats) = 32;  // calls timed per collective and size
  TORCH_ARG(double, between_seconds) = 2e-3;  // computation before each call (0: none)
  // The synchronous extra (ClusterSpec::synchronous_extra_latency_s): rounds of this much
  // computation, then an all-reduce waited on at once, against the computation alone, at 16 KiB
  // to 1 MiB; about a layer's time between tensor parallelism's collectives (0: not measured).
  TORCH_ARG(double, synchronous_between_seconds) = 8e-3;
  TORCH_ARG(double, memory_gib) = 0;  // 0: this machine's memory / ranks (CPU), the GPU's otherwise
};
ClusterSpec measure_collectives(dist::ProcessGroup& world, const c10::Device& device,
                                const CollectiveProfileOptions& options = {},
                                const std::function<void(const std::string&)>& progress = {});

}  // namespace colo::planner
