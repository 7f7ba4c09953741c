#include <colo/amp/grad_clip.h>
#include <colo/engine/mixed_precision_optimizer.h>
#include <colo/dist/process_group.h>
#include <colo/optim/optimizer_state.h>
#include <colo/nn/shard_spec.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "optimizer_scalars.h"
#include "parameter_match.h"
#include "optimizer_state_entries.h"

#include "master_weights_state.h"

namespace colo {
namespace {

using StateMap = std::map<std::string, torch::Tensor>;

}  // namespace

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                                 std::shared_ptr<nn::LayerStack> model,
                                                 MixedPrecisionOptimizerOptions options)
    : optimizer_(std::move(optimizer)), model_(std::move(model)), options_(std::move(options)) {
  if (!optimizer_) throw std::invalid_argument("MixedPrecisionOptimizer: the optimizer is null");
  if (!model_) throw std::invalid_argument("MixedPrecisionOptimizer: the model is null");
  if (auto problem = detail::max_grad_norm_problem(options_.max_grad_norm()); !problem.empty()) {
    throw std::invalid_argument("MixedPrecisionOptimizer: " + problem);
  }
  max_grad_norm_ = options_.max_grad_norm();

  const auto matched = detail::match_optimizer_to_model(*model_, *optimizer_, "MixedPrecisionOptimizer");
  model_names_ = matched.model_names;
  model_params_ = matched.model_params;
  const auto given = optim::optimizer_params(*optimizer_);
  const auto& index_of = matched.model_index;  // optimizer position -> model index
  for (auto i : index_of) {
    names_.push_back(model_names_[i]);
    working_.push_back(model_params_[i]);
  }

  const auto& policy = options_.policy();
  const auto compute = policy.compute_dtype();
  bool recast = false;
  for (const auto& p : model_params_) recast = recast || (p.is_floating_point() && p.scalar_type() != compute);

  // State already present is keyed by the tensors being replaced: carry it over by position.
  std::vector<StateMap> carried;
  if (recast && !optimizer_->state().empty()) {
    for (std::size_t k = 0; k < given.size(); ++k) carried.push_back(optim::get_param_state(*optimizer_, k));
  }

  if (policy.uses_master_weights()) {
    masters_ = std::make_shared<amp::MasterWeights>(model_params_, compute);  // casts in place
    std::size_t k = 0;
    for (auto& group : optimizer_->param_groups()) {
      for (auto& param : group.params()) param = masters_->master_params()[index_of[k++]];
    }
  } else if (recast) {
    // Pure low precision: the optimizer steps the working weights themselves.
    torch::NoGradGuard no_grad;
    for (auto& p : model_params_) {
      if (p.is_floating_point()) p.set_data(p.detach().to(compute));
    }
  }
  stepped_ = optim::optimizer_params(*optimizer_);
  const auto cuts = model_->canonical_shard_cuts();
  for (const auto& name : names_) {
    const auto it = cuts.find(name);
    tp_pieces_.push_back(it == cuts.end() ? 1 : nn::pieces_of(it->second));
  }
  if (!carried.empty()) {
    optimizer_->state().clear();
    for (std::size_t k = 0; k < carried.size(); ++k) optim::set_param_state(*optimizer_, k, carried[k]);
  }
  if (policy.needs_loss_scaler()) scaler_ = std::make_unique<amp::DynamicLossScaler>(options_.loss_scaler());
}

bool MixedPrecisionOptimizer::step() {
  const bool taken = take_step();
  run_after_step();
  return taken;
}

