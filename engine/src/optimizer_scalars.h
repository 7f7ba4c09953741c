#pragma once

#include <colo/amp/dynamic_loss_scaler.h>

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace colo::detail {

// The scalars of an OptimizerWrapper::FullState (docs/checkpoint_format.md), shared by every
// optimizer wrapper so that their checkpoints load into one another: "lr.<group>" for each of
// the torch optimizer's parameter groups and, with a loss scaler, "loss_scaler.<key>".
std::map<std::string, double> optimizer_scalars(const torch::optim::Optimizer& optimizer,
                                                const amp::DynamicLossScaler* scaler);

struct OptimizerScalars {
  std::vector<double> lrs;                      // per parameter group
  std::map<std::string, double> scaler_state;   // empty: keep the scaler as it is
};
// Checks `scalars` against an optimizer of `num_groups` groups (and `scaler`, if any), appending
// every problem to `errors`; changes nothing.
OptimizerScalars parse_optimizer_scalars(const std::map<std::string, double>& scalars, std::size_t num_groups,
                                         const amp::DynamicLossScaler* scaler, std::vector<std::string>& errors);
// Applies what parse_optimizer_scalars accepted.
void apply_optimizer_scalars(const OptimizerScalars& parsed, torch::optim::Optimizer& optimizer,
                             amp::DynamicLossScaler* scaler);

}  // namespace colo::detail
