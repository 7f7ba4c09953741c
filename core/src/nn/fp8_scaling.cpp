// Fp8DelayedScaling (fp8_scaling.h): a model's delayed float8 scaling state.
#include <colo/nn/fp8_scaling.h>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace colo::nn {
namespace {

constexpr double kE4m3Max = 448.0;
constexpr double kE5m2Max = 57344.0;

}  // namespace

Fp8Scaling parse_fp8_scaling(const std::string& name) {
  if (name == "current") return Fp8Scaling::kCurrent;
  if (name == "delayed") return Fp8Scaling::kDelayed;
  throw std::invalid_argument(fmt::format(
      "unknown float8 scaling '{}': current (each operand by its own max|x|) or delayed (by an amax history)", name));
}

const char* to_string(Fp8Scaling scaling) { return scaling == Fp8Scaling::kCurrent ? "current" : "delayed"; }

Fp8DelayedScaling::Fp8DelayedScaling(int64_t layers, amp::DelayedScalingOptions options,
                                     const torch::TensorOptions& device)
    : layers_(layers),
      forward_(options, kE4m3Max, device, 2 * std::max<int64_t>(layers, 1)),
      backward_(options, kE5m2Max, device, std::max<int64_t>(layers, 1)) {
  if (layers < 1) {
    throw std::invalid_argument(fmt::format("delayed float8 scaling: a model of {} float8 layers", layers));
  }
  for (int64_t i = 0; i < layers; ++i) {
    auto slot = std::make_shared<Fp8OperandScales>();
    slot->input_scale = forward_.scale(2 * i);
    slot->input_amax = forward_.current_amax(2 * i);
    slot->weight_scale = forward_.scale(2 * i + 1);
    slot->weight_amax = forward_.current_amax(2 * i + 1);
    slot->grad_scale = backward_.scale(i);
    slot->grad_amax = backward_.current_amax(i);
    slot->primed = primed_;
    slots_.push_back(std::move(slot));
  }
}

std::shared_ptr<const Fp8OperandScales> Fp8DelayedScaling::layer(int64_t index) const {
  if (index < 0 || index >= layers_) {
    throw std::out_of_range(fmt::format("delayed float8 scaling: layer {} of {}", index, layers_));
  }
  return slots_[static_cast<size_t>(index)];
}

void Fp8DelayedScaling::update(const std::vector<dist::ProcessGroup*>& agree_over) {
  forward_.update(agree_over);
  backward_.update(agree_over);
  *primed_ = true;
}

int64_t Fp8DelayedScaling::nonfinite_amaxes() const {
  return forward_.nonfinite_amaxes().sum().item<int64_t>() + backward_.nonfinite_amaxes().sum().item<int64_t>();
}

torch::OrderedDict<std::string, torch::Tensor> Fp8DelayedScaling::state() const {
  torch::OrderedDict<std::string, torch::Tensor> out;
  for (const auto& [prefix, history] : {std::pair<const char*, const amp::AmaxHistory*>{"forward.", &forward_},
                                        std::pair<const char*, const amp::AmaxHistory*>{"backward.", &backward_}}) {
    for (const auto& item : history->state()) out.insert(prefix + item.key(), item.value());
  }
  out.insert("primed", torch::tensor(static_cast<int64_t>(*primed_)));
  return out;
}

void Fp8DelayedScaling::load_state(const torch::OrderedDict<std::string, torch::Tensor>& state) {
  if (!state.contains("primed")) throw std::invalid_argument("delayed float8 scaling state: no 'primed'");
  const auto part = [&state](const std::string& prefix) {
    torch::OrderedDict<std::string, torch::Tensor> out;
    for (const auto& item : state) {
      if (item.key().rfind(prefix, 0) == 0) out.insert(item.key().substr(prefix.size()), item.value());
    }
    return out;
  };
  const auto forward = part("forward."), backward = part("backward.");
  // Both checked on scratch copies before either changes: a refused state leaves this one as it was.
  amp::AmaxHistory(forward_.options(), forward_.fp8_max(), forward_.history().options(), forward_.operands())
      .load_state(forward);
  amp::AmaxHistory(backward_.options(), backward_.fp8_max(), backward_.history().options(), backward_.operands())
      .load_state(backward);
  forward_.load_state(forward);
  backward_.load_state(backward);
  *primed_ = state["primed"].item<int64_t>() != 0;
}

}  // namespace colo::nn
