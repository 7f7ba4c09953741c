#include "low_level_zero_plugin.h"

#include <colo/booster/parallelize.h>
#include <colo/booster/plugin_info.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/booster/precision_options.h>
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

LowLevelZeroOptions read_options(OptionReader& in, const PluginOptions& given) {
  LowLevelZeroOptions parsed;
  auto& o = parsed.zero;
  o.stage(static_cast<int>(
      in.get_int("stage", o.stage(), "1: optimizer state and fp32 masters sharded; 2: gradients sharded too")));
  const auto precision = PrecisionOptions::read(in, given);
  o.precision(precision.precision).max_grad_norm(precision.max_grad_norm).loss_scaler(precision.loss_scaler);
  o.bucket_cap_mb(in.get_mebibytes("reduce_bucket_size_mb", o.bucket_cap_mb(),
                                   "MiB of gradients per reduction / all-gather bucket (smaller: earlier overlap, more "
                                   "launches)",
                                   /*zero_allowed=*/false));
  o.overlap_communication(in.get_bool("overlap_communication", o.overlap_communication(),
                                      "reduce gradients during backward and gather weights during the next forward"));
  o.cpu_offload(in.get_bool("cpu_offload", o.cpu_offload(),
                            "fp32 masters, optimizer state and the Adam step on the CPU (pinned transfers)"));
  if (in.get_bool("cuda_graphs", false, "not implemented for low_level_zero (see the error it gives)")) {
    in.fail("cuda_graphs=true is not implemented for low_level_zero: ZeRO reduces each gradient from a "
            "per-parameter hook and gathers the updated weights layer by layer, which a graph replay does not "
            "do; use torch_ddp or hybrid_parallel (one rank) with cuda_graphs=true, or cuda_graphs=false");
  }
  const auto communication = in.get_choice("communication_dtype", "auto", {"auto", "fp32", "fp16", "bf16"},
                                           "dtype gradients are reduced in; auto: the precision's");
  if (communication != "auto") o.communication_dtype(amp::to_dtype(amp::parse_precision(communication)));
  for (const auto& error : o.violations()) in.fail(error);
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
  context_.mesh = std::make_shared<dist::ProcessGroupMesh>(context_.world, dist::dp_pp_tp_shape(context_.world->size(), 1, 1));
}

Boosted LowLevelZeroPlugin::boost(BoostInputs inputs) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument("low_level_zero boost: the model, the optimizer and the criterion are required");
  }
  ZeroOptimizer::check_optimizer(*inputs.optimizer);  // before anything changes
  const auto& world = context_.world;

  // 1.
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *world, name());

  // 2.
  auto model = inputs.model;
  broadcast_model(*model, context_.device, *world);
  apply_matmul_precision(*model, options_.zero.precision(), context_.device);

  // 3.
  auto optimizer = std::make_shared<ZeroOptimizer>(inputs.optimizer, model, world, options_.zero);

  // 4.
  auto wrapped = std::make_shared<LowLevelZeroModel>(model, optimizer);
  return {wrapped, optimizer, inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context_.mesh};
}

}  // namespace colo::plugins

COLO_PLUGIN(low_level_zero, "0.1.0", colo::plugins::LowLevelZeroPlugin)
