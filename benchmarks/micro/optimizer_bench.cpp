// One optimizer step over a single flat parameter (the shape ZeRO hands an optimizer):
//   hybrid_adam   colo::optim::HybridAdam (CPU: adam_step_cpu; CUDA: LibTorch's fused AdamW kernel)
//   torch_adamw   torch::optim::AdamW, the optimizer LibTorch ships to C++ users (per-tensor ops)
//   adam_step_cpu colo's vectorised CPU kernel alone, the ZeRO CPU-offload path, at 1 and all threads
// Counters: elements/s and the bytes that must move (fp32 p, g, m, v read; p, m, v written).
#include "micro_bench.h"

#include <colo/optim/adam_step_cpu.h>
#include <colo/optim/hybrid_adam.h>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <thread>

namespace colo::bench {
namespace {

constexpr double kLr = 1e-3;
constexpr double kWeightDecay = 0.05;
constexpr int64_t kBytesPerElement = 7 * sizeof(float);

void set_counters(benchmark::State& state, int64_t numel) {
  state.SetItemsProcessed(state.iterations() * numel);
  state.SetBytesProcessed(state.iterations() * numel * kBytesPerElement);
}

torch::Tensor flat_parameter(int64_t numel, const c10::Device& device) {
  torch::manual_seed(0);
  auto param = torch::randn({numel}, torch::TensorOptions().device(device)).requires_grad_(true);
  param.mutable_grad() = torch::randn({numel}, torch::TensorOptions().device(device)) * 1e-3;
  return param;
}

template <typename MakeOptimizer>
void run_optimizer(benchmark::State& state, const c10::Device& device, MakeOptimizer make) {
  const int64_t numel = state.range(0);
  auto param = flat_parameter(numel, device);
  auto optimizer = make(param);
  optimizer->step();  // allocates the moments outside the timed loop
  sync(device);
  for (auto _ : state) {
    optimizer->step();
    sync(device);
  }
  set_counters(state, numel);
}

void run_adam_step_cpu(benchmark::State& state) {
  const int64_t numel = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const int previous_threads = torch::get_num_threads();
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  auto param = torch::randn({numel});
  auto grad = torch::randn({numel}) * 1e-3;
  auto exp_avg = torch::zeros({numel});
  auto exp_avg_sq = torch::zeros({numel});
  const auto options = optim::HybridAdamOptions(kLr).weight_decay(kWeightDecay);
  int64_t step = 0;
  for (auto _ : state) optim::adam_step_cpu(param, grad, exp_avg, exp_avg_sq, ++step, options);
  set_counters(state, numel);
  torch::set_num_threads(previous_threads);
}

}  // namespace

void register_optimizer_benchmarks(const std::vector<c10::Device>& devices) {
  for (const auto& device : devices) {
    // 86M: ViT-B/16's parameter count, one replica's whole model.
    const std::vector<int64_t> sizes = device.is_cuda() ? std::vector<int64_t>{1 << 20, 16 << 20, 86'000'000}
                                                        : std::vector<int64_t>{1 << 16, 1 << 20, 8 << 20};
    const auto tag = device_tag(device);
    auto* hybrid = benchmark::RegisterBenchmark(
        fmt::format("optimizer/hybrid_adam/{}", tag).c_str(), [device](benchmark::State& state) {
          run_optimizer(state, device, [](const torch::Tensor& p) {
            return std::make_unique<optim::HybridAdam>(std::vector<torch::Tensor>{p},
                                                       optim::HybridAdamOptions(kLr).weight_decay(kWeightDecay));
          });
        });
    auto* adamw = benchmark::RegisterBenchmark(
        fmt::format("optimizer/torch_adamw/{}", tag).c_str(), [device](benchmark::State& state) {
          run_optimizer(state, device, [](const torch::Tensor& p) {
            return std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{p},
                                                         torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
          });
        });
    for (auto* b : {hybrid, adamw}) {
      for (const auto n : sizes) b->Arg(n);
      b->ArgNames({"numel"})->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
  const int64_t all_threads = std::max(1u, std::thread::hardware_concurrency());
  auto* kernel = benchmark::RegisterBenchmark("optimizer/adam_step_cpu/cpu", run_adam_step_cpu);
  for (const int64_t n : {int64_t{1} << 16, int64_t{1} << 20, int64_t{8} << 20}) {
    kernel->Args({n, 1});
    if (all_threads > 1) kernel->Args({n, all_threads});
  }
  kernel->ArgNames({"numel", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace colo::bench
