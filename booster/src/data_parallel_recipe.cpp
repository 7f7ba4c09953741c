#include <colo/booster/data_parallel_recipe.h>

#include <colo/booster/plugin.h>
#include <colo/dist/process_group.h>
#include <colo/engine/data_parallel.h>
#include <colo/engine/parallelize.h>
#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace colo {

Boosted boost_data_parallel(const Plugin& plugin, BoostInputs inputs, const DataParallelOptions& options,
                            amp::Precision precision, const nn::Fp8Recipe& fp8,
                            const std::function<void(DataParallelEngine&)>& finish) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument(
        fmt::format("{} boost: the model, the optimizer and the criterion are required", plugin.name()));
  }
  check_data_parallel_optimizer(*inputs.optimizer, options);  // before anything changes
  const auto& context = plugin.context();
  const auto& world = context.world;
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *world, plugin.name());
  // One device, one starting point for every replica (before any rounding to bf16/fp16).
  broadcast_model(*inputs.model, context.device, *world);
  auto fp8_scaling = apply_matmul_precision(*inputs.model, precision, context.device, fp8);
  const auto engine = apply_data_parallel(inputs.model, inputs.optimizer, world, options);
  attach_fp8_scaling(*engine->optimizer(), std::move(fp8_scaling), {world});
  if (finish) finish(*engine);
  return {engine->model(), engine->optimizer(), inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context.mesh};
}

}  // namespace colo
