#include <c10/util/Type.h>
#include <colo/amp/grad_clip.h>
#include <colo/engine/memory_size.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/ddp/bucket_assignment.h>
#include <colo/dist/process_group.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/optim/optimizer_state.h>
#include <colo/zero/all_reduce_grad_reducer.h>
#include <colo/zero/bucketed_all_gather.h>
#include <colo/zero/gather_full_tensors.h>
#include <colo/zero/reduce_scatter_grad_reducer.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <colo/nn/shard_spec.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include "parameter_match.h"
#include "optimizer_scalars.h"
#include "optimizer_state_entries.h"
#include "sharded_adam_checks.h"

namespace colo {
namespace {

// Adam-like hyper-parameters of one parameter group, whatever the optimizer's own options type.
optim::HybridAdamOptions adam_options(const torch::optim::Optimizer& optimizer, std::size_t group) {
  const auto& options = optimizer.param_groups().at(group).options();
  if (auto* o = dynamic_cast<const optim::HybridAdamOptions*>(&options)) return *o;
  if (auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) {
    return optim::HybridAdamOptions(o->lr())
        .betas(o->betas())
        .eps(o->eps())
        .weight_decay(o->weight_decay())
        .adamw_mode(true);
  }
  if (auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&options)) {
    return optim::HybridAdamOptions(o->lr())
        .betas(o->betas())
        .eps(o->eps())
        .weight_decay(o->weight_decay())
        .adamw_mode(false);
  }
  throw std::logic_error("ZeroOptimizer: a parameter group's options are not Adam options");  // check_optimizer
}

int64_t cap_bytes(double mb) { return std::max<int64_t>(1, static_cast<int64_t>(mb * 1024.0 * 1024.0)); }

}  // namespace

void ZeroOptimizer::check_optimizer(const torch::optim::Optimizer& optimizer, const std::string& caller) {
  detail::check_adam_like(optimizer, caller);
}

