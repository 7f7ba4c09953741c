#include "reduce_over_ranks.h"

#include <colo/trainer/trainer.h>
#include <torch/torch.h>

namespace colo::detail {

std::vector<double> reduce_over_ranks(Trainer& trainer, const std::vector<double>& values, dist::ReduceOp op) {
  auto t = torch::tensor(values, torch::kFloat64).to(trainer.device());
  if (trainer.world() && trainer.world()->size() > 1) trainer.world()->all_reduce(t, op).wait();
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace colo::detail
