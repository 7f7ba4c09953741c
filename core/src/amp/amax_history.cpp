// AmaxHistory (amax_history.h): delayed scaling's state for one float8 operand.
#include <colo/amp/amax_history.h>

#include <fmt/format.h>

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

AmaxHistory::AmaxHistory(DelayedScalingOptions options, double fp8_max, const torch::TensorOptions& device)
    : options_(options), fp8_max_(fp8_max) {
  std::vector<std::string> problems;
  if (options.history_length() < 1) {
    problems.push_back(fmt::format("history_length must be >= 1, got {}", options.history_length()));
  }
  if (options.margin() < 0) problems.push_back(fmt::format("margin must be >= 0, got {}", options.margin()));
  if (!(fp8_max > 0) || !std::isfinite(fp8_max)) problems.push_back(fmt::format("fp8_max must be > 0, got {}", fp8_max));
  if (!problems.empty()) {
    std::string text = "delayed float8 scaling:";
    for (const auto& p : problems) text += " " + p + ";";
    text.pop_back();
    throw std::invalid_argument(text);
  }
  const auto fp32 = device.dtype(torch::kFloat);
  history_ = torch::zeros({options.history_length()}, fp32);
  scale_ = torch::ones({}, fp32);
  nonfinite_ = torch::zeros({}, fp32.dtype(torch::kLong));
}

void AmaxHistory::update() {
  torch::NoGradGuard no_grad;
  // The newest amax: dropped (and counted) when not finite, so the history stays usable.
  const auto newest = history_[0];
  const auto finite = torch::isfinite(newest);
  nonfinite_.add_(finite.logical_not().to(torch::kLong));
  newest.copy_(torch::where(finite, newest, torch::zeros_like(newest)));
  const auto amax = options_.reduction() == AmaxReduction::kMax ? history_.max() : newest.clone();
  const double divisor = std::ldexp(1.0, static_cast<int>(options_.margin()));
  const auto candidate = amax.reciprocal() * (fp8_max_ / divisor);
  scale_.copy_(torch::where(amax > 0, candidate, scale_));
  // Newest first: the oldest slot leaves, a zeroed one opens at 0.
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
  if (history.dim() != 1 || history.size(0) != history_.size(0)) {
    throw std::invalid_argument(fmt::format(
        "delayed float8 scaling state: a history of {} steps, this run keeps {} (history_length)",
        history.dim() == 1 ? history.size(0) : -1, history_.size(0)));
  }
  torch::NoGradGuard no_grad;
  history_.copy_(history);
  scale_.copy_(state["scale"].reshape({}));
  nonfinite_.copy_(state["nonfinite_amaxes"].reshape({}));
}

}  // namespace colo::amp