std::vector<std::string> ZeroOptimizerOptions::violations() const {
  std::vector<std::string> errors;
  if (stage() == 3) {
    errors.emplace_back(
        "stage 3 (parameters sharded too) is not the ZeroOptimizer's: ZeRO-3 is the GeminiOptimizer's (chunk-based "
        "parameter sharding)");
  } else if (stage() != 1 && stage() != 2) {
    errors.push_back(fmt::format("stage must be 1 or 2, got {}", stage()));
  }
  if (auto problem = detail::max_grad_norm_problem(max_grad_norm()); !problem.empty()) errors.push_back(problem);
  if (auto problem = memory_size_problem(bucket_cap_mb(), kMebibytes, false); !problem.empty()) {
    errors.push_back(fmt::format("bucket_cap_mb (reduce_bucket_size_mb) {} {}", bucket_cap_mb(), problem));
  }
  return errors;
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<nn::LayerStack> model,
                             std::shared_ptr<dist::ProcessGroup> group, ZeroOptimizerOptions options)
    : optimizer_(std::move(optimizer)),
      model_(std::move(model)),
      group_(std::move(group)),
      options_(std::move(options)),
      policy_(options_.precision()) {
  if (!optimizer_) throw std::invalid_argument("ZeroOptimizer: the optimizer is null");
  if (!model_) throw std::invalid_argument("ZeroOptimizer: the model is null");
  if (!group_) throw std::invalid_argument("ZeroOptimizer: the data-parallel process group is null");
  check_optimizer(*optimizer_, options_.caller());
  if (const auto errors = options_.violations(); !errors.empty()) {
    throw std::invalid_argument(fmt::format("{}: {}", options_.caller(), fmt::join(errors, "; ")));
  }
  max_grad_norm_ = options_.max_grad_norm();

  // 1. The sharded parameters: the optimizer's, in the model's canonical order.
  const auto matched = detail::match_optimizer_to_model(*model_, *optimizer_, "ZeroOptimizer");
  model_names_ = matched.model_names;
  model_params_ = matched.model_params;
  auto stepped = detail::floating_stepped_parameters(matched, "ZeroOptimizer");
  names_ = std::move(stepped.names);
  params_ = std::move(stepped.params);
  const std::vector<std::size_t> param_groups = std::move(stepped.groups);
  for (auto i : matched.others) unsharded_.push_back(model_params_[i]);
  const auto cuts = model_->canonical_shard_cuts();
  for (const auto& name : names_) {
    const auto it = cuts.find(name);
    tp_pieces_.push_back(it == cuts.end() ? 1 : nn::pieces_of(it->second));
  }
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> fp32_values;
  fp32_values.reserve(params_.size());
  // The exact fp32 values until they are in the master shard: the tensors themselves (casting
  // the parameters below re-points them at new storage; these keep the old), never a copy of the
  // whole model (which a 6.45B-parameter model's GPU does not have room for).
  for (const auto& p : params_) fp32_values.push_back(p.scalar_type() == torch::kFloat ? p.detach() : p.detach().to(torch::kFloat));
  const auto compute = policy_.compute_dtype();
  for (auto& p : model_params_) {
    if (p.is_floating_point() && p.scalar_type() != compute) p.set_data(p.detach().to(compute));
  }

  // 2.
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  layout_ = std::make_shared<zero::ShardLayout>(numels, ddp::assign_buckets(params_, cap_bytes(options_.bucket_cap_mb())),
                                                group_->size());

  // 3.
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
  auto shard_options = torch::TensorOptions(device);
  // Offloaded state is read and written by the CPU's Adam only, so it is not pinned: pinning four
  // shard-sized blocks is what the host refuses first on large models. Transfers go through
  // bucket-sized pinned buffers (the reducer's staging, the gather's per-bucket host copies).
  if (options_.cpu_offload()) shard_options = torch::TensorOptions(torch::kCPU);
  adam_ = std::make_shared<zero::ShardedAdam>(layout_, group_->rank(), param_groups, shard_options);
  auto master = adam_->master();
  layout_->copy_to_shard(group_->rank(), fp32_values, master);
  fp32_values.clear();

  // 4.
  gather_ = std::make_shared<zero::BucketedAllGather>(params_, layout_, group_, compute);

  // 5.
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (std::size_t i = 0; i < params_.size(); ++i) named.emplace_back(names_[i], params_[i]);
  if (options_.stage() == 1) {
    reducer_ = std::make_unique<zero::AllReduceGradReducer>(std::move(named), group_, layout_, adam_->grad(),
                                                            ddp::BucketedAllReduceOptions()
                                                                .bucket_cap_mb(options_.bucket_cap_mb())
                                                                .overlap_communication(options_.overlap_communication())
                                                                .communication_dtype(options_.communication_dtype()));
  } else {
    reducer_ =
        std::make_unique<zero::ReduceScatterGradReducer>(std::move(named), group_, layout_, adam_->grad(),
                                                         zero::ReduceScatterGradReducerOptions()
                                                             .overlap_communication(options_.overlap_communication())
                                                             .communication_dtype(options_.communication_dtype()));
  }

  // 6.
  if (policy_.needs_loss_scaler()) scaler_ = std::make_unique<amp::DynamicLossScaler>(options_.loss_scaler());
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::set_gradient_sync(bool enabled) { reducer_->set_sync(enabled); }
bool ZeroOptimizer::gradient_sync() const { return reducer_->sync_enabled(); }
void ZeroOptimizer::reduce_accumulated_gradients() { reducer_->reduce_accumulated(); }

std::vector<optim::HybridAdamOptions> ZeroOptimizer::hyperparameters() const {
  std::vector<optim::HybridAdamOptions> groups;
  for (std::size_t g = 0; g < optimizer_->param_groups().size(); ++g) groups.push_back(adam_options(*optimizer_, g));
  return groups;
}

bool ZeroOptimizer::step() {
  const bool taken = take_step();
  run_after_step();
  return taken;
}

bool ZeroOptimizer::take_step() {
  reducer_->finalize();
  bool found_inf = false;
  if (scaler_ || max_grad_norm_ > 0.0) {
    const double inv_scale = scaler_ ? scaler_->inv_scale() : 1.0;
    // The shards are disjoint: their squared norms sum to the global one. Normed per parameter
    // piece, as a replica's gradients are, so that the norm does not depend on the layout.
    const auto grad = adam_->grad();
    std::vector<torch::Tensor> pieces;
    std::vector<int64_t> tp_pieces;
    for (const auto& piece : layout_->pieces(group_->rank())) {
      pieces.push_back(grad.narrow(0, piece.shard_offset, piece.numel));
      tp_pieces.push_back(tp_pieces_[piece.param]);
    }
    amp::GradNormPlan plan;
    plan.sum_over.push_back(group_);
    for (const auto& g : options_.grad_norm_sum_over()) plan.sum_over.push_back(g);
    plan.tp = options_.tp_group();
    const double norm = amp::global_grad_norm(pieces, plan, inv_scale, tp_pieces);
    const auto result = amp::apply_unscale_and_clip({grad}, inv_scale, max_grad_norm_, norm);
    last_grad_norm_ = result.total_norm;
    found_inf = result.found_inf;
  }
  if (scaler_ && !scaler_->update(found_inf)) return false;
  adam_->step(hyperparameters());
  gather_->launch(adam_->master());
  if (!options_.overlap_communication()) gather_->wait_all();
  return true;
}

void ZeroOptimizer::zero_grad() {
  reducer_->zero_grad();
  detail::zero_defined_grads(unsharded_);
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroOptimizer::full_masters() const {
  auto full = zero::gather_full_tensors(*layout_, *group_, adam_->master());
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.reserve(full.size());
  for (std::size_t i = 0; i < full.size(); ++i) out.emplace_back(names_[i], full[i].view(params_[i].sizes()));
  return out;
}

void ZeroOptimizer::load_masters(const std::map<std::string, torch::Tensor>& values) {
  std::vector<torch::Tensor> full;
  full.reserve(names_.size());
  for (const auto& name : names_) full.push_back(values.at(name));
  gather_->wait_all();
  torch::NoGradGuard no_grad;
  auto master = adam_->master();
  layout_->copy_to_shard(group_->rank(), full, master);
  // Every rank has every value: the working weights are their rounding, without a gather.
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(full[i].view(params_[i].sizes()));
}

OptimizerWrapper::FullState ZeroOptimizer::full_state() const {
  FullState state;
  if (adam_->step_count() > 0) {
    const auto exp_avg = zero::gather_full_tensors(*layout_, *group_, adam_->exp_avg());
    const auto exp_avg_sq = zero::gather_full_tensors(*layout_, *group_, adam_->exp_avg_sq());
    for (std::size_t i = 0; i < names_.size(); ++i) {
      state.tensors.emplace_back(names_[i] + ".step",
                                 torch::full({}, static_cast<double>(adam_->step_count()), torch::kFloat));
      state.tensors.emplace_back(names_[i] + ".exp_avg", exp_avg[i].view(params_[i].sizes()));
      state.tensors.emplace_back(names_[i] + ".exp_avg_sq", exp_avg_sq[i].view(params_[i].sizes()));
    }
  }
  if (policy_.uses_master_weights()) {
    std::unordered_map<std::string, torch::Tensor> masters;
    for (auto& [name, value] : full_masters()) masters.emplace(name, value);
    for (std::size_t i = 0; i < model_names_.size(); ++i) {
      auto it = masters.find(model_names_[i]);
      state.tensors.emplace_back("master." + model_names_[i],
                                 it != masters.end() ? it->second : model_params_[i].detach().to(torch::kFloat));
    }
  }
  state.scalars = detail::optimizer_scalars(*optimizer_, scaler_.get());
  return state;
}

void ZeroOptimizer::load_full_state(const FullState& state) {
  // 1. Sort and check every entry; change nothing yet. A ZeRO state is Adam's, whole.
  std::vector<std::string> errors;
  const auto adam_entry = [](const std::string& key, const std::string& state_key, const torch::Tensor& tensor,
                             const torch::Tensor& param) -> std::optional<std::string> {
    if (state_key == "max_exp_avg_sq") return fmt::format("'{}' is amsgrad state, which ZeRO does not implement", key);
    if (state_key != "step" && state_key != "exp_avg" && state_key != "exp_avg_sq") {
      return fmt::format("unexpected '{}' (an Adam state has step, exp_avg and exp_avg_sq)", key);
    }
    if (state_key == "step" && tensor.defined() && tensor.numel() != 1) {
      return fmt::format("'{}' has shape {}, the parameter {}", key, detail::shape_of(tensor), detail::shape_of(param));
    }
    return std::nullopt;
  };
  const auto sorted = detail::sort_optimizer_state_entries(state.tensors, names_, params_, model_names_, model_params_,
                                                           policy_.uses_master_weights(), adam_entry, errors);
  const auto& param_states = sorted.param_states;
  std::map<std::string, torch::Tensor> master_values;
  for (const auto& [i, value] : sorted.masters) master_values.emplace(model_names_[i], value);
  std::unordered_set<std::string> optimized(names_.begin(), names_.end());

  // Every parameter has a whole Adam state, all with one step count, or none has any.
  std::vector<std::string> with_state, without_state;
  std::map<int64_t, std::string> steps;  // step count -> a parameter with it
  for (std::size_t i = 0; i < names_.size(); ++i) {
    const auto& s = param_states[i];
    if (s.empty()) {
      without_state.push_back(names_[i]);
      continue;
    }
    with_state.push_back(names_[i]);
    for (const char* key : {"step", "exp_avg", "exp_avg_sq"}) {
      if (!s.count(key)) errors.push_back(fmt::format("missing '{}.{}'", names_[i], key));
    }
    if (s.count("step")) {
      const double value = s.at("step").item<double>();
      if (!(value >= 0.0) || value != std::floor(value)) {
        errors.push_back(fmt::format("'{}.step' must be a non-negative whole number, got {}", names_[i], value));
      } else {
        steps.emplace(static_cast<int64_t>(value), names_[i]);
      }
    }
  }
  if (!with_state.empty() && !without_state.empty()) {
    errors.push_back(
        fmt::format("{} parameter(s) have optimizer state and {} have none (e.g. '{}'); ZeRO steps every "
                    "parameter together",
                    with_state.size(), without_state.size(), without_state.front()));
  }
  if (steps.size() > 1) {
    std::vector<std::string> seen;
    for (const auto& [step, name] : steps) seen.push_back(fmt::format("{} for '{}'", step, name));
    errors.push_back(
        fmt::format("parameters have different step counts ({}); ZeRO keeps one for all", fmt::join(seen, ", ")));
  }

  const auto scalars =
      detail::parse_optimizer_scalars(state.scalars, optimizer_->param_groups().size(), scaler_.get(), errors);
  if (!errors.empty()) {
    throw std::invalid_argument(
        fmt::format("ZeroOptimizer::load_full_state: the optimizer state does not fit this optimizer ({} problem(s)): "
                    "{}. Was it saved from the same model and an Adam-like optimizer?",
                    errors.size(), fmt::join(errors, "; ")));
  }

  // 2. Nothing can fail any more.
  torch::NoGradGuard no_grad;
  const int rank = group_->rank();
  if (with_state.empty()) {
    adam_->exp_avg().zero_();
    adam_->exp_avg_sq().zero_();
    adam_->set_step_count(0);
  } else {
    std::vector<torch::Tensor> exp_avg, exp_avg_sq;
    for (auto& s : param_states) {
      exp_avg.push_back(s.at("exp_avg"));
      exp_avg_sq.push_back(s.at("exp_avg_sq"));
    }
    auto m = adam_->exp_avg();
    auto v = adam_->exp_avg_sq();
    layout_->copy_to_shard(rank, exp_avg, m);
    layout_->copy_to_shard(rank, exp_avg_sq, v);
    adam_->set_step_count(steps.begin()->first);
  }
  if (policy_.uses_master_weights() && !master_values.empty()) {
    load_masters(master_values);
    // Parameters outside the optimizer have no fp32 master here: their working weights take the values.
    for (std::size_t i = 0; i < model_names_.size(); ++i) {
      if (!optimized.count(model_names_[i])) model_params_[i].copy_(master_values.at(model_names_[i]));
    }
  }
  detail::apply_optimizer_scalars(scalars, *optimizer_, scaler_.get());
}

}  // namespace colo
