#include "host_staging.h"

#include <torch/torch.h>

namespace colo::dist {
namespace {

torch::Tensor host_buffer_like(const torch::Tensor& tensor) {
  return torch::empty(tensor.sizes(),
                      torch::TensorOptions().dtype(tensor.scalar_type()).pinned_memory(tensor.is_cuda()));
}

// dst.copy_(src), waited for: a copy from or to a CUDA tensor goes on the current stream, after
// the work queued there, and returns once it is done (non_blocking = false).
void copy_and_wait(const torch::Tensor& dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  dst.copy_(src, /*non_blocking=*/false);
}

}  // namespace

torch::Tensor HostStaging::outgoing(const torch::Tensor& tensor) {
  if (!needed_for(tensor)) return tensor;
  auto host = host_buffer_like(tensor);
  copy_and_wait(host, tensor);
  return host;
}

torch::Tensor HostStaging::incoming(const torch::Tensor& tensor) {
  if (!needed_for(tensor)) return tensor;
  auto host = host_buffer_like(tensor);
  arrivals_.emplace_back(tensor, host);
  return host;
}

void HostStaging::finish() const {
  for (const auto& [destination, host] : arrivals_) copy_and_wait(destination, host);
}

std::function<void()> HostStaging::completion() const {
  if (arrivals_.empty()) return {};
  return [staging = *this] { staging.finish(); };
}

}  // namespace colo::dist
