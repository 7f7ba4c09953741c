#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::ddp {

// Overwrites `tensors` on every rank of `group` with their values on group rank `src`: what
// data parallelism does to parameters and buffers before training, so that every replica
// starts from rank 0's initialisation. Tensors are packed per dtype and device into flat
// buffers of at most `buffer_cap_bytes` (one larger tensor gets a buffer of its own), so a
// model costs a handful of broadcasts rather than one per tensor. Every rank passes tensors of
// the same shapes, dtypes and order. Runs without autograd recording.
void broadcast_coalesced(dist::ProcessGroup& group, const std::vector<torch::Tensor>& tensors, int src = 0,
                         int64_t buffer_cap_bytes = int64_t{256} << 20);

}  // namespace colo::ddp
