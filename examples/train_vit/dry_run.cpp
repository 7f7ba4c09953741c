#include "dry_run.h"

#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/data/auto_augment.h>
#include <colo/engine/memory_size.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/resnet.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "layout_checks.h"

namespace train_vit {

int print_memory_plan(const TrainOptions& o, const colo::nn::ViTConfig& config, const colo::dist::Environment& env) {
  colo::MemoryPlanInputs inputs;
  // From the configuration's shapes: no layer is built, nothing is allocated.
  inputs.model = is_resnet(o.model)
                     ? colo::nn::summarize_resnet(colo::nn::ResNetConfig::preset(o.model)
                                                      .in_channels(config.in_channels())
                                                      .num_classes(config.num_classes()))
                     : colo::nn::summarize_vision_transformer(config);
  const int world = o.plan_world_size > 0 ? o.plan_world_size : std::max(1, env.world_size);
  inputs.world_size(world)
      .global_batch_size(o.batch_size)
      .accumulation_steps(o.grad_accum)
      .sync_every_pass(o.sync_every_microbatch)
      .activation_checkpointing(o.activation_checkpointing)
      .optimizer_states(o.optimizer == "adamw" ? 2 : 1)
      .async_checkpoint(o.save_async);
  if (o.gpu_memory_gib > 0) {
    // parse_train_options range-checked it (memory_size_problem).
    inputs.device_is_gpu(true).device_memory_bytes(colo::memory_size_bytes(o.gpu_memory_gib, colo::kGibibytes));
  } else if (torch::cuda::is_available()) {
    inputs.device_is_gpu(true);
  } else {
    inputs.device_is_gpu(false);
  }
  colo::MemoryPlan plan;
  try {
    plan = colo::Booster::plan_memory(o.plugin, o.plugin_options, inputs);
  } catch (const colo::PluginError& e) {
    throw UsageError(fmt::format("--plugin {}: {}", o.plugin, e.what()));
  } catch (const std::invalid_argument& e) {
    // Where the options came from, when a config file set some: not all of them are --plugin-opt's.
    const std::string origins =
        o.plugin_option_sources.empty() ? "" : fmt::format(" (its options: {})", plugin_option_origins(o));
    throw UsageError(fmt::format("--plugin {} cannot plan this run{}: {}", o.plugin, origins, e.what()));
  }
  // The run's own checks of the layout, after the plugin's: the same function the run calls.
  check_layout(o, plan.data_parallel_size, plan.pipelined);
  if (env.rank != 0) return 0;
  for (const auto& note : o.notes) fmt::print("{}\n", note);
  fmt::print("train_vit --dry-run: {} on {} {} rank{}, global batch {} in {} pass{} per step{}{}\n", o.model, world,
             inputs.device_is_gpu() ? "GPU" : "CPU", world == 1 ? "" : "s", o.batch_size, o.grad_accum,
             o.grad_accum == 1 ? "" : "es", o.grad_accum > 1 && o.sync_every_microbatch ? " (each synchronised)" : "",
             o.activation_checkpointing ? ", activation checkpointing" : "");
  fmt::print("model: {:.2f} M parameters ({:.2f} M trainable), {} layers; nothing was allocated\n",
             static_cast<double>(inputs.model.num_parameters()) / 1e6,
             static_cast<double>(inputs.model.num_trainable()) / 1e6, inputs.model.layers.size());
  // The training augmentation's policy and erasing, checked already (parse_train_options).
  if (!o.rand_augment.empty()) {
    fmt::print("augment: {}\n", colo::data::AugmentPolicy::rand_augment(o.rand_augment).description());
  }
  if (!o.auto_augment.empty()) {
    fmt::print("augment: {}\n", colo::data::AugmentPolicy::auto_augment(o.auto_augment).description());
  }
  if (o.reprob > 0) fmt::print("augment: random erasing with probability {:g}, mode {}\n", o.reprob, o.remode);
  fmt::print("{}", plan.to_string());
  std::fflush(stdout);
  return 0;
}

}  // namespace train_vit
