#pragma once

#include <torch/cuda.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace colo::bench {

// What the micro-benchmarks run on: the CPU always, plus cuda:0 when this LibTorch has CUDA and
// the machine a GPU. Each file registers its benchmarks once per device at start-up, with the
// device in the name ("attention/sdpa/cuda/...").
inline std::vector<c10::Device> benchmark_devices() {
  std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
  if (torch::cuda::is_available()) devices.emplace_back(c10::kCUDA, 0);
  return devices;
}

inline std::string device_tag(const c10::Device& device) { return device.is_cuda() ? "cuda" : "cpu"; }

// GPU work is asynchronous: every timed iteration ends with a synchronisation, and the
// benchmarks use real (wall) time, so an iteration's time is what the caller waits for.
inline void sync(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void register_attention_benchmarks(const std::vector<c10::Device>& devices);
void register_optimizer_benchmarks(const std::vector<c10::Device>& devices);
void register_collective_benchmarks(const std::vector<c10::Device>& devices);

}  // namespace colo::bench
