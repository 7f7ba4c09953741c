#include <colo/compat/torch_compat.h>
#include <colo/dist/backend_choice.h>
#include <colo/dist/device.h>
#include <colo/dist/environment.h>
#include <colo/dist/logger.h>

#include <fmt/format.h>

#include <atomic>
#include <stdexcept>

namespace colo::dist {

c10::Device select_device(const Environment& env) {
  const BackendChoice choice = backend_choice();  // refuses an unusable COLO_BACKEND first
  if (!torch::cuda::is_available()) return c10::Device(c10::kCPU);
  if (choice.share_first_gpu) {
    static std::atomic<bool> said{false};
    if (env.rank == 0 && !said.exchange(true)) {
      Logger(env.rank, env.world_size)
          .info("COLO_BACKEND=gloo: the {} rank(s) of this node all run on cuda:0, with CUDA tensors over Gloo "
                "(copied through host memory): for testing multi-rank code on one GPU, not for speed",
                env.local_world_size);
    }
    compat::set_current_cuda_device(0);
    return c10::Device(c10::kCUDA, 0);
  }
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (env.local_rank >= gpus) {
    throw std::invalid_argument(fmt::format(
        "local rank {} needs a GPU of its own but this node has {} GPU(s); start at most {} ranks per node (or, to "
        "test multi-rank code on one GPU, set COLO_BACKEND=gloo: every rank then runs on GPU 0 over Gloo)",
        env.local_rank, gpus, gpus));
  }
  compat::set_current_cuda_device(env.local_rank);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
}

}  // namespace colo::dist
