// AmaxHistory (amax_history.h): delayed scaling's state for one float8 operand.
#include <colo/amp/amax_history.h>

#include <colo/dist/process_group.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace colo::amp {

AmaxReduction parse_amax_reduction(const std::string& name) {
  if (name == "max") return AmaxReduction::kMax;
  if (name == "most_recent") return AmaxReduction::kMostRecent;
  throw std::invalid_argument(
      fmt::format("unknown amax reduction '{}': max (the largest amax of the history) or most_recent", name));
}

const char* to_string(AmaxReduction reduction) { return reduction == AmaxReduction::kMax ? "max" : "most_recent"; }

AmaxHistory::AmaxHistory(DelayedScalingOptions options, double fp8_max, const torch::TensorOptions& device,
                         int64_t operands)
    : options_(options), fp8_max_(fp8_max) {
  std::vector<std::string> problems;
  if (options.history_length() < 1) {
    problems.push_back(fmt::format("history_length must be >= 1, got {}", options.history_length()));
  }
  if (options.margin() < 0) problems.push_back(fmt::format("margin must be >= 0, got {}", options.margin()));
  if (operands < 1) problems.push_back(fmt::format("operands must be >= 1, got {}", operands));
  if (!(fp8_max > 0) || !std::isfinite(fp8_max)) problems.push_back(fmt::format("fp8_max must be > 0, got {}", fp8_max));
  if (!problems.empty()) {
    std::string text = "delayed float8 scaling:";
    for (const auto& p : problems) text += " " + p + ";";
    text.pop_back();
    throw std::invalid_argument(text);
  }
  const auto fp32 = device.dtype(torch::kFloat);
  const int64_t n = std::max<int64_t>(operands, 1);
  history_ = torch::zeros({options.history_length(), n}, fp32);
  scale_ = torch::ones({n}, fp32);
  nonfinite_ = torch::zeros({n}, fp32.dtype(torch::kLong));
}

void AmaxHistory::update(const std::vector<dist::ProcessGroup*>& agree_over) {
  torch::NoGradGuard no_grad;
  const auto newest = history_[0];
  if (!agree_over.empty()) {
    // A NaN loses a max on some backends: as +inf it wins everywhere, and is dropped below.
    newest.masked_fill_(torch::isnan(newest), std::numeric_limits<float>::infinity());
    for (auto* group : agree_over) {
      if (group != nullptr && group->size() > 1) {
        auto amaxes = newest.contiguous();
        group->all_reduce_and_wait(amaxes, dist::ReduceOp::kMax);
        newest.copy_(amaxes);
      }
    }
  }
  // The newest amaxes: dropped (and counted) where not finite, so the history stays usable.
  const auto finite = torch::isfinite(newest);
  nonfinite_.add_(finite.logical_not().to(torch::kLong));
  newest.masked_fill_(finite.logical_not(), 0.0);
  const auto amax = options_.reduction() == AmaxReduction::kMax ? std::get<0>(history_.max(0)) : newest.clone();
  const double divisor = std::ldexp(1.0, static_cast<int>(options_.margin()));
  const auto candidate = amax.reciprocal() * (fp8_max_ / divisor);
  scale_.copy_(torch::where(amax > 0, candidate, scale_));
  // Newest first: the oldest slots leave, zeroed ones open at 0.
  history_.copy_(torch::roll(history_, 1, 0));
  history_[0].zero_();
}

torch::OrderedDict<std::string, torch::Tensor> AmaxHistory::state() const {
  torch::OrderedDict<std::string, torch::Tensor> out;
  out.insert("history", history_.clone());
  out.insert("scale", scale_.clone());
  out.insert("nonfinite_amaxes", nonfinite_.clone());
  return out;
}

void AmaxHistory::load_state(const torch::OrderedDict<std::string, torch::Tensor>& state) {
  for (const char* key : {"history", "scale", "nonfinite_amaxes"}) {
    if (!state.contains(key)) throw std::invalid_argument(fmt::format("delayed float8 scaling state: no '{}'", key));
  }
  const auto& history = state["history"];
  // A one-operand history of an earlier layout ([length]) reads as [length, 1].
  const auto steps = history.dim() >= 1 ? history.size(0) : -1;
  const auto operands = history.dim() == 2 ? history.size(1) : (history.dim() == 1 ? 1 : -1);
  if (steps != history_.size(0)) {
    throw std::invalid_argument(fmt::format(
        "delayed float8 scaling state: a history of {} steps, this run keeps {} (history_length)", steps,
        history_.size(0)));
  }
  if (operands != history_.size(1)) {
    throw std::invalid_argument(
        fmt::format("delayed float8 scaling state: a history of {} float8 operands, this run has {} (another model or "
                    "layout: which layers multiply in float8 differs)",
                    operands, history_.size(1)));
  }
  torch::NoGradGuard no_grad;
  history_.copy_(history.reshape(history_.sizes()));
  scale_.copy_(state["scale"].reshape(scale_.sizes()));
  nonfinite_.copy_(state["nonfinite_amaxes"].reshape(nonfinite_.sizes()));
}

}  // namespace colo::amp
