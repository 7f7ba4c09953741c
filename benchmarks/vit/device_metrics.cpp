#include "device_metrics.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <thread>

#ifdef COLO_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace colo::bench {

#ifdef COLO_WITH_CUDA
namespace {
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(fmt::format("{} failed: {}", what, cudaGetErrorString(status)));
}
}  // namespace

// Timing events in the stream order of the step's kernels. Raw runtime events rather than
// LibTorch's wrapper, whose namespace and header moved between LibTorch 2.x releases.
struct StepTimer::CudaEvents {
  std::vector<cudaEvent_t> events;
  ~CudaEvents() {
    for (auto e : events) cudaEventDestroy(e);
  }
  void record() {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreate(&event), "cudaEventCreate");
    events.push_back(event);
    check_cuda(cudaEventRecord(event, c10::cuda::getCurrentCUDAStream().stream()), "cudaEventRecord");
  }
};
#else
struct StepTimer::CudaEvents {};
#endif

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double peak_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
#ifdef COLO_WITH_CUDA
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    // Index 0 is StatType::AGGREGATE (all pools); the enum's namespace moved between 2.x releases.
    return static_cast<double>(stats.allocated_bytes[0].peak);
#endif
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

void reset_peak_memory(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

std::string peak_memory_method(const c10::Device& device) {
  return device.is_cuda() ? "CUDA caching allocator: peak allocated bytes (= torch.cuda.max_memory_allocated)"
                          : "CPU: process max resident set size (getrusage ru_maxrss, includes LibTorch itself)";
}

std::string hardware_name(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp props{};
    check_cuda(cudaGetDeviceProperties(&props, device.index()), "cudaGetDeviceProperties");
    return fmt::format("{} ({} GiB)", props.name, props.totalGlobalMem >> 30);
  }
#endif
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  return fmt::format("{} ({} threads, intra-op threads {})", model, std::thread::hardware_concurrency(),
                     torch::get_num_threads());
}

StepTimer::StepTimer(const c10::Device& device) : device_(device) {
  if (device_.is_cuda()) {
#ifdef COLO_WITH_CUDA
    cuda_ = std::make_unique<CudaEvents>();
#else
    throw std::logic_error("StepTimer: a CUDA device in a build without CUDA");
#endif
  }
}

StepTimer::~StepTimer() = default;

void StepTimer::start() { lap(); }

void StepTimer::lap() {
#ifdef COLO_WITH_CUDA
  if (cuda_) {
    cuda_->record();
    return;
  }
#endif
  cpu_marks_.push_back(std::chrono::steady_clock::now());
}

std::vector<double> StepTimer::step_times_ms() {
  std::vector<double> times;
#ifdef COLO_WITH_CUDA
  if (cuda_) {
    if (!cuda_->events.empty()) check_cuda(cudaEventSynchronize(cuda_->events.back()), "cudaEventSynchronize");
    for (std::size_t i = 1; i < cuda_->events.size(); ++i) {
      float ms = 0.0f;
      check_cuda(cudaEventElapsedTime(&ms, cuda_->events[i - 1], cuda_->events[i]), "cudaEventElapsedTime");
      times.push_back(ms);
    }
    return times;
  }
#endif
  for (std::size_t i = 1; i < cpu_marks_.size(); ++i) {
    times.push_back(std::chrono::duration<double, std::milli>(cpu_marks_[i] - cpu_marks_[i - 1]).count());
  }
  return times;
}

MatmulPeak measure_matmul_peak(const c10::Device& device, c10::ScalarType dtype, int64_t n, double min_seconds) {
  if (n <= 0) throw std::invalid_argument(fmt::format("the peak matmul size must be positive, got {}", n));
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  const auto a = torch::randn({n, n}, options);
  const auto b = torch::randn({n, n}, options);
  auto c = torch::empty({n, n}, options);
  for (int i = 0; i < 3; ++i) at::mm_out(c, a, b);  // clocks up, cuBLAS heuristics cached
  synchronize(device);

  // Batches of products between synchronisations, so that the sync's gap is negligible.
  constexpr int64_t kBatch = 10;
  MatmulPeak peak;
  peak.size = n;
  const auto begin = std::chrono::steady_clock::now();
  do {
    for (int64_t i = 0; i < kBatch; ++i) at::mm_out(c, a, b);
    synchronize(device);
    peak.iterations += kBatch;
    peak.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  } while (peak.seconds < min_seconds);
  const double nd = static_cast<double>(n);
  peak.tflops = 2.0 * nd * nd * nd * static_cast<double>(peak.iterations) / peak.seconds / 1e12;
  return peak;
}

}  // namespace colo::bench
