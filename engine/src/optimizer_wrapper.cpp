#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/engine/optimizer_wrapper.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo {

OptimizerWrapper::OptimizerWrapper() = default;
OptimizerWrapper::~OptimizerWrapper() = default;

void OptimizerWrapper::backward(const torch::Tensor& loss) {
  if (scaler_) {
    scaler_->scale_loss(loss).backward();
  } else {
    loss.backward();
  }
}

int64_t OptimizerWrapper::skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }

void OptimizerWrapper::backward_by_grad(const std::vector<torch::Tensor>& outputs,
                                        const std::vector<torch::Tensor>& grads) {
  if (outputs.size() != grads.size()) {
    throw std::invalid_argument(fmt::format("backward_by_grad: {} outputs but {} gradients; give one gradient per output",
                                            outputs.size(), grads.size()));
  }
  torch::autograd::backward(outputs, grads);
}

}  // namespace colo

namespace colo {
namespace {

bool starts_with(const std::string& name, const std::string& prefix) { return name.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

void OptimizerWrapper::add_checkpointed_companion(CheckpointedCompanion companion) {
  if (companion.prefix.empty() || !companion.save || !companion.prepare_load) {
    throw std::invalid_argument("OptimizerWrapper::add_checkpointed_companion: a prefix, save and prepare_load");
  }
  for (const auto& other : companions_) {
    if (starts_with(other.prefix, companion.prefix) || starts_with(companion.prefix, other.prefix)) {
      throw std::invalid_argument(fmt::format(
          "OptimizerWrapper::add_checkpointed_companion: the prefixes '{}' and '{}' overlap", other.prefix, companion.prefix));
    }
  }
  companions_.push_back(std::move(companion));
}

bool OptimizerWrapper::is_fp8_scaling_entry(const std::string& name) { return starts_with(name, kFp8ScalingPrefix); }

bool OptimizerWrapper::is_companion_entry(const std::string& name) const {
  for (const auto& companion : companions_) {
    if (starts_with(name, companion.prefix)) return true;
  }
  return is_fp8_scaling_entry(name);
}

OptimizerWrapper::FullState OptimizerWrapper::companion_state() const {
  FullState out;
  for (const auto& companion : companions_) {
    auto part = companion.save();
    for (auto& [name, tensor] : part.tensors) {
      if (!starts_with(name, companion.prefix)) {
        throw std::logic_error(fmt::format("a checkpointed companion of prefix '{}' saved '{}'", companion.prefix, name));
      }
      out.tensors.emplace_back(std::move(name), std::move(tensor));
    }
    for (const auto& [name, value] : part.scalars) {
      if (!starts_with(name, companion.prefix)) {
        throw std::logic_error(fmt::format("a checkpointed companion of prefix '{}' saved '{}'", companion.prefix, name));
      }
      out.scalars[name] = value;
    }
  }
  return out;
}

OptimizerWrapper::FullState OptimizerWrapper::checkpoint_state() const {
  auto state = full_state();
  auto companions = companion_state();
  for (auto& entry : companions.tensors) state.tensors.push_back(std::move(entry));
  for (const auto& [name, value] : companions.scalars) state.scalars[name] = value;
  return state;
}

std::pair<OptimizerWrapper::FullState, std::function<void()>> OptimizerWrapper::split_companion_state(
    const FullState& state) const {
  std::vector<FullState> parts(companions_.size());
  FullState rest;
  const auto owner = [this](const std::string& name) -> int {
    for (size_t i = 0; i < companions_.size(); ++i) {
      if (starts_with(name, companions_[i].prefix)) return static_cast<int>(i);
    }
    return is_fp8_scaling_entry(name) ? -2 : -1;  // -2: an unclaimed float8 scaling entry, dropped
  };
  for (const auto& [name, tensor] : state.tensors) {
    const int i = owner(name);
    if (i >= 0) parts[static_cast<size_t>(i)].tensors.emplace_back(name, tensor);
    if (i == -1) rest.tensors.emplace_back(name, tensor);
  }
  for (const auto& [name, value] : state.scalars) {
    const int i = owner(name);
    if (i >= 0) parts[static_cast<size_t>(i)].scalars[name] = value;
    if (i == -1) rest.scalars[name] = value;
  }
  std::vector<std::function<void()>> loads;
  for (size_t i = 0; i < companions_.size(); ++i) loads.push_back(companions_[i].prepare_load(parts[i]));
  return {std::move(rest), [loads = std::move(loads)] {
            for (const auto& load : loads) {
              if (load) load();
            }
          }};
}

void OptimizerWrapper::load_checkpoint_state(const FullState& state) {
  auto [rest, load_companions] = split_companion_state(state);
  load_full_state(rest);
  load_companions();
}

}  // namespace colo
