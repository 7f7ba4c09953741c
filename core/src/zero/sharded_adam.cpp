#include <colo/compat/torch_compat.h>
#include <colo/optim/adam_step_cpu.h>
#include <colo/optim/adam_step_multi_tensor.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/zero/allocate.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace colo::zero {

ShardedAdam::ShardedAdam(std::shared_ptr<const ShardLayout> layout, int rank,
                         const std::vector<std::size_t>& group_of_param, torch::TensorOptions options,
                         Moments moments)
    : layout_(std::move(layout)), rank_(rank) {
  if (!layout_) throw std::invalid_argument("ShardedAdam: the layout is null");
  if (group_of_param.size() != layout_->num_params()) {
    throw std::invalid_argument(
        fmt::format("ShardedAdam: {} group indices for {} parameters", group_of_param.size(), layout_->num_params()));
  }
  for (auto g : group_of_param) num_groups_ = std::max(num_groups_, g + 1);

  // Runs: consecutive pieces of one group; each run reaches up to the next, so that padding
  // (zero weight, zero gradient, hence zero update) is covered too.
  for (const auto& piece : layout_->pieces(rank_)) {
    const auto group = group_of_param[piece.param];
    if (!runs_.empty() && runs_.back().group == group) {
      runs_.back().numel = piece.shard_offset + piece.numel - runs_.back().offset;
    } else {
      const int64_t start = runs_.empty() ? 0 : runs_.back().offset + runs_.back().numel;
      runs_.push_back({start, piece.shard_offset + piece.numel - start, group});
    }
  }
  const int64_t shard = layout_->shard_numel();
  if (runs_.empty() && shard > 0) runs_.push_back({0, shard, 0});
  if (!runs_.empty()) runs_.back().numel = shard - runs_.back().offset;

  options_ = options.dtype(torch::kFloat);
  // Four allocations of the shard's size; a refusal names which and what would help.
  master_ = allocate(shard, options_, "the fp32 master weights of this rank's ZeRO shard", hint()).zero_();
  grad_ = allocate(shard, options_, "the fp32 gradient shard of this rank's ZeRO shard", hint()).zero_();
  if (moments == Moments::kNow) allocate_moments();
}

std::string ShardedAdam::hint() const {
  return options_.device().is_cuda()
             ? "Use more data-parallel ranks, cpu_offload=true (low_level_zero), or gemini with offload_optim_frac / "
               "placement_policy=auto"
             : "Use more data-parallel ranks or a machine with more host memory";
}

void ShardedAdam::allocate_moments() {
  if (exp_avg_.defined()) return;
  const int64_t shard = layout_->shard_numel();
  exp_avg_ = allocate(shard, options_, "Adam's first moment (exp_avg) of this rank's ZeRO shard", hint()).zero_();
  exp_avg_sq_ = allocate(shard, options_, "Adam's second moment (exp_avg_sq) of this rank's ZeRO shard", hint()).zero_();
}

int64_t ShardedAdam::held_bytes() const {
  int64_t bytes = 0;
  for (const auto* t : {&master_, &grad_, &exp_avg_, &exp_avg_sq_}) {
    if (t->defined()) bytes += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return bytes;
}

void ShardedAdam::set_step_count(int64_t steps) {
  if (steps < 0) throw std::invalid_argument(fmt::format("ShardedAdam: a step count cannot be negative ({})", steps));
  step_count_ = steps;
}

void ShardedAdam::step(const std::vector<optim::HybridAdamOptions>& groups) {
  if (groups.size() < num_groups_) {
    throw std::invalid_argument(fmt::format("ShardedAdam::step: hyper-parameters for {} groups, the optimizer has {}",
                                            groups.size(), num_groups_));
  }
  allocate_moments();
  torch::NoGradGuard no_grad;
  const int64_t step = ++step_count_;
  const bool on_cpu = master_.device().is_cpu();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& o = groups[g];
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    for (const auto& run : runs_) {
      if (run.group != g || run.numel == 0) continue;
      params.push_back(master_.narrow(0, run.offset, run.numel));
      grads.push_back(grad_.narrow(0, run.offset, run.numel));
      exp_avgs.push_back(exp_avg_.narrow(0, run.offset, run.numel));
      exp_avg_sqs.push_back(exp_avg_sq_.narrow(0, run.offset, run.numel));
    }
    if (params.empty()) continue;
    if (on_cpu) {
      for (std::size_t k = 0; k < params.size(); ++k) {
        optim::adam_step_cpu(params[k], grads[k], exp_avgs[k], exp_avg_sqs[k], step, o);
      }
      continue;
    }
    const auto [beta1, beta2] = o.betas();
    const bool fused =
        o.bias_correction() && compat::fused_adam_step(params, grads, exp_avgs, exp_avg_sqs, step, o.lr(), beta1, beta2,
                                                       o.weight_decay(), o.eps(), o.adamw_mode());
    if (!fused) optim::adam_step_multi_tensor(params, grads, exp_avgs, exp_avg_sqs, step, o);
  }
}

}  // namespace colo::zero
