// Fp8DelayedScaling (fp8_scaling.h): a model's delayed float8 scaling state.
#include <colo/nn/fp8_scaling.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

namespace colo::nn {
namespace {

constexpr double kE4m3Max = 448.0;
constexpr double kE5m2Max = 57344.0;

// A layer's float8 operands as checkpoints name them, and where each lives: the forward history's
// columns 2i (input) and 2i+1 (weight), the backward's column i (the output gradient).
struct OperandColumn {
  const char* name;
  bool forward;
  int64_t offset;  // within the layer's columns: 2 forward (input, weight), 1 backward
  int64_t column(int64_t layer) const { return (forward ? 2 * layer : layer) + offset; }
};
constexpr OperandColumn kOperands[] = {{"input", true, 0}, {"weight", true, 1}, {"grad", false, 0}};

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
    names_.push_back(fmt::format("layer{}", i));
  }
}

void Fp8DelayedScaling::set_layer_names(std::vector<std::string> names) {
  if (static_cast<int64_t>(names.size()) != layers_) {
    throw std::invalid_argument(
        fmt::format("delayed float8 scaling: {} layer names for {} float8 layers", names.size(), layers_));
  }
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    throw std::invalid_argument(fmt::format("delayed float8 scaling: two float8 layers named '{}'", *twice));
  }
  names_ = std::move(names);
}

std::vector<std::pair<std::string, torch::Tensor>> Fp8DelayedScaling::layer_entries() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (int64_t i = 0; i < layers_; ++i) {
    for (const auto& operand : kOperands) {
      const auto& history = operand.forward ? forward_ : backward_;
      const auto c = operand.column(i);
      const auto base = fmt::format("{}.{}.", names_[static_cast<size_t>(i)], operand.name);
      out.emplace_back(base + "amax_history", history.history().select(1, c).to(torch::kCPU).clone());
      out.emplace_back(base + "scale", history.scale().narrow(0, c, 1).to(torch::kCPU).clone());
      out.emplace_back(base + "nonfinite_amaxes", history.nonfinite_amaxes().narrow(0, c, 1).to(torch::kCPU).clone());
    }
  }
  return out;
}

std::function<void()> Fp8DelayedScaling::prepare_load(const std::vector<std::pair<std::string, torch::Tensor>>& entries,
                                                      bool primed) {
  std::map<std::string, torch::Tensor> by_name(entries.begin(), entries.end());
  // The whole state, filled in on the CPU from the entries, then checked as AmaxHistory checks it.
  auto forward = forward_.state(), backward = backward_.state();
  for (auto* state : {&forward, &backward}) {
    for (auto& item : *state) item.value() = item.value().to(torch::kCPU).clone();
  }
  std::vector<std::string> problems;
  for (int64_t i = 0; i < layers_; ++i) {
    for (const auto& operand : kOperands) {
      auto& state = operand.forward ? forward : backward;
      const auto c = operand.column(i);
      const auto base = fmt::format("{}.{}.", names_[static_cast<size_t>(i)], operand.name);
      for (const std::string key : {"amax_history", "scale", "nonfinite_amaxes"}) {
        const bool history = key == "amax_history";
        const auto found = by_name.find(base + key);
        auto& whole = state[history ? "history" : key];
        auto target = history ? whole.select(1, c) : whole.narrow(0, c, 1);
        if (found == by_name.end()) {
          problems.push_back(fmt::format("no '{}{}'", base, key));
        } else if (found->second.sizes() != target.sizes()) {
          problems.push_back(fmt::format(
              "'{}{}' has shape [{}], this run's is [{}]{}", base, key, fmt::join(found->second.sizes(), ", "),
              fmt::join(target.sizes(), ", "),
              history ? " (fp8_amax_history_len differs: resume with the saved length)" : ""));
        } else {
          target.copy_(found->second.to(target.scalar_type()));
        }
      }
    }
  }
  if (!problems.empty()) {
    throw std::invalid_argument(fmt::format("delayed float8 scaling state does not fit this model ({} problem(s)): {}",
                                            problems.size(), fmt::join(problems, "; ")));
  }
  return [this, forward = std::move(forward), backward = std::move(backward), primed] {
    forward_.load_state(forward);
    backward_.load_state(backward);
    *primed_ = primed;
  };
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
