#pragma once

// Autograd functions keep non-tensor arguments in ctx->saved_data, which holds IValues: the
// process group travels there as its address (the group outlives the graph: see tp_mappings.h).
#include <colo/dist/process_group.h>
#include <torch/torch.h>

#include <cstdint>

namespace colo::shardformer {

inline int64_t handle_of(dist::ProcessGroup& group) { return reinterpret_cast<int64_t>(&group); }
inline dist::ProcessGroup* from_handle(int64_t handle) { return reinterpret_cast<dist::ProcessGroup*>(handle); }
inline dist::ProcessGroup& group_of(torch::autograd::AutogradContext* ctx) {
  return *from_handle(ctx->saved_data["group"].toInt());
}

}  // namespace colo::shardformer
