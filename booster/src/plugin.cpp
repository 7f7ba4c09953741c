#include <colo/booster/plugin.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo {

NoSyncGuard Plugin::no_sync(ModelWrapper& /*model*/, OptimizerWrapper& /*optimizer*/) {
  throw std::logic_error(fmt::format(
      "plugin {} does not support no_sync (gradient accumulation without synchronisation); accumulate by "
      "running backward on several micro-batches before one optimizer step, or use a plugin that supports it",
      name()));
}

PipelineResult Plugin::execute_pipeline(const torch::Tensor& /*inputs*/, const torch::Tensor& /*targets*/,
                                        ModelWrapper& /*model*/, const Criterion& /*criterion*/,
                                        OptimizerWrapper& /*optimizer*/, const PipelineOptions& /*options*/) {
  throw std::logic_error(
      fmt::format("plugin {} has no pipeline parallelism (Plugin::supports_pipeline() is false); run the model's "
                  "forward and booster.backward yourself, or load a plugin that implements execute_pipeline "
                  "(colo's hybrid_parallel, which will, is not built yet)",
                  name()));
}

}  // namespace colo
