#include <colo/compat/torch_compat.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/optim/lamb.h>
#include <colo/optim/optimizer_state.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <set>
#include <stdexcept>

namespace colo::optim {
namespace {

using StateMap = std::map<std::string, torch::Tensor>;

const torch::optim::OptimizerParamGroup& group_at(const torch::optim::Optimizer& optimizer, size_t group) {
  const auto& groups = optimizer.param_groups();
  if (group >= groups.size()) {
    throw std::out_of_range(
        fmt::format("parameter group {} does not exist: the optimizer has {} groups", group, groups.size()));
  }
  return groups[group];
}

torch::Tensor param_at(const torch::optim::Optimizer& optimizer, size_t index) {
  size_t offset = 0;
  for (const auto& group : optimizer.param_groups()) {
    if (index < offset + group.params().size()) return group.params()[index - offset];
    offset += group.params().size();
  }
  throw std::out_of_range(
      fmt::format("parameter index {} does not exist: the optimizer updates {} parameters", index, offset));
}

torch::Tensor step_tensor(int64_t step) { return torch::full({}, static_cast<double>(step), torch::kFloat); }

// Adam-like states (HybridAdam, Lamb, torch Adam/AdamW) share step, exp_avg and exp_avg_sq.
template <typename State>
StateMap adam_like(const State& s) {
  return {{"step", step_tensor(s.step())}, {"exp_avg", s.exp_avg()}, {"exp_avg_sq", s.exp_avg_sq()}};
}

class StateReader {
 public:
  StateReader(const StateMap& state, const torch::Tensor& param, size_t index)
      : state_(state), param_(param), index_(index) {}

  bool has(const std::string& key) const { return state_.count(key) > 0; }

  torch::Tensor tensor(const std::string& key) {
    const auto& t = require(key);
    if (t.sizes() != param_.sizes()) {
      throw std::invalid_argument(fmt::format("optimizer state of parameter {}: '{}' has shape {}, the parameter {}",
                                              index_, key, fmt::join(t.sizes(), "x"), fmt::join(param_.sizes(), "x")));
    }
    return t.to(param_.options(), /*non_blocking=*/false, /*copy=*/true);
  }

  int64_t step() {
    const auto& t = require("step");
    const double value = t.numel() == 1 ? t.item<double>() : -1.0;
    if (!(value >= 0.0) || value != std::floor(value)) {
      throw std::invalid_argument(
          fmt::format("optimizer state of parameter {}: 'step' must be one non-negative whole number", index_));
    }
    return static_cast<int64_t>(value);
  }

  // Every key of the saved state must have been used: a leftover one means another optimizer's state.
  void finish(const std::set<std::string>& allowed) const {
    for (const auto& [key, tensor] : state_) {
      if (!allowed.count(key)) {
        throw std::invalid_argument(
            fmt::format("optimizer state of parameter {} has an unexpected entry '{}' (expected {}); was it saved from "
                        "another kind of optimizer?",
                        index_, key, fmt::join(allowed, ", ")));
      }
    }
  }

 private:
  const torch::Tensor& require(const std::string& key) const {
    auto it = state_.find(key);
    if (it == state_.end() || !it->second.defined()) {
      throw std::invalid_argument(fmt::format("optimizer state of parameter {} has no '{}'", index_, key));
    }
    return it->second;
  }

  const StateMap& state_;
  const torch::Tensor& param_;
  size_t index_;
};

template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> make_adam_like(StateReader& in, bool with_max) {
  auto s = std::make_unique<State>();
  s->step(in.step());
  s->exp_avg(in.tensor("exp_avg"));
  s->exp_avg_sq(in.tensor("exp_avg_sq"));
  if constexpr (std::is_same_v<State, torch::optim::AdamParamState> ||
                std::is_same_v<State, torch::optim::AdamWParamState>) {
    if (with_max && in.has("max_exp_avg_sq")) s->max_exp_avg_sq(in.tensor("max_exp_avg_sq"));
  }
  in.finish(with_max ? std::set<std::string>{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
                     : std::set<std::string>{"step", "exp_avg", "exp_avg_sq"});
  return s;
}

}  // namespace

double get_lr(const torch::optim::Optimizer& optimizer, size_t group) {
  return group_at(optimizer, group).options().get_lr();
}

void set_lr(torch::optim::Optimizer& optimizer, size_t group, double lr) {
  group_at(optimizer, group);  // range check with our message
  optimizer.param_groups()[group].options().set_lr(lr);
}

std::vector<torch::Tensor> optimizer_params(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  return params;
}

std::map<std::string, torch::Tensor> get_param_state(const torch::optim::Optimizer& optimizer, size_t index) {
  const auto param = param_at(optimizer, index);
  auto it = optimizer.state().find(compat::optimizer_state_key(param));
  if (it == optimizer.state().end()) return {};
  const auto* state = it->second.get();
  if (auto* s = dynamic_cast<const AdamMomentsParamState*>(state)) return adam_like(*s);  // HybridAdam, Lamb
  if (auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
    auto out = adam_like(*s);
    if (s->max_exp_avg_sq().defined()) out["max_exp_avg_sq"] = s->max_exp_avg_sq();
    return out;
  }
  if (auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
    auto out = adam_like(*s);
    if (s->max_exp_avg_sq().defined()) out["max_exp_avg_sq"] = s->max_exp_avg_sq();
    return out;
  }
  if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
    return {{"momentum_buffer", s->momentum_buffer()}};
  }
  throw std::invalid_argument(
      "get_param_state supports HybridAdam, Lamb and torch's Adam, AdamW and SGD; this optimizer's state is of "
      "another type");
}

void set_param_state(torch::optim::Optimizer& optimizer, size_t index,
                     const std::map<std::string, torch::Tensor>& state) {
  const auto param = param_at(optimizer, index);
  const auto key = compat::optimizer_state_key(param);
  if (state.empty()) {
    optimizer.state().erase(key);
    return;
  }
  StateReader in(state, param, index);
  std::unique_ptr<torch::optim::OptimizerParamState> built;
  if (dynamic_cast<HybridAdam*>(&optimizer) || dynamic_cast<Lamb*>(&optimizer)) {
    built = make_adam_like<AdamMomentsParamState>(in, false);
  } else if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    built = make_adam_like<torch::optim::AdamWParamState>(in, true);
  } else if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    built = make_adam_like<torch::optim::AdamParamState>(in, true);
  } else if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(in.tensor("momentum_buffer"));
    in.finish({"momentum_buffer"});
    built = std::move(s);
  } else {
    throw std::invalid_argument(
        "set_param_state supports HybridAdam, Lamb and torch's Adam, AdamW and SGD; this optimizer is another one");
  }
  optimizer.state()[key] = std::move(built);
}

}  // namespace colo::optim
