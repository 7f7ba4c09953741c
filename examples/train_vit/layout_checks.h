#pragma once

#include <cstdint>

#include "train_options.h"

namespace train_vit {

// The checks train_vit makes of a run's layout itself, once the plugin has made its own (boost in
// a run, plan_memory in a dry-run: both split the batch through colo::per_rank_batch, and
// hybrid_parallel cuts microbatches and checks tensor parallelism through one function each).
// A run and --dry-run both call this, so that a dry-run refuses what the run refuses. `dp_size`:
// the plugin's data-parallel ranks; `pipelined`: whether it runs a pipeline. Returns each rank's
// micro-batch; throws UsageError saying which option to change.
int64_t check_layout(const TrainOptions& options, int64_t dp_size, bool pipelined);

}  // namespace train_vit
