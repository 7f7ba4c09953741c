#include <colo/compat/torch_compat.h>
#include <colo/dist/backend_choice.h>
#include <colo/dist/device.h>
#include <colo/dist/environment.h>
#include <colo/dist/logger.h>
#include <colo/env/elastic.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace colo::dist {
namespace {

// colo-run --elastic's start-up probe (colo/env/elastic.h): a GPU that cannot hold and compute
// one number is left out of the job. This rank says so in a cannot-start note and exits before
// the rendezvous; colo-run starts the job again without this slot.
void probe_or_leave_the_job(const Environment& env, const c10::Device& device) {
  std::string failure;
  try {
    auto one = torch::ones({1}, torch::TensorOptions().device(device));
    if ((one + one).item<float>() != 2.0f) failure = "1 + 1 was not 2";
  } catch (const std::exception& e) {
    failure = e.what();
    failure = failure.substr(0, failure.find('\n'));
  }
  if (failure.empty()) return;
  const std::string reason = fmt::format("GPU {} (local rank {}) failed the start-up probe: {}", device.index(),
                                         env.local_rank, failure);
  std::fprintf(stderr, "colo: rank %d: %s; leaving the job (colo-run --elastic starts it without this GPU)\n",
               env.rank, reason.c_str());
  std::fflush(stderr);
  env::leave_elastic_note(env.run_reports, env::ElasticNote::kCannotStart, env.rank, reason);
  std::_Exit(3);
}

}  // namespace

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
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  if (env::elastic_max_world()) probe_or_leave_the_job(env, device);
  return device;
}

}  // namespace colo::dist
