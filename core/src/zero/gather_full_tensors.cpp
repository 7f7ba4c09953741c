#include <colo/dist/process_group.h>
#include <colo/zero/gather_full_tensors.h>
#include <colo/zero/shard_layout.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace colo::zero {

std::vector<torch::Tensor> gather_full_tensors(const ShardLayout& layout, dist::ProcessGroup& group,
                                               const torch::Tensor& shard) {
  if (group.size() != layout.world_size()) {
    throw std::invalid_argument(
        fmt::format("gather_full_tensors: the group has {} ranks, the layout {}", group.size(), layout.world_size()));
  }
  torch::NoGradGuard no_grad;
  if (group.size() == 1) return layout.unshard(shard.clone());
  auto source = group.communicable(shard.contiguous());
  auto gathered = torch::empty({group.size() * source.numel()}, source.options());
  group.all_gather(gathered, source).wait();
  auto full = layout.unshard(gathered);
  if (full.empty() || full.front().device() == shard.device()) return full;
  for (auto& t : full) t = t.to(shard.device());
  return full;
}

}  // namespace colo::zero
