#pragma once

#include <colo/pipeline/schedule.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace colo::pipeline {

// The step × rank grid of a schedule, like torch.distributed.pipelining's pipeline-order printout:
// one column per rank, row i holding each rank's i-th action. Rows are positions in each rank's
// list, not times (simulate() gives times). `marked` (rank -> position) prints those cells as
// ">>2B5<<", for an error that points at where ranks stopped.
//
//            rank 0  rank 1
//   step 0:  0F0     1F0
//   step 1:  0F1     1B0
std::string format_schedule_grid(const Schedule& schedule, const std::map<int, std::size_t>& marked = {});

// One rank's actions, twelve to a line, each line starting with the position of its first action;
// the action at `marked_index` (if any) printed as ">>2B5<<", and a position past the last action
// as ">>end<<". The runtime prints it when an action fails:
//
//   rank 1 of 2 (stages 1), 8 actions:
//     [0] 1F0 1B0 1F1 >>1B1<< 1F2 1B2 1F3 1B3
std::string format_rank_schedule(const Schedule& schedule, int rank,
                                 std::optional<std::size_t> marked_index = std::nullopt);

}  // namespace colo::pipeline
