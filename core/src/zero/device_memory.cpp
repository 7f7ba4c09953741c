#include <colo/zero/device_memory.h>

#ifdef COLO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

namespace colo::zero {

// Index 0 of the allocator's stat arrays is StatType::AGGREGATE (all pools); the enum's
// namespace moved between LibTorch 2.x releases.

std::optional<int64_t> device_capacity_bytes(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, device.index()) == cudaSuccess) return static_cast<int64_t>(props.totalGlobalMem);
  }
#else
  (void)device;
#endif
  return std::nullopt;
}

int64_t device_allocated_bytes(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
#else
  (void)device;
#endif
  return 0;
}

int64_t device_peak_allocated_bytes(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
#else
  (void)device;
#endif
  return 0;
}

void reset_device_peak(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

}  // namespace colo::zero
