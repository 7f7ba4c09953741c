#include "layout_checks.h"

#include <colo/engine/parallelize.h>
#include <fmt/format.h>

#include <stdexcept>

namespace train_vit {

int64_t check_layout(const TrainOptions& o, int64_t dp_size, bool pipelined) {
  if (pipelined && o.grad_accum > 1) {
    throw UsageError(
        fmt::format("--grad-accum {}: plugin {} runs a pipeline, which splits every batch into "
                    "micro-batches itself; drop --grad-accum and set the plugin's micro-batch option",
                    o.grad_accum, o.plugin));
  }
  try {
    return colo::per_rank_batch(o.batch_size, dp_size, o.grad_accum);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--batch-size {}: {}", o.batch_size, e.what()));
  }
}

}  // namespace train_vit
