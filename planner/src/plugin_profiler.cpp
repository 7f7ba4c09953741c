// measure_plugin_overheads: what a plugin's step costs beyond torch_ddp's on one rank.
//
// The layer profile times layers alone; a plugin's own per-step work around them (gemini's chunk
// copies and hooks, ZeRO's flat gradient buffers and fp32 masters) is in none of them. On two CPU
// ranks gemini static measured 11-17 ms a step slower than torch_ddp, and 11-12 ms on one rank
// alone, where the step model, from the layers alone, priced the two alike (benchmarks/RESULTS.md,
// 2026-12-07). So it is measured without other ranks: the ViT cut to a few blocks, a step of each
// plugin against torch_ddp's, in alternating rounds. At the development machine's ~5 % step-to-step
// spread a few milliseconds of it are at the edge of what six steps resolve (RESULTS: 0-9 ms
// for gemini, 2-21 ms for ZeRO-1 in six rounds).
#include <colo/amp/precision.h>
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/nn/vision_transformer.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/planner/profiler.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <map>

#include "profiler_timing.h"

namespace colo::planner {
namespace {

using detail::median;
using detail::seconds_now;
using detail::synchronize;

struct Measured {
  std::string key;  // as the step model looks it up (plugin_overhead_key)
  std::string plugin;
  PluginOptions options;
};

// What is measured against torch_ddp, in order: the one list the profile reader checks keys against.
const std::vector<Measured>& measured_plugins() {
  static const std::vector<Measured> plugins = {{"gemini", "gemini", {{"placement_policy", "static"}}},
                                                {"low_level_zero zero1", "low_level_zero", {{"stage", "1"}}},
                                                {"low_level_zero zero2", "low_level_zero", {{"stage", "2"}}}};
  return plugins;
}

// Seconds a step of `plugin` takes on one rank: `warmup` untimed steps, then the mean of `steps`.
double step_seconds(const Measured& m, const nn::ViTConfig& config, const ProfileOptions& o, int64_t samples,
                    const PluginContext& context) {
  PluginOptions options = m.options;
  options["precision"] = o.precision();
  auto plugin = PluginRegistry::global().create(m.plugin, options, context);
  Booster booster(plugin);
  torch::manual_seed(0);
  auto model = nn::make_vision_transformer(config);
  model->to(o.device());
  auto optimizer = std::make_shared<optim::HybridAdam>(model->parameters(), optim::HybridAdamOptions(1e-4));
  Criterion criterion = [](const torch::Tensor& output, const torch::Tensor& target) {
    return torch::nn::functional::cross_entropy(output.to(torch::kFloat), target);
  };
  auto b = booster.boost(model, optimizer, criterion);
  b.model->train();
  const auto images = torch::randn({samples, config.in_channels(), config.image_size(), config.image_size()},
                                   torch::TensorOptions().device(o.device()));
  const auto labels = torch::randint(config.num_classes(), {samples}, torch::TensorOptions().dtype(torch::kLong).device(o.device()));
  auto step = [&] {
    auto loss = b.criterion(b.model->forward(images), labels);
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    b.optimizer->zero_grad();
  };
  for (int i = 0; i < o.warmup(); ++i) step();
  synchronize(o.device());
  const double start = seconds_now();
  for (int i = 0; i < o.overhead_steps(); ++i) step();
  synchronize(o.device());
  return (seconds_now() - start) / o.overhead_steps();
}

}  // namespace

const std::vector<std::string>& plugin_overhead_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& m : measured_plugins()) out.push_back(m.key);
    return out;
  }();
  return keys;
}

std::string plugin_overhead_key(const std::string& plugin, int zero_stage) {
  if (plugin == "low_level_zero") return fmt::format("low_level_zero zero{}", zero_stage);
  return plugin;
}

std::vector<PluginOverhead> measure_plugin_overheads(const ProfileOptions& o,
                                                     const std::function<void(const std::string&)>& progress) {
  if (o.overhead_depth() < 1 || o.overhead_samples() < 0 || o.overhead_steps() < 1) {
    throw std::invalid_argument(fmt::format("--overhead-depth {}, --overhead-samples {}, --overhead-steps {}: give 1 "
                                            "or more blocks and steps, and a batch of 1 or more (0: the largest "
                                            "micro-batch profiled), or --no-plugin-overheads",
                                            o.overhead_depth(), o.overhead_samples(), o.overhead_steps()));
  }
  // The largest profiled micro-batch by default: on a GPU, a small batch's step is the host's, and
  // the host's bookkeeping would show there in full where a large batch's kernels run beside it.
  int64_t samples = o.overhead_samples();
  if (samples == 0) {
    for (auto m : o.microbatches()) samples = std::max(samples, m);
  }
  if (samples < 1) throw std::invalid_argument("give at least one micro-batch size");
  auto config = o.model();
  config.depth(std::min<int64_t>(config.depth(), o.overhead_depth()));
  int64_t elements = 0;
  {
    auto model = nn::make_vision_transformer(config);
    for (const auto& p : model->parameters()) elements += p.numel();
  }
  const auto& plugins = measured_plugins();
  const Measured baseline{"torch_ddp", "torch_ddp", {}};
  // The process's own world, which is one rank outside colo-run (a private store, no launcher).
  const auto world = PluginRegistry::global().default_context().world;
  if (!world || world->size() != 1) {
    throw std::invalid_argument(fmt::format(
        "the plugins' own step costs are measured on one rank, and this process is one of {}: run colo-plan profile "
        "without colo-run (only --collectives needs the ranks), or give --no-plugin-overheads",
        world ? world->size() : 0));
  }
  const PluginContext context(world, o.device());
  // Rounds of (torch_ddp, each plugin): a drift of the machine falls on all of them alike.
  std::map<std::string, std::vector<double>> times;
  for (int r = 0; r < o.repeats(); ++r) {
    times[baseline.key].push_back(step_seconds(baseline, config, o, samples, context));
    for (const auto& m : plugins) times[m.key].push_back(step_seconds(m, config, o, samples, context));
  }
  const double base = median(times[baseline.key]);
  std::vector<PluginOverhead> out;
  for (const auto& m : plugins) {
    PluginOverhead po;
    po.key = m.key;
    po.samples = samples;
    po.elements = elements;
    po.depth = config.depth();
    po.step_s = median(times[m.key]);
    po.baseline_step_s = base;
    po.per_element_s = detail::overhead_per_element(po.step_s, base, elements);
    if (progress) {
      progress(fmt::format("{} on one rank, {} blocks, batch {}: {:.3f} ms a step against torch_ddp's {:.3f} ms: "
                           "{:.3f} ns a parameter",
                           m.key, config.depth(), po.samples, po.step_s * 1e3, base * 1e3, po.per_element_s * 1e9));
    }
    out.push_back(po);
  }
  return out;
}

}  // namespace colo::planner
