#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colo::bench {

// What the benchmarks measure about the device they run on. CUDA specifics live in the .cpp,
// behind COLO_WITH_CUDA, so the CPU build compiles the same interface.

// Waits until every kernel queued on the device has finished (a no-op on the CPU).
void synchronize(const c10::Device& device);

// GPU: peak bytes allocated by the CUDA caching allocator since start (or the last reset), the
// figure torch.cuda.max_memory_allocated() reports. CPU: the process's maximum resident set size
// (getrusage), which also counts LibTorch itself and cannot be reset.
double peak_memory_bytes(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);
// How peak_memory_bytes was measured, for the JSON record.
std::string peak_memory_method(const c10::Device& device);

// "NVIDIA H200" or the CPU's model name and thread count.
std::string hardware_name(const c10::Device& device);

// Durations of consecutive steps without synchronising between them: CUDA events recorded on
// the current stream on a GPU, a steady clock on the CPU. lap() marks the end of a step;
// step_times_ms() synchronises once and returns one duration per lap.
class StepTimer {
 public:
  explicit StepTimer(const c10::Device& device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void start();
  void lap();
  std::vector<double> step_times_ms();

 private:
  struct CudaEvents;
  c10::Device device_;
  std::vector<std::chrono::steady_clock::time_point> cpu_marks_;
  std::unique_ptr<CudaEvents> cuda_;
};

// Dense matrix-product throughput of this device: n×n by n×n products in `dtype` (the run's
// precision; fp32 products may use TF32 where the caller allowed it), repeated for at least
// `min_seconds` after a warm-up, timed with device synchronisation. This is the "peak" that MFU
// divides by: what the device's matrix units actually sustain here, not a datasheet figure.
struct MatmulPeak {
  double tflops = 0.0;
  int64_t size = 0;
  int64_t iterations = 0;
  double seconds = 0.0;
};
MatmulPeak measure_matmul_peak(const c10::Device& device, c10::ScalarType dtype, int64_t n, double min_seconds);

}  // namespace colo::bench
