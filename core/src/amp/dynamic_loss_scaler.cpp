#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/grad_clip.h>
#include <colo/dist/process_group.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace colo::amp {
namespace {

void validate(const LossScalerOptions& o) {
  std::vector<std::string> errors;
  if (!(o.min_scale() > 0.0)) errors.push_back(fmt::format("min_scale {} must be > 0", o.min_scale()));
  if (!(o.max_scale() >= o.min_scale()) || !std::isfinite(o.max_scale())) {
    errors.push_back(fmt::format("max_scale {} must be finite and >= min_scale {}", o.max_scale(), o.min_scale()));
  }
  if (!(o.initial_scale() >= o.min_scale() && o.initial_scale() <= o.max_scale())) {
    errors.push_back(fmt::format("initial_scale {} must lie in [min_scale, max_scale] = [{}, {}]", o.initial_scale(),
                                 o.min_scale(), o.max_scale()));
  }
  if (!(o.growth_factor() > 1.0)) errors.push_back(fmt::format("growth_factor {} must be > 1", o.growth_factor()));
  if (!(o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0)) {
    errors.push_back(fmt::format("backoff_factor {} must lie in (0, 1)", o.backoff_factor()));
  }
  if (o.growth_interval() < 1) errors.push_back(fmt::format("growth_interval {} must be >= 1", o.growth_interval()));
  if (o.hysteresis() < 0) {
    errors.push_back(
        fmt::format("hysteresis {} must be >= 0 (0 and 1 both back off at the first overflow)", o.hysteresis()));
  }
  if (!errors.empty()) {
    throw std::invalid_argument(fmt::format("invalid loss scaler options: {}", fmt::join(errors, "; ")));
  }
}

double require(const std::map<std::string, double>& state, const char* key) {
  auto it = state.find(key);
  if (it == state.end()) {
    throw std::invalid_argument(
        fmt::format("loss scaler state has no '{}' (expected scale, growth_tracker, hysteresis_left, skipped_steps); "
                    "was it saved by DynamicLossScaler::state_dict()?",
                    key));
  }
  return it->second;
}

int64_t require_count(const std::map<std::string, double>& state, const char* key) {
  const double value = require(state, key);
  if (!(value >= 0.0) || value != std::floor(value)) {
    throw std::invalid_argument(
        fmt::format("loss scaler state '{}' = {} is not a non-negative whole number", key, value));
  }
  return static_cast<int64_t>(value);
}

}  // namespace

DynamicLossScaler::DynamicLossScaler(LossScalerOptions options)
    : options_(options), scale_(options.initial_scale()), hysteresis_left_(options.hysteresis()) {
  validate(options_);
}

bool DynamicLossScaler::has_overflow(const std::vector<torch::Tensor>& grads, dist::ProcessGroup* group) const {
  auto flag = (~torch::isfinite(grad_sq_norm(grads))).to(torch::kFloat);
  if (group) group->all_reduce_and_wait(flag, dist::ReduceOp::kMax);
  return flag.item<float>() > 0.0f;
}

bool DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    ++skipped_steps_;
    growth_tracker_ = 0;
    if (hysteresis_left_ > 0) --hysteresis_left_;
    if (hysteresis_left_ == 0) scale_ = std::max(scale_ * options_.backoff_factor(), options_.min_scale());
    return false;
  }
  if (++growth_tracker_ == options_.growth_interval()) {
    growth_tracker_ = 0;
    hysteresis_left_ = options_.hysteresis();
    scale_ = std::min(scale_ * options_.growth_factor(), options_.max_scale());
  }
  return true;
}

std::map<std::string, double> DynamicLossScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"hysteresis_left", static_cast<double>(hysteresis_left_)},
          {"skipped_steps", static_cast<double>(skipped_steps_)}};
}

void DynamicLossScaler::load_state_dict(const std::map<std::string, double>& state) {
  const double scale = require(state, "scale");
  if (!(scale > 0.0) || !std::isfinite(scale)) {
    throw std::invalid_argument(fmt::format("loss scaler state 'scale' = {} must be finite and > 0", scale));
  }
  const int64_t growth_tracker = require_count(state, "growth_tracker");
  const int64_t hysteresis_left = require_count(state, "hysteresis_left");
  const int64_t skipped_steps = require_count(state, "skipped_steps");
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  hysteresis_left_ = hysteresis_left;
  skipped_steps_ = skipped_steps;
}

}  // namespace colo::amp
