// CUDA_DEVICE_MAX_CONNECTIONS for nvJPEG (cuda_work_queues.h says why).
#include <colo/data/cuda_work_queues.h>
#include <colo/data/image_folder.h>
#include <colo/env/variables.h>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>

#ifdef COLO_WITH_NVJPEG
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace colo::data {
namespace {

constexpr const char* kVariable = "CUDA_DEVICE_MAX_CONNECTIONS";

// Whether this process has a CUDA context on any device (then the variable no longer matters).
bool cuda_context_exists() {
#ifdef COLO_WITH_NVJPEG
  const auto devices = c10::cuda::device_count();
  for (c10::DeviceIndex d = 0; d < devices; ++d) {
    if (c10::cuda::hasPrimaryContext(d)) return true;
  }
#endif
  return false;
}

}  // namespace

WorkQueuesPlan plan_work_queues(const std::optional<std::string>& variable, bool context_exists) {
  WorkQueuesPlan plan;
  const std::string wanted = fmt::format("{}={}", kVariable, kNvjpegWorkQueues);
  const std::string why = "nvJPEG's internal streams then share hardware queues with the training stream and a "
                          "decode waits behind the queued training kernels (up to a step)";
  if (!variable) {
    if (!context_exists) {
      plan.queues = kNvjpegWorkQueues;
      plan.set_variable = true;
      return plan;
    }
    plan.advice = fmt::format("{} is unset ({} queues) and this process's CUDA context exists already: {}; set {} "
                              "before the process starts, or call colo::data::widen_work_queues_for_nvjpeg() "
                              "before its first CUDA work",
                              kVariable, kDefaultWorkQueues, why, wanted);
    return plan;
  }
  char* end = nullptr;
  const long value = std::strtol(variable->c_str(), &end, 10);
  if (end == variable->c_str() || *end != '\0' || value < 1) {
    plan.advice = fmt::format("{}='{}' is not a positive number (CUDA then uses {}): {}; set {}", kVariable, *variable,
                              kDefaultWorkQueues, why, wanted);
    return plan;
  }
  plan.queues = static_cast<int>(value);
  if (value < kNvjpegWorkQueues) {
    plan.advice = fmt::format("{}={} (set outside colo, kept): {}; set {}", kVariable, value, why, wanted);
  }
  return plan;
}

WorkQueuesPlan current_work_queues() {
  if (!nvjpeg_compiled()) return {};
  return plan_work_queues(env::text(kVariable), cuda_context_exists());
}

WorkQueuesPlan widen_work_queues_for_nvjpeg() {
  if (!nvjpeg_compiled()) return {};
  WorkQueuesPlan plan = current_work_queues();
  if (plan.set_variable) {
    setenv(kVariable, std::to_string(kNvjpegWorkQueues).c_str(), 0);
    plan.set_variable = false;
  }
  return plan;
}

}  // namespace colo::data
