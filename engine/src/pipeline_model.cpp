#include <colo/engine/pipeline_model.h>

#include <colo/engine/data_parallel.h>
#include <colo/engine/gemini_model.h>
#include <fmt/format.h>

#include <stdexcept>

#include "master_weights_state.h"

namespace colo {

namespace {

PipelineModel::Parts checked(PipelineModel::Parts parts) {
  if (!parts.data_parallel) throw std::invalid_argument("PipelineModel: its Parts give no data_parallel engine");
  return parts;
}

}  // namespace

PipelineModel::PipelineModel(Parts parts) : ModelWrapper(parts.stack), parts_(checked(std::move(parts))) {}

DataParallelEngine& PipelineModel::data_parallel() const { return *parts_.data_parallel; }

torch::Tensor PipelineModel::forward(const torch::Tensor& input) {
  if (parts_.stages.num_stages() > 1) {
    throw std::logic_error(fmt::format(
        "the model is split into {} pipeline stages over the ranks, so model->forward cannot run it "
        "on one; run a step with booster.execute_pipeline(inputs, targets, model, criterion, optimizer), and "
        "evaluation with PipelineOptions().forward_only(true).return_outputs(true)",
        parts_.stages.num_stages()));
  }
  if (const auto& gemini = parts_.data_parallel->gemini()) {
    // Layer by layer, each layer's chunks gathered just in time (input cast, fp32 output: its own).
    auto output = gemini->forward(pad_batch(input));
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

void PipelineModel::wait_for_weights() { parts_.data_parallel->gather_weights(); }

bool PipelineModel::gathers_layer_by_layer(int microbatches) const {
  return parts_.data_parallel->gemini() && parts_.stages.num_stages() == 1 && microbatches == 1;
}

torch::Tensor PipelineModel::forward_layer_by_layer(const torch::Tensor& input) {
  const auto& gemini = parts_.data_parallel->gemini();
  if (!gemini) throw std::logic_error("PipelineModel::forward_layer_by_layer: the stage has no gemini chunks");
  return gemini->forward(input);
}

void PipelineModel::release_weights() { parts_.data_parallel->release_weights(); }

void PipelineModel::prepare_for_backward() { parts_.data_parallel->prepare_for_backward(); }

// The model's side of the switch, as every plugin's model half answers it: the replicas'
// all-reduce. ZeRO's and the chunks' reducers answer through the boosted optimizer.
void PipelineModel::set_gradient_sync(bool enabled) {
  if (const auto& reducer = parts_.data_parallel->reducer()) reducer->set_sync(enabled);
}
bool PipelineModel::gradient_sync() const {
  const auto& reducer = parts_.data_parallel->reducer();
  return !reducer || reducer->sync_enabled();
}
void PipelineModel::reduce_accumulated_gradients() {
  if (const auto& reducer = parts_.data_parallel->reducer()) reducer->reduce_accumulated();
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

// The engine's model half holds the same layers (the stage's stack) and knows where the fp32
// masters are: replicas' MasterWeights, ZeRO's shards (gathered over dp), gemini's chunks.
std::vector<std::pair<std::string, torch::Tensor>> PipelineModel::full_state() const {
  return parts_.data_parallel->model()->full_state();
}

void PipelineModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  parts_.data_parallel->model()->load_full_state(state);
}

void PipelineModel::check_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) const {
  parts_.data_parallel->model()->check_full_state(state);
}

}  // namespace colo
