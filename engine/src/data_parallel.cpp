#include <colo/engine/data_parallel.h>

#include <colo/engine/gemini_model.h>
#include <colo/engine/low_level_zero_model.h>
#include <colo/engine/parallelize.h>
#include <colo/engine/torch_ddp_model.h>
#include <colo/zero/bucketed_all_gather.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/grad_reducer.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo {

void check_data_parallel_optimizer(const torch::optim::Optimizer& optimizer, const DataParallelOptions& options) {
  switch (options.zero_stage()) {
    case 0: return;
    case 1:
    case 2: ZeroOptimizer::check_optimizer(optimizer, options.caller()); return;
    case 3: GeminiOptimizer::check_optimizer(optimizer, options.caller()); return;
    default:
      throw std::invalid_argument(fmt::format("{}: zero_stage={} does not exist; use 0 (replicas), 1, 2 (ZeRO) or 3 "
                                              "(gemini's chunks)",
                                              options.caller(), options.zero_stage()));
  }
}

std::shared_ptr<DataParallelEngine> apply_data_parallel(std::shared_ptr<nn::LayerStack> stack,
                                                        std::shared_ptr<torch::optim::Optimizer> optimizer,
                                                        std::shared_ptr<dist::ProcessGroup> dp,
                                                        const DataParallelOptions& options) {
  if (!stack || !optimizer || !dp) {
    throw std::invalid_argument(
        fmt::format("{}: apply_data_parallel needs the layer stack, the optimizer and the data-parallel group",
                    options.caller()));
  }
  check_data_parallel_optimizer(*optimizer, options);
  std::shared_ptr<DataParallelEngine> engine(new DataParallelEngine());
  engine->zero_stage_ = options.zero_stage();
  if (options.zero_stage() == 0) {
    auto replicas = options.replicas();
    auto plan = replicas.grad_norm();
    if (!plan.agree_over) plan.agree_over = dp;
    replicas.grad_norm(plan);
    auto wrapped = std::make_shared<MixedPrecisionOptimizer>(optimizer, stack, replicas);
    // The hooks go on the final tensors (after the cast above): a later dtype change drops them.
    engine->reducer_ = apply_ddp(*stack, dp, options.all_reduce());
    engine->model_ = std::make_shared<TorchDdpModel>(stack, engine->reducer_, replicas.policy(),
                                                     wrapped->master_weights(), options.buffer_sync_group());
    engine->optimizer_ = wrapped;
  } else if (options.zero_stage() == 3) {
    engine->chunks_ = std::make_shared<GeminiChunkOwner>(stack, optimizer, dp,
                                                         GeminiChunkOptions(options.chunks()).caller(options.caller()));
    engine->gemini_ = std::make_shared<GeminiModel>(engine->chunks_);
    engine->model_ = engine->gemini_;
    engine->optimizer_ = std::make_shared<GeminiOptimizer>(
        optimizer, engine->chunks_, GeminiOptimizerOptions(options.gemini()).caller(options.caller()));
  } else {
    engine->zero_ = std::make_shared<ZeroOptimizer>(
        optimizer, stack, dp, ZeroOptimizerOptions(options.zero()).stage(options.zero_stage()).caller(options.caller()));
    engine->model_ = std::make_shared<LowLevelZeroModel>(stack, engine->zero_);
    engine->optimizer_ = engine->zero_;
  }
  return engine;
}

// A group of one rank has no all-reduce: nothing to switch, nothing to reduce.
void DataParallelEngine::set_gradient_sync(bool enabled) {
  if (reducer_) reducer_->set_sync(enabled);
  if (zero_) zero_->set_gradient_sync(enabled);
  if (chunks_) chunks_->set_gradient_sync(enabled);
}

bool DataParallelEngine::gradient_sync() const {
  if (zero_) return zero_->gradient_sync();
  if (chunks_) return chunks_->gradient_sync();
  return !reducer_ || reducer_->sync_enabled();
}

void DataParallelEngine::reduce_accumulated_gradients() {
  if (reducer_) reducer_->reduce_accumulated();
  if (zero_) zero_->reduce_accumulated_gradients();
  if (chunks_) chunks_->reduce_accumulated_gradients();
}

void DataParallelEngine::prepare_for_backward() {
  if (reducer_) reducer_->prepare_for_backward();
  if (zero_) zero_->reducer().prepare_for_backward();
  if (chunks_) chunks_->prepare_for_backward();
}

void DataParallelEngine::gather_weights() {
  if (zero_) zero_->gather().wait_all();
  if (chunks_) {
    auto& chunks = chunks_->chunks();
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) chunks.prefetch(c);  // all in flight at once
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) chunks.fetch(c);
  }
}

void DataParallelEngine::release_weights() {
  if (chunks_) chunks_->chunks().release_all();
}

}  // namespace colo
