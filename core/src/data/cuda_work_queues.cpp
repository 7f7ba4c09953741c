// CUDA_DEVICE_MAX_CONNECTIONS for nvJPEG (cuda_work_queues.h says why).
#include <colo/data/cuda_work_queues.h>
#include <colo/data/image_folder.h>
#include <colo/env/variables.h>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>

#ifdef COLO_WITH_NVJPEG
#include <dlfcn.h>
#endif

namespace colo::data {
namespace {

constexpr const char* kConnectionsVariable = "CUDA_DEVICE_MAX_CONNECTIONS";

// Whether the CUDA driver is initialised in this process (cuInit: the first CUDA call of any kind,
// even counting devices), after which CUDA_DEVICE_MAX_CONNECTIONS no longer takes effect. Asked of
// the driver without initialising it: only where libcuda is loaded already, and through a call
// that answers CUDA_ERROR_NOT_INITIALIZED before cuInit.
bool driver_initialised() {
#ifdef COLO_WITH_NVJPEG
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  using DeviceGetCount = int (*)(int*);
  auto* count = reinterpret_cast<DeviceGetCount>(dlsym(driver, "cuDeviceGetCount"));
  int devices = 0;
  const bool initialised = count != nullptr && count(&devices) == 0;  // 0: CUDA_SUCCESS
  dlclose(driver);
  return initialised;
#else
  return false;
#endif
}

}  // namespace

WorkQueuesPlan plan_work_queues(const std::optional<std::string>& variable, bool cuda_initialised) {
  WorkQueuesPlan plan;
  const std::string wanted = fmt::format("{}={}", kConnectionsVariable, kNvjpegWorkQueues);
  const std::string why = "nvJPEG's internal streams then share hardware queues with the training stream and a "
                          "decode waits behind the queued training kernels (up to a step)";
  if (!variable) {
    if (!cuda_initialised) {
      plan.queues = kNvjpegWorkQueues;
      plan.set_variable = true;
      return plan;
    }
    plan.advice = fmt::format("{} is unset ({} queues) and CUDA was initialised in this process before colo could "
                              "set it: {}; set {} before the process starts, or call "
                              "colo::data::widen_work_queues_for_nvjpeg() before its first CUDA call",
                              kConnectionsVariable, kDefaultWorkQueues, why, wanted);
    return plan;
  }
  char* end = nullptr;
  const long value = std::strtol(variable->c_str(), &end, 10);
  if (end == variable->c_str() || *end != '\0' || value < 1) {
    plan.advice = fmt::format("{}='{}' is not a positive number (CUDA then uses {}): {}; set {}", kConnectionsVariable, *variable,
                              kDefaultWorkQueues, why, wanted);
    return plan;
  }
  plan.queues = static_cast<int>(value);
  if (value < kNvjpegWorkQueues) {
    plan.advice = fmt::format("{}={} (set outside colo, kept): {}; set {}", kConnectionsVariable, value, why, wanted);
  }
  return plan;
}

WorkQueuesPlan current_work_queues() {
  if (!nvjpeg_compiled()) return {};
  return plan_work_queues(env::text(kConnectionsVariable), driver_initialised());
}

WorkQueuesPlan widen_work_queues_for_nvjpeg() {
  if (!nvjpeg_compiled()) return {};
  WorkQueuesPlan plan = current_work_queues();
  if (plan.set_variable) {
    // Left unset where CUDA is initialised already (too late to count): current_work_queues() then
    // keeps saying so.
    setenv(kConnectionsVariable, std::to_string(kNvjpegWorkQueues).c_str(), 0);
    plan.set_variable = false;
  }
  return plan;
}

}  // namespace colo::data
