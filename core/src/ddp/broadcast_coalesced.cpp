#include <colo/ddp/broadcast_coalesced.h>
#include <colo/dist/process_group.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>

#include "gloo_staging.h"

namespace colo::ddp {

void broadcast_coalesced(dist::ProcessGroup& group, const std::vector<torch::Tensor>& tensors, int src,
                         int64_t buffer_cap_bytes) {
  if (group.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;

  // Pack per (dtype, device) in order, closing a buffer once it reaches the cap.
  std::vector<std::vector<torch::Tensor>> chunks;
  std::map<std::pair<int, std::string>, std::pair<std::size_t, int64_t>> open;  // -> (chunk, bytes)
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    const std::pair<int, std::string> key{static_cast<int>(t.scalar_type()), t.device().str()};
    auto it = open.find(key);
    if (it == open.end()) {
      chunks.emplace_back();
      it = open.emplace(key, std::make_pair(chunks.size() - 1, int64_t{0})).first;
    }
    chunks[it->second.first].push_back(t);
    it->second.second += t.numel() * static_cast<int64_t>(t.element_size());
    if (it->second.second >= buffer_cap_bytes) open.erase(it);
  }

  // All broadcasts in flight at once, then unpacked.
  std::vector<torch::Tensor> flats;
  std::vector<dist::Work> works;
  for (const auto& chunk : chunks) {
    std::vector<torch::Tensor> flat_views;
    flat_views.reserve(chunk.size());
    for (const auto& t : chunk) flat_views.push_back(t.reshape(-1));
    auto flat = torch::cat(flat_views);
    if (detail::stage_in_fp32(group, flat.scalar_type())) flat = flat.to(torch::kFloat);
    flats.push_back(flat);
    works.push_back(group.broadcast(flats.back(), src));
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    works[c].wait();
    if (group.rank() == src) continue;
    int64_t offset = 0;
    for (auto& t : chunks[c]) {
      t.copy_(flats[c].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace colo::ddp