bool MixedPrecisionOptimizer::take_step() {
  if (pre_step_hook_) pre_step_hook_();
  if (masters_) masters_->copy_grads_to_master();
  bool found_inf = false;
  if (scaler_ || max_grad_norm_ > 0.0) {
    const double inv_scale = scaler_ ? scaler_->inv_scale() : 1.0;
    std::vector<torch::Tensor> grads;
    grads.reserve(stepped_.size());
    for (const auto& p : stepped_) grads.push_back(p.grad());
    auto plan = options_.grad_norm();
    if (!scaler_) plan.agree_over = nullptr;
    const auto result = amp::unscale_and_clip(grads, inv_scale, max_grad_norm_, plan, tp_pieces_);
    last_grad_norm_ = result.total_norm;
    found_inf = result.found_inf;
  }
  if (scaler_ && !scaler_->update(found_inf)) return false;
  optimizer_->step();
  if (masters_) masters_->copy_master_to_working();
  return true;
}

void MixedPrecisionOptimizer::zero_grad() {
  // Dropped, not zeroed: autograd then hands over fresh gradients instead of adding into zeroed
  // ones (no fill, no add), and gradient buckets gather them in one batched copy per bucket.
  for (auto& p : model_params_) p.mutable_grad() = torch::Tensor();
}

OptimizerWrapper::FullState MixedPrecisionOptimizer::full_state() const {
  FullState state;
  for (std::size_t k = 0; k < names_.size(); ++k) {
    for (const auto& [key, tensor] : optim::get_param_state(*optimizer_, k)) {
      state.tensors.emplace_back(names_[k] + "." + key, tensor);
    }
  }
  if (masters_) {
    const auto master_of = detail::masters_by_working(*masters_);
    for (std::size_t i = 0; i < model_params_.size(); ++i) {
      state.tensors.emplace_back("master." + model_names_[i],
                                 master_of.at(model_params_[i].unsafeGetTensorImpl()).detach());
    }
  }
  state.scalars = detail::optimizer_scalars(*optimizer_, scaler_.get());
  return state;
}

void MixedPrecisionOptimizer::load_full_state(const FullState& state) {
  const auto master_of = masters_ ? detail::masters_by_working(*masters_) : std::unordered_map<const void*, torch::Tensor>{};

  // 1. Sort and check every entry; change nothing yet. Which state keys a parameter needs is the
  // torch optimizer's to say (step 2).
  std::vector<std::string> errors;
  auto sorted = detail::sort_optimizer_state_entries(state.tensors, names_, stepped_, model_names_, model_params_,
                                                     masters_ != nullptr, /*check=*/{}, errors);
  auto& param_states = sorted.param_states;
  const auto& master_values = sorted.masters;

  const auto scalars =
      detail::parse_optimizer_scalars(state.scalars, optimizer_->param_groups().size(), scaler_.get(), errors);
  const auto fail = [&errors] {
    throw std::invalid_argument(
        fmt::format("MixedPrecisionOptimizer::load_full_state: the optimizer state does not fit this optimizer "
                    "({} problem(s)): {}. Was it saved from the same model and optimizer type?",
                    errors.size(), fmt::join(errors, "; ")));
  };
  if (!errors.empty()) fail();

  // 2. Per-parameter state; the optimizer decides which keys it needs. On any refusal the
  // previous state is put back, so a failed load changes nothing.
  std::vector<StateMap> previous;
  previous.reserve(names_.size());
  for (std::size_t k = 0; k < names_.size(); ++k) previous.push_back(optim::get_param_state(*optimizer_, k));
  for (std::size_t k = 0; k < names_.size(); ++k) {
    try {
      optim::set_param_state(*optimizer_, k, param_states[k]);
    } catch (const std::invalid_argument& e) {
      errors.push_back(fmt::format("parameter '{}': {}", names_[k], e.what()));
    }
  }
  if (!errors.empty()) {
    for (std::size_t k = 0; k < names_.size(); ++k) optim::set_param_state(*optimizer_, k, previous[k]);
    fail();
  }

  // 3. The rest cannot fail any more.
  if (masters_ && !master_values.empty()) {
    torch::NoGradGuard no_grad;
    for (const auto& [i, value] : master_values) master_of.at(model_params_[i].unsafeGetTensorImpl()).copy_(value);
    masters_->copy_master_to_working();
  }
  detail::apply_optimizer_scalars(scalars, *optimizer_, scaler_.get());
}

}  // namespace colo
