#pragma once

#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin_options.h>

#include <cstdint>

namespace colo::memory_planning {

// Bytes of the whole training state a save writes: the model in its working precision, fp32
// masters where mixed precision keeps them, and the optimizer's fp32 moments.
int64_t async_save_copy_bytes(const PluginOptions& options, const MemoryPlanInputs& in);
// Adds it to `plan` as host memory of rank 0 (the writer of the whole state), with a note.
void add_async_save_copy(MemoryPlan& plan, const PluginOptions& options, const MemoryPlanInputs& in);

}  // namespace colo::memory_planning
