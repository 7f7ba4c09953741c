#include <colo/booster/plugin.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo {

CheckpointIO& Plugin::checkpoint_io() {
  if (!checkpoint_io_) checkpoint_io_ = std::make_unique<CheckpointIO>(context_.world);
  return *checkpoint_io_;
}

NoSyncGuard Plugin::no_sync(ModelWrapper& model, OptimizerWrapper& optimizer) {
  // The wrappers own their reductions; the guard only needs them to outlive it (the boosted
  // objects do).
  const bool model_sync = model.gradient_sync();
  const bool optimizer_sync = optimizer.gradient_sync();
  model.set_gradient_sync(false);
  optimizer.set_gradient_sync(false);
  return NoSyncGuard([&model, &optimizer, model_sync, optimizer_sync] {
    model.set_gradient_sync(model_sync);
    optimizer.set_gradient_sync(optimizer_sync);
  });
}

PipelineResult Plugin::execute_pipeline(const torch::Tensor& /*inputs*/, const torch::Tensor& /*targets*/,
                                        ModelWrapper& /*model*/, const Criterion& /*criterion*/,
                                        OptimizerWrapper& /*optimizer*/, const PipelineOptions& /*options*/) {
  throw std::logic_error(
      fmt::format("plugin {} has no pipeline parallelism (Plugin::supports_pipeline() is false); run the model's "
                  "forward and booster.backward yourself, or load a plugin that implements execute_pipeline "
                  "(colo's hybrid_parallel with pp_size > 1 or num_microbatches)",
                  name()));
}

}  // namespace colo
