#pragma once

#include <colo/pipeline/action.h>
#include <torch/arg.h>

#include <vector>

namespace colo::pipeline {

// What each action of one virtual stage costs (ActionCosts::per_stage).
struct StageCosts {
  double forward = 1.0;
  double backward = 2.0;
  double input_grad = 1.0;
  double weight_grad = 1.0;
};

// How long each action takes, for a rank's whole share of the model: an action on one of
// `chunks` chunks costs 1 / chunks of it, so an interleaved schedule models the same model cut
// finer. simulate() runs a dry run with them; lower() places communication by a run with the
// defaults. The defaults are the usual rule of thumb: a backward costs two forwards, split evenly
// between input and weight gradient.
struct ActionCosts {
  TORCH_ARG(double, forward) = 1.0;
  // B in a schedule that does not split the backward: input and weight gradient.
  TORCH_ARG(double, backward) = 2.0;
  // B in a schedule that splits the backward (zero bubble): the input gradient.
  TORCH_ARG(double, input_grad) = 1.0;
  // W: the weight gradient.
  TORCH_ARG(double, weight_grad) = 1.0;
  // Stages that cost differently (a performance model's measured layers: the first stage also
  // embeds the patches, the last runs the head): one entry per virtual stage, each the cost of
  // that stage's own actions (not divided by chunks). Empty: every stage costs the above.
  TORCH_ARG(std::vector<StageCosts>, per_stage) = {};
};

// What `action` costs in a schedule with `chunks` chunks per rank that does (or does not) split
// the backward.
double cost_of(const Action& action, const ActionCosts& costs, bool split_backward, int chunks);

// Throws std::invalid_argument naming the first cost that is not finite and positive (for
// per_stage, the stage too).
void check_costs(const ActionCosts& costs);

}  // namespace colo::pipeline
