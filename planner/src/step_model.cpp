// StepModel: one step's time per plugin (the plain step here, the pipelined one in
// pipeline_step.cpp), memory through Booster::plan_memory.
#include <colo/booster/booster.h>
#include <colo/nn/model_summary.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/planner/collective_model.h>
#include <colo/planner/step_model.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "layer_costs.h"
#include "step_terms.h"

namespace colo::planner {

StepModel::StepModel(PlanRequest request) : request_(std::move(request)), caches_(std::make_unique<Caches>()) {
  auto& r = request_;
  if (r.world_size < 1) throw std::invalid_argument(fmt::format("world size {} must be at least 1", r.world_size));
  if (r.global_batch < 1) throw std::invalid_argument(fmt::format("global batch {} must be at least 1", r.global_batch));
  if (r.precision != "fp32" && r.precision != "bf16" && r.precision != "fp16" && r.precision != "fp8") {
    throw std::invalid_argument(fmt::format("precision '{}': expected fp32, bf16, fp16 or fp8", r.precision));
  }
  r.model.vit.validate();
  if (r.profile) {
    if (const auto why = profile_mismatch(*r.profile, r.model.vit)) {
      throw std::invalid_argument(fmt::format("the profile {} does not describe model {}: {}; measure one for it "
                                              "(colo-plan profile --model ...)",
                                              r.profile->source, r.model.name, *why));
    }
    if (r.profile->precision != r.precision) {
      throw std::invalid_argument(fmt::format("the profile {} was measured in {}, the plan is for {}: measure one in "
                                              "{} (colo-plan profile --precision {})",
                                              r.profile->source, r.profile->precision, r.precision, r.precision,
                                              r.precision));
    }
  }
  summary_ = nn::summarize_vision_transformer(r.model.vit);
  detail::fill_parameter_counts(summary_, *caches_);
}

StepModel::~StepModel() = default;
StepModel::StepModel(StepModel&&) noexcept = default;

std::string StepModel::structural_problem(const Layout& l) const {
  const auto& c = request_.model.vit;
  const int layers = static_cast<int>(c.depth()) + 1;  // the head goes with the last block
  if (l.world_size() != request_.world_size) {
    return fmt::format("dp {} x pp {} x tp {} = {} ranks, the world has {}", l.dp, l.pp, l.tp, l.world_size(),
                       request_.world_size);
  }
  if (l.plugin != "hybrid_parallel" && (l.pp != 1 || l.tp != 1)) return fmt::format("{} has no pp or tp", l.plugin);
  if (auto why = tensor_split_problem(c, l); !why.empty()) return why;
  if (l.pp * l.chunks > layers) {
    return fmt::format("pp {} x chunks {} stages for {} layers (blocks and the patch embedding)", l.pp, l.chunks, layers);
  }
  const int64_t per_dp = request_.global_batch / l.dp;
  if (request_.global_batch % l.dp != 0) {
    return fmt::format("the global batch {} does not split over dp {}", request_.global_batch, l.dp);
  }
  if (l.pipelined()) {
    if (l.microbatches < 1 || per_dp % l.microbatches != 0) {
      return fmt::format("{} samples per data-parallel rank do not split into {} microbatches", per_dp, l.microbatches);
    }
    pipeline::ScheduleShape shape(l.pp, l.microbatches);
    shape.chunks(l.chunks);
    const auto problems = pipeline::builtin_schedules().shape_problems(l.schedule, shape);
    if (!problems.empty()) return problems.front();
  } else if (l.grad_accum < 1 || per_dp % l.grad_accum != 0) {
    return fmt::format("{} samples per data-parallel rank do not split into {} accumulation passes", per_dp,
                       l.grad_accum);
  }
  if (l.plugin == "hybrid_parallel" && l.grad_accum != 1) return "hybrid_parallel accumulates through microbatches";
  return {};
}

MemoryPlanInputs StepModel::memory_inputs(const Layout& l) const {
  MemoryPlanInputs in;
  in.model = summary_;
  in.world_size(request_.world_size)
      .global_batch_size(request_.global_batch)
      .accumulation_steps(l.pipelined() ? 1 : l.grad_accum)
      .activation_checkpointing(l.activation_checkpointing)
      .optimizer_states(request_.optimizer_states)
      .device_is_gpu(request_.cluster.device.is_gpu)
      .device_memory_bytes(static_cast<int64_t>(request_.cluster.device.memory_gib * 1024.0 * 1024.0 * 1024.0));
  return in;
}

MemoryPlan StepModel::memory_plan(const Layout& l) const {
  return Booster::plan_memory(l.plugin, l.plugin_options(request_.precision), memory_inputs(l));
}

Prediction StepModel::predict(const Layout& l) const {
  const auto problem = structural_problem(l);
  if (!problem.empty()) throw std::invalid_argument(fmt::format("{}: {}", l.name(), problem));
  const auto plan = memory_plan(l);
  auto p = predict_time(l, &plan);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const auto& device = request_.cluster.device;
  p.usable_device_bytes = static_cast<int64_t>(device.memory_gib * device.usable_memory_fraction * gib);
  const RankMemory* largest = nullptr;
  for (const auto& rank : plan.ranks) {
    if (!largest || rank.device_bytes() > largest->device_bytes()) largest = &rank;
    p.host_bytes = std::max(p.host_bytes, rank.host_bytes());
  }
  p.device_bytes = largest ? largest->device_bytes() : 0;
  const double host_per_node = static_cast<double>(p.host_bytes) * std::min(request_.world_size, request_.cluster.gpus_per_node);
  if (p.device_bytes > p.usable_device_bytes) {
    p.fits = false;
    p.why_not = fmt::format("needs {:.1f} GiB on rank{} {}{}, {:.1f} GiB usable ({:g} GiB x {:g})",
                            static_cast<double>(p.device_bytes) / gib,
                            largest->ranks.find_first_of("-,") == std::string::npos ? "" : "s", largest->ranks,
                            largest->position.empty() ? "" : " (" + largest->position + ")",
                            static_cast<double>(p.usable_device_bytes) / gib, device.memory_gib,
                            device.usable_memory_fraction);
  } else if (request_.cluster.device.is_gpu && host_per_node > device.host_memory_gib * gib) {
    p.fits = false;
    p.why_not = fmt::format("needs {:.1f} GiB of host memory per node, the node has {:g} GiB", host_per_node / gib,
                            device.host_memory_gib);
  }
  return p;
}

Prediction StepModel::predict_time(const Layout& l, const MemoryPlan* plan) const {
  const detail::LayerCosts costs(request_, l);
  Prediction p;
  p.layout = l;
  p.breakdown = l.pipelined() ? detail::pipelined_step(request_, l, costs, plan, *caches_)
                              : detail::plain_step(request_, l, costs, plan, *caches_);
  p.step_seconds = p.breakdown.total();
  p.images_per_second = static_cast<double>(request_.global_batch) / p.step_seconds;
  p.tflops_per_gpu = training_flops_per_image(request_.model.vit) * p.images_per_second /
                     static_cast<double>(request_.world_size) / 1e12;
  const auto& peaks = request_.cluster.device.peak_tflops;
  auto peak = peaks.find(request_.precision);
  if (peak == peaks.end()) peak = peaks.find("bf16");
  if (peak == peaks.end()) peak = peaks.begin();
  p.mfu = peak == peaks.end() ? 0.0 : p.tflops_per_gpu / peak->second;
  const auto& b = p.breakdown;
  const std::pair<const char*, double> terms[] = {{"compute", b.compute - b.recompute},
                                                  {"recomputation", b.recompute},
                                                  {"tensor-parallel communication", b.tp_comm},
                                                  {"pipeline sends", b.pp_comm},
                                                  {"data-parallel communication", b.dp_comm},
                                                  {"pipeline bubble", b.bubble},
                                                  {"optimizer step", b.optimizer},
                                                  {"host<->device copies", b.offload},
                                                  {"the plugin's own work", b.plugin_work}};
  double largest = -1;
  for (const auto& [what, seconds] : terms) {
    if (seconds > largest) {
      largest = seconds;
      p.bound = what;
    }
  }
  return p;
}

}  // namespace colo::planner
