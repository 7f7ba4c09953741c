#pragma once

#include <colo/dist/environment.h>

#include <cstdint>
#include <string>
#include <vector>

#include "train_options.h"

// train_vit under colo-run --elastic MIN:MAX (colo/env/elastic.h; docs/failures.md): the run is
// planned for the largest world, and on fewer ranks it keeps that plan's global batch by
// accumulating more, so that its training math is the same up to summation order. A world it
// cannot use (the pipeline and tensor parallelism do not divide it, or the batch does not split
// over its data-parallel ranks) is refused with a note that sends colo-run to a smaller one.
namespace train_vit {

// Where a shrunk world cannot run the planned layout: main() leaves colo-run the note, then
// exits as for any usage error.
class WorldSizeUnusable : public UsageError {
 public:
  using UsageError::UsageError;
};

struct ElasticRun {
  int planned_world = 1;  // COLO_ELASTIC_MAX_WORLD, else this world's size
  int world = 1;
  bool shrunk() const { return world < planned_world; }
};

// Throws UsageError for a COLO_ELASTIC_MAX_WORLD that is bad or smaller than the world.
ElasticRun elastic_run(const colo::dist::Environment& env);

// The error for a layout this world cannot run: a WorldSizeUnusable in a shrunk world (a smaller
// one may do), a plain UsageError otherwise.
[[noreturn]] void throw_layout_error(const ElasticRun& elastic, const std::string& message);

// The gradient accumulation this run takes: the planned one (options.grad_accum) in the planned
// world; in a shrunk one the least that keeps the global batch without a larger micro-batch than
// planned (colo::accumulation_keeping_global_batch), said in `notes`. `dp_size`: this world's
// data-parallel ranks; `pipelined`: the plugin splits batches into micro-batches itself (its
// accumulation stays 1, the batch per rank grows). Throws WorldSizeUnusable where none keeps it.
int64_t elastic_grad_accum(const TrainOptions& options, const ElasticRun& elastic, int64_t dp_size, bool pipelined,
                           std::vector<std::string>& notes);

}  // namespace train_vit
