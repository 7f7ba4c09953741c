#pragma once

#include <torch/types.h>

#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::zero {

class ShardLayout;

// Every parameter's full tensor from every rank's `shard` of it (master weights or optimizer
// state, for checkpoints): one all-gather of the shards over `group` (the layout's ranks), then
// ShardLayout::unshard. Collective: every rank of the group calls it. Returns one flat tensor per
// parameter of the layout, of shard's dtype, on shard's device (a CPU shard travels through the
// GPU where the group runs on NCCL).
std::vector<torch::Tensor> gather_full_tensors(const ShardLayout& layout, dist::ProcessGroup& group,
                                               const torch::Tensor& shard);

}  // namespace colo::zero
