#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

namespace colo::zero {

// What gemini's auto placement reads of a device's memory. A GPU: the CUDA caching allocator's
// counters (the figures torch.cuda.memory_allocated / max_memory_allocated report) and the
// device's total memory. A CPU has no budget of its own here: capacity() is nullopt and the
// counters are 0.
std::optional<int64_t> device_capacity_bytes(const c10::Device& device);
int64_t device_allocated_bytes(const c10::Device& device);
int64_t device_peak_allocated_bytes(const c10::Device& device);
void reset_device_peak(const c10::Device& device);

}  // namespace colo::zero
