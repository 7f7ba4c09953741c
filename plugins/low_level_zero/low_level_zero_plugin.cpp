#include "low_level_zero_plugin.h"

#include <colo/booster/plugin_info.h>
#include <colo/data/data_loader.h>
#include <colo/ddp/broadcast_coalesced.h>
#include <colo/dist/process_group.h>
#include <colo/zero/grad_reducer.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "low_level_zero_model.h"

namespace colo::plugins {
namespace {

const char* const kLossScalerKeys[] = {"initial_scale",  "min_scale",       "max_scale", "growth_factor",
                                       "backoff_factor", "growth_interval", "hysteresis"};

LowLevelZeroOptions read_options(OptionReader& in, const PluginOptions& given) {
  LowLevelZeroOptions parsed;
  auto& o = parsed.zero;
  const auto stage =
      in.get_int("stage", o.stage, "1: optimizer state and fp32 masters sharded; 2: gradients sharded too");
  if (stage == 3) {
    in.fail(
        "stage 3 (parameters sharded too) is not low_level_zero's: use the gemini plugin (ZeRO-3 with "
        "chunk-based parameter sharding)");
  } else if (stage != 1 && stage != 2) {
    in.fail(fmt::format("stage must be 1 or 2, got {}", stage));
  } else {
    o.stage = static_cast<int>(stage);
  }
  o.precision = amp::parse_precision(in.get_choice("precision", "fp32", {"fp32", "fp16", "bf16"},
                                                   "working precision of weights, activations and gradients"));
  o.bucket_cap_mb = in.get_double("reduce_bucket_size_mb", o.bucket_cap_mb,
                                  "MiB of gradients per reduction / all-gather bucket (smaller: earlier overlap, more "
                                  "launches)");
  o.overlap_communication = in.get_bool("overlap_communication", o.overlap_communication,
                                        "reduce gradients during backward and gather weights during the next forward");
  o.cpu_offload = in.get_bool("cpu_offload", o.cpu_offload,
                              "fp32 masters, optimizer state and the Adam step on the CPU (pinned transfers)");
  const auto communication = in.get_choice("communication_dtype", "auto", {"auto", "fp32", "fp16", "bf16"},
                                           "dtype gradients are reduced in; auto: the precision's");
  if (communication != "auto") o.communication_dtype = amp::to_dtype(amp::parse_precision(communication));
  o.max_grad_norm = in.get_double("max_grad_norm", o.max_grad_norm, "clip gradients to this global L2 norm; 0: off");

  auto& s = o.loss_scaler;
  s.initial_scale(in.get_double("initial_scale", s.initial_scale(), "fp16: initial loss scale"));
  s.min_scale(in.get_double("min_scale", s.min_scale(), "fp16: smallest loss scale"));
  s.max_scale(in.get_double("max_scale", s.max_scale(), "fp16: largest loss scale"));
  s.growth_factor(in.get_double("growth_factor", s.growth_factor(), "fp16: scale multiplier after clean intervals"));
  s.backoff_factor(in.get_double("backoff_factor", s.backoff_factor(), "fp16: scale multiplier on overflow"));
  s.growth_interval(in.get_int("growth_interval", s.growth_interval(), "fp16: clean steps before the scale grows"));
  s.hysteresis(in.get_int("hysteresis", s.hysteresis(), "fp16: overflows tolerated before backing off"));

  if (!(o.bucket_cap_mb > 0.0) || !std::isfinite(o.bucket_cap_mb)) {
    in.fail(fmt::format("reduce_bucket_size_mb must be a positive number of MiB, got {}", o.bucket_cap_mb));
  }
  if (!(o.max_grad_norm >= 0.0) || !std::isfinite(o.max_grad_norm)) {
    in.fail(fmt::format("max_grad_norm must be >= 0 (0 disables clipping), got {}", o.max_grad_norm));
  }
  try {
    amp::DynamicLossScaler check(s);
  } catch (const std::invalid_argument& e) {
    in.fail(e.what());
  }
  if (o.precision != amp::Precision::kFp16) {
    for (const char* key : kLossScalerKeys) {
      if (given.count(key)) {
        in.fail(fmt::format("{} only applies with precision=fp16 (precision is {})", key, amp::to_string(o.precision)));
      }
    }
  }
  return parsed;
}

}  // namespace

LowLevelZeroOptions LowLevelZeroOptions::parse(const PluginOptions& options) {
  OptionReader in("low_level_zero", options);
  auto parsed = read_options(in, options);
  in.finish();
  return parsed;
}

LowLevelZeroPlugin::LowLevelZeroPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(LowLevelZeroOptions::parse(options)) {
  if (!context_.world) {
    throw std::invalid_argument("low_level_zero needs the job's world process group in its PluginContext");
  }
}

Boosted LowLevelZeroPlugin::boost(BoostInputs inputs) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument("low_level_zero boost: the model, the optimizer and the criterion are required");
  }
  ZeroOptimizer::check_optimizer(*inputs.optimizer);  // before anything changes
  const auto& world = context_.world;

  // 1.
  if (inputs.dataloader) {
    try {
      inputs.dataloader->reshard(world->size(), world->rank());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(
          fmt::format("low_level_zero: the data loader cannot be split over the {} data-parallel ranks of this job: {}",
                      world->size(), e.what()));
    }
  }

  // 2.
  auto model = inputs.model;
  model->to(context_.device);
  {
    auto states = model->parameters();
    for (auto& b : model->buffers()) states.push_back(b);
    ddp::broadcast_coalesced(*world, states, 0);
  }

  // 3.
  auto optimizer = std::make_shared<ZeroOptimizer>(inputs.optimizer, model, world, options_.zero);

  // 4.
  auto wrapped = std::make_shared<LowLevelZeroModel>(model, optimizer);
  return {wrapped, optimizer, inputs.criterion, inputs.dataloader, inputs.lr_scheduler};
}

NoSyncGuard LowLevelZeroPlugin::no_sync(ModelWrapper& /*model*/, OptimizerWrapper& optimizer) {
  auto* zero = dynamic_cast<ZeroOptimizer*>(&optimizer);
  if (!zero) {
    throw std::invalid_argument(
        "low_level_zero no_sync: the optimizer was not boosted by low_level_zero; pass the boosted optimizer");
  }
  auto* reducer = &zero->reducer();  // lives as long as the boosted optimizer, which outlives the guard
  const bool previous = reducer->sync_enabled();
  reducer->set_sync(false);
  return NoSyncGuard([reducer, previous] { reducer->set_sync(previous); });
}

}  // namespace colo::plugins

COLO_PLUGIN(low_level_zero, "0.1.0", colo::plugins::LowLevelZeroPlugin)
