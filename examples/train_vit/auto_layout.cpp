#include "auto_layout.h"

#include <colo/planner/planner.h>
#include <colo/zero/device_memory.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <unistd.h>

namespace train_vit {

void apply_planned_layout(TrainOptions& o, const colo::nn::ViTConfig& config, const colo::dist::Environment& env) {
  if (is_resnet(o.model)) throw UsageError("--layout auto plans ViTs; give a ResNet's layout with --plugin");
  namespace planner = colo::planner;
  const int world = o.dry_run && o.plan_world_size > 0 ? o.plan_world_size : std::max(1, env.world_size);
  planner::PlanRequest request;
  request.model = {o.model, config};
  request.world_size = world;
  request.global_batch = o.batch_size;
  request.precision = o.precision;
  request.optimizer_states = o.optimizer == "adamw" ? 2 : 1;
  try {
    const bool gpu = o.gpu_memory_gib > 0 || torch::cuda::is_available();
    if (!o.layout_cluster.empty()) {
      request.cluster = planner::read_cluster_file(o.layout_cluster);
    } else if (gpu) {
      request.cluster = planner::read_cluster_file(planner::shipped_cluster_file());
      request.cluster.gpus_per_node = std::max(1, env.local_world_size);
    } else {
      const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
      request.cluster = planner::local_cpu_cluster(std::max(1, env.local_world_size),
                                                   memory / (1024.0 * 1024.0 * 1024.0) / std::max(1, env.local_world_size));
    }
    if (o.gpu_memory_gib > 0) {
      request.cluster.device.memory_gib = o.gpu_memory_gib;
    } else if (torch::cuda::is_available()) {
      if (const auto bytes = colo::zero::device_capacity_bytes(c10::Device(c10::kCUDA, 0))) {
        request.cluster.device.memory_gib = static_cast<double>(*bytes) / (1024.0 * 1024.0 * 1024.0);
      }
    }
    if (!o.layout_profile.empty()) request.profile = planner::read_profile_file(o.layout_profile);
    const auto result = planner::plan_layouts(request);
    const auto& best = result.ranked.front();
    o.plugin = best.layout.plugin;
    o.plugin_options = best.layout.plugin_options(o.precision);
    o.activation_checkpointing = best.layout.activation_checkpointing;
    o.grad_accum = best.layout.grad_accum;
    if (env.rank == 0) {
      fmt::print("train_vit --layout auto: {} (best of {} layouts; predicted {:.1f} images/s, {:.2f} GiB per rank, "
                 "bound by {}; cluster: {})\n",
                 best.layout.name(), result.ranked.size(), best.images_per_second,
                 static_cast<double>(best.device_bytes) / (1024.0 * 1024.0 * 1024.0), best.bound, request.cluster.name);
      std::fflush(stdout);
    }
  } catch (const planner::NoLayoutFits& e) {
    throw UsageError(fmt::format("--layout auto: {}", e.what()));
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--layout auto: {}", e.what()));
  }
}

}  // namespace train_vit
