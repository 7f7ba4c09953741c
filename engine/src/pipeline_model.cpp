#include <colo/engine/pipeline_model.h>

#include <colo/engine/gemini_model.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/dist/process_group.h>
#include <colo/zero/bucketed_all_gather.h>
#include <colo/zero/grad_reducer.h>
#include <fmt/format.h>

#include <stdexcept>
#include <unordered_map>

#include "master_weights_state.h"

namespace colo {

PipelineModel::PipelineModel(Parts parts) : ModelWrapper(parts.stack), parts_(std::move(parts)) {}

torch::Tensor PipelineModel::forward(const torch::Tensor& input) {
  if (parts_.stages.num_stages() > 1) {
    throw std::logic_error(fmt::format(
        "the model is split into {} pipeline stages over the ranks, so model->forward cannot run it "
        "on one; run a step with booster.execute_pipeline(inputs, targets, model, criterion, optimizer), and "
        "evaluation with PipelineOptions().forward_only(true).return_outputs(true)",
        parts_.stages.num_stages()));
  }
  if (parts_.gemini) {
    // Layer by layer, each layer's chunks gathered just in time (input cast, fp32 output: its own).
    auto output = parts_.gemini->forward(pad_batch(input));
    return output.dim() > 0 && output.size(0) > input.size(0) ? output.narrow(0, 0, input.size(0)) : output;
  }
  wait_for_weights();
  if (torch::GradMode::is_enabled()) prepare_for_backward();
  const auto cast = parts_.policy.cast_to_compute(pad_batch(input));
  // One stage: one chunk, whose layers are module_'s.
  auto output = parts_.graphed.empty() ? module_->forward(cast) : parts_.graphed.front()->forward(cast);
  if (output.dim() > 0 && output.size(0) > input.size(0)) output = output.narrow(0, 0, input.size(0));
  return detail::fp32_output(output);
}

torch::Tensor PipelineModel::pad_batch(const torch::Tensor& x) const {
  const int64_t multiple = parts_.batch_multiple;
  if (multiple <= 1 || x.dim() == 0 || x.size(0) % multiple == 0) return x;
  auto shape = x.sizes().vec();
  shape[0] = multiple - x.size(0) % multiple;
  return torch::cat({x, torch::zeros(shape, x.options())});
}

void PipelineModel::train(bool on) {
  ModelWrapper::train(on);
  for (const auto& chunk : parts_.chunks) chunk->train(on);
}

void PipelineModel::wait_for_weights() {
  if (parts_.zero) parts_.zero->gather().wait_all();
  if (parts_.gemini) {
    auto& chunks = parts_.gemini->chunk_owner()->chunks();
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) chunks.prefetch(c);  // all in flight at once
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) chunks.fetch(c);
  }
}

bool PipelineModel::gathers_layer_by_layer(int microbatches) const {
  return parts_.gemini && parts_.stages.num_stages() == 1 && microbatches == 1;
}

torch::Tensor PipelineModel::forward_layer_by_layer(const torch::Tensor& input) {
  if (!parts_.gemini) throw std::logic_error("PipelineModel::forward_layer_by_layer: the stage has no gemini chunks");
  return parts_.gemini->forward(input);
}

void PipelineModel::release_weights() {
  if (parts_.gemini) parts_.gemini->chunk_owner()->chunks().release_all();
}

void PipelineModel::prepare_for_backward() {
  if (parts_.reducer) parts_.reducer->prepare_for_backward();
  if (parts_.zero) parts_.zero->reducer().prepare_for_backward();
  if (parts_.gemini) parts_.gemini->chunk_owner()->prepare_for_backward();
}

// The ZeroOptimizer (zero_stage 1, 2) answers for itself as the boosted optimizer.
void PipelineModel::set_gradient_sync(bool enabled) {
  if (parts_.reducer) parts_.reducer->set_sync(enabled);
}
bool PipelineModel::gradient_sync() const { return !parts_.reducer || parts_.reducer->sync_enabled(); }
void PipelineModel::reduce_accumulated_gradients() {
  if (parts_.reducer) parts_.reducer->reduce_accumulated();
}

pipeline::ScheduleRunner& PipelineModel::runner(int microbatches) {
  auto it = runners_.find(microbatches);
  if (it == runners_.end()) {
    if (!parts_.schedule_for) {
      throw std::logic_error("PipelineModel::runner: its Parts give no schedule_for (the training schedule)");
    }
    auto schedule = parts_.schedule_for(microbatches);
    it = runners_
             .emplace(microbatches, std::make_unique<pipeline::ScheduleRunner>(std::move(schedule), parts_.stages,
                                                                               parts_.pp_group, parts_.chunks))
             .first;
  }
  return *it->second;
}

std::vector<std::pair<std::string, torch::Tensor>> PipelineModel::full_state() const {
  if (parts_.gemini) return parts_.gemini->full_state();  // the chunks' masters, gathered chunk by chunk over dp
  auto state = ModelWrapper::full_state();
  if (parts_.zero) {
    const auto masters = parts_.zero->full_masters();  // collective over dp
    parts_.zero->gather().wait_all();
    detail::overlay_masters(state, masters);
  } else if (parts_.masters) {
    detail::overlay_masters(state, detail::named_masters(*module_, *parts_.masters));
  }
  return state;
}

void PipelineModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  if (parts_.gemini) {
    parts_.gemini->load_full_state(state);  // checks every shape first; masters and working shards
    return;
  }
  wait_for_weights();                    // or a gather in flight would overwrite what is loaded
  ModelWrapper::load_full_state(state);  // validates everything, then writes the working weights
  // The masters take the saved values themselves, not their rounding to the working dtype.
  if (parts_.zero) {
    parts_.zero->load_masters(std::map<std::string, torch::Tensor>(state.begin(), state.end()));
  } else if (parts_.masters) {
    detail::load_masters(state, detail::named_masters(*module_, *parts_.masters));
  }
}

}  // namespace colo
