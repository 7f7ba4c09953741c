#pragma once

#include <colo/booster/booster.h>

#include <cstdint>
#include <memory>

namespace colo::data {
class DataLoader;
}
namespace colo::dist {
class ProcessGroup;
}

namespace train_vit {

struct EvalResult {
  double top1 = 0.0;   // fraction of test images classified correctly
  double loss = 0.0;   // mean cross-entropy
  int64_t images = 0;  // test images counted (each once)
  double seconds = 0.0;
};

// Test accuracy over a loader sharded over the data-parallel ranks (the loader's
// num_replicas / rank), counts summed over `world` (null: a job of one). The samples the
// sampler repeats to even out the shards are left out, so every test image counts exactly once.
// Under a pipeline the batches run through booster.execute_pipeline (forward only) and only the
// last stage, which has the outputs, counts. Ranks that see the same shard (tensor-parallel
// peers) count it alike, which scales correct and total counts by the same factor and leaves the
// ratios exact. Collective: every rank calls it.
EvalResult evaluate(colo::Booster& booster, const colo::Boosted& boosted, colo::data::DataLoader& loader,
                    const std::shared_ptr<colo::dist::ProcessGroup>& world);

}  // namespace train_vit
