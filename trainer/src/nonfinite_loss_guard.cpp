#include "nonfinite_loss_guard.h"

#include <colo/dist/process_group.h>
#include <fmt/format.h>

#include <utility>

namespace colo::detail {

NonFiniteLossGuard::NonFiniteLossGuard(int64_t limit, c10::Device device, std::string limit_name, std::string advice)
    : limit_(limit),
      limit_name_(std::move(limit_name)),
      advice_(std::move(advice)),
      step_bad_(torch::zeros({}, torch::TensorOptions().dtype(torch::kBool).device(device))),
      runs_(torch::zeros({3}, torch::TensorOptions().dtype(torch::kFloat64).device(device))) {}

void NonFiniteLossGuard::observe(const torch::Tensor& loss) {
  if (limit_ == 0) return;
  step_bad_.logical_or_(torch::isfinite(loss.detach()).logical_not().any());
}

void NonFiniteLossGuard::end_step(int64_t step) {
  if (limit_ == 0) return;
  torch::NoGradGuard no_grad;
  auto current = runs_[0], longest = runs_[1], longest_end = runs_[2];
  current.add_(1).mul_(step_bad_);  // back to 0 after a finite step
  const auto longer = current.gt(longest).to(torch::kFloat64);
  longest_end.add_(longer * (static_cast<double>(step) - longest_end));
  longest.copy_(torch::maximum(longest, current));
  step_bad_.zero_();
}

bool NonFiniteLossGuard::due(int64_t step, int64_t last_step) const {
  return limit_ > 0 && (step % limit_ == 0 || step == last_step);
}

void NonFiniteLossGuard::check(int64_t step, const std::shared_ptr<colo::dist::ProcessGroup>& world,
                               int64_t skipped_steps) const {
  if (limit_ == 0) return;
  // Every rank's [longest run, its last step]: the longest run anywhere decides, alike on all.
  torch::Tensor mine = runs_.slice(0, 1, 3).contiguous();
  torch::Tensor all = mine.unsqueeze(0);
  if (world && world->size() > 1) {
    auto input = world->communicable(mine);
    auto gathered = torch::zeros({world->size() * 2}, input.options());
    world->all_gather(gathered, input).wait();
    all = gathered.view({world->size(), 2});
  }
  all = all.cpu();
  int64_t longest = 0, last = 0;
  for (int64_t r = 0; r < all.size(0); ++r) {
    const auto run = static_cast<int64_t>(all[r][0].item<double>());
    if (run > longest) {
      longest = run;
      last = static_cast<int64_t>(all[r][1].item<double>());
    }
  }
  if (longest < limit_) return;
  throw NonFiniteLossError(fmt::format(
      "stopped at step {}: the training loss was not finite (NaN or infinite) for {} consecutive optimizer steps "
      "(steps {}..{}), so the run diverged or its weights hold NaNs. {}; {} {} is the limit (0: never stop){}",
      step, longest, last - longest + 1, last, advice_, limit_name_, limit_,
      skipped_steps > 0 ? fmt::format(". The fp16 loss scaler also skipped {} step{} for overflowing gradients, "
                                      "which is not an error",
                                      skipped_steps, skipped_steps == 1 ? "" : "s")
                        : ""));
}

}  // namespace colo::detail
