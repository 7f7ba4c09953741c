#pragma once

// Reducing a hook's few numbers over the Trainer's world: private to the Trainer's hooks.
#include <colo/dist/process_group.h>

#include <vector>

namespace colo {
class Trainer;
}

namespace colo::detail {

// `values` (fp64) reduced with `op` over the trainer's world, on its device (NCCL reduces only GPU
// tensors); as they are in a job of one. Collective: every rank calls it at the same event.
std::vector<double> reduce_over_ranks(Trainer& trainer, const std::vector<double>& values,
                                      dist::ReduceOp op = dist::ReduceOp::kSum);

}  // namespace colo::detail
