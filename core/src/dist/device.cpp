#include <colo/compat/torch_compat.h>
#include <colo/dist/device.h>
#include <colo/dist/environment.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo::dist {

c10::Device select_device(const Environment& env) {
  if (!torch::cuda::is_available()) return c10::Device(c10::kCPU);
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (env.local_rank >= gpus) {
    throw std::invalid_argument(fmt::format(
        "local rank {} needs a GPU of its own but this node has {} GPU(s); start at most {} ranks per node",
        env.local_rank, gpus, gpus));
  }
  compat::set_current_cuda_device(env.local_rank);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
}

}  // namespace colo::dist
