#include "pipeline_model.h"

#include <colo/booster/zero_optimizer.h>
#include <colo/dist/process_group.h>
#include <colo/zero/bucketed_all_gather.h>
#include <colo/zero/grad_reducer.h>
#include <fmt/format.h>

#include <stdexcept>
#include <unordered_map>

namespace colo::plugins {

PipelineModel::PipelineModel(Parts parts) : ModelWrapper(parts.stack), parts_(std::move(parts)) {}

torch::Tensor PipelineModel::forward(const torch::Tensor& input) {
  if (parts_.stages.num_stages() > 1) {
    throw std::logic_error(fmt::format(
        "hybrid_parallel: the model is split into {} pipeline stages over the ranks, so model->forward cannot run it "
        "on one; run a step with booster.execute_pipeline(inputs, targets, model, criterion, optimizer), and "
        "evaluation with PipelineOptions().forward_only(true).return_outputs(true)",
        parts_.stages.num_stages()));
  }
  wait_for_weights();
  if (torch::GradMode::is_enabled()) prepare_for_backward();
  const auto cast = parts_.policy.cast_to_compute(input);
  // One stage: one chunk, whose layers are module_'s.
  auto output = parts_.graphed.empty() ? module_->forward(cast) : parts_.graphed.front()->forward(cast);
  return output.is_floating_point() ? output.to(torch::kFloat) : output;
}

void PipelineModel::train(bool on) {
  ModelWrapper::train(on);
  for (const auto& chunk : parts_.chunks) chunk->train(on);
}

void PipelineModel::wait_for_weights() {
  if (parts_.zero) parts_.zero->gather().wait_all();
}

void PipelineModel::prepare_for_backward() {
  if (parts_.reducer) parts_.reducer->prepare_for_backward();
  if (parts_.zero) parts_.zero->reducer().prepare_for_backward();
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
    auto schedule = parts_.schedule_for(microbatches);
    it = runners_
             .emplace(microbatches, std::make_unique<pipeline::ScheduleRunner>(std::move(schedule), parts_.stages,
                                                                               parts_.pp_group, parts_.chunks))
             .first;
  }
  return *it->second;
}

std::vector<std::pair<std::string, torch::Tensor>> PipelineModel::full_state() const {
  std::unordered_map<std::string, torch::Tensor> masters;
  if (parts_.zero) {
    for (auto& [name, value] : parts_.zero->full_masters()) masters.emplace(name, value);  // collective over dp
    parts_.zero->gather().wait_all();
  } else if (parts_.masters) {
    std::unordered_map<const void*, torch::Tensor> master_of;
    for (std::size_t i = 0; i < parts_.masters->working_params().size(); ++i) {
      master_of.emplace(parts_.masters->working_params()[i].unsafeGetTensorImpl(), parts_.masters->master_params()[i]);
    }
    for (const auto& item : module_->canonical_named_parameters()) {
      auto it = master_of.find(item.value().unsafeGetTensorImpl());
      if (it != master_of.end()) masters.emplace(item.key(), it->second.detach());
    }
  }
  auto state = ModelWrapper::full_state();
  for (auto& [name, tensor] : state) {
    auto it = masters.find(name);
    if (it != masters.end()) tensor = it->second;
  }
  return state;
}

void PipelineModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  wait_for_weights();                    // or a gather in flight would overwrite what is loaded
  ModelWrapper::load_full_state(state);  // validates everything, then writes the working weights
  // The masters take the saved values themselves, not their rounding to the working dtype.
  if (parts_.zero) {
    parts_.zero->load_masters(std::map<std::string, torch::Tensor>(state.begin(), state.end()));
  } else if (parts_.masters) {
    std::unordered_map<std::string, torch::Tensor> given(state.begin(), state.end());
    std::unordered_map<const void*, torch::Tensor> master_of;
    for (std::size_t i = 0; i < parts_.masters->working_params().size(); ++i) {
      master_of.emplace(parts_.masters->working_params()[i].unsafeGetTensorImpl(), parts_.masters->master_params()[i]);
    }
    torch::NoGradGuard no_grad;
    for (const auto& item : module_->canonical_named_parameters()) {
      auto it = master_of.find(item.value().unsafeGetTensorImpl());
      if (it != master_of.end()) it->second.copy_(given.at(item.key()));
    }
  }
}

}  // namespace colo::plugins
