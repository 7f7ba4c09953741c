// softmax(q kᵀ / √d) v at ViT shapes (12 heads of 64, 197 tokens = ViT-B/16 at 224²; 577 tokens =
// at 384²): colo::compat::scaled_dot_product_attention (LibTorch's fused kernels from 2.0 on)
// against the plain math path (two matmuls around a softmax, materialising the T×T scores).
// In the CPU build on LibTorch 1.13 both are the math path, so they should tie.
#include "micro_bench.h"

#include <colo/compat/torch_compat.h>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <optional>

namespace colo::bench {
namespace {

using AttentionFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::matmul(torch::matmul(q * scale, k.transpose(-2, -1)).softmax(-1), v);
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return compat::scaled_dot_product_attention(q, k, v, /*dropout_p=*/0.0);
}

constexpr int64_t kHeads = 12;
constexpr int64_t kHeadDim = 64;

void run_attention(benchmark::State& state, const c10::Device& device, const AttentionFn& attention, bool backward) {
  const int64_t batch = state.range(0);
  const int64_t tokens = state.range(1);
  const auto dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  const auto options = torch::TensorOptions().dtype(dtype).device(device).requires_grad(backward);
  torch::manual_seed(0);
  const auto q = torch::randn({batch, kHeads, tokens, kHeadDim}, options);
  const auto k = torch::randn({batch, kHeads, tokens, kHeadDim}, options);
  const auto v = torch::randn({batch, kHeads, tokens, kHeadDim}, options);
  const auto grad = torch::randn({batch, kHeads, tokens, kHeadDim}, options.requires_grad(false));
  std::optional<torch::NoGradGuard> no_grad;
  if (!backward) no_grad.emplace();
  for (auto _ : state) {
    auto out = attention(q, k, v);
    if (backward) out.backward(grad);
    sync(device);
    benchmark::DoNotOptimize(out);
  }
  // QKᵀ and AV: 2 · 2·B·H·T²·d forward; backward counted as twice the forward.
  const double forward_flops = 4.0 * static_cast<double>(batch * kHeads * tokens * tokens * kHeadDim);
  state.counters["FLOP/s"] =
      benchmark::Counter(forward_flops * (backward ? 3.0 : 1.0), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void register_attention_benchmarks(const std::vector<c10::Device>& devices) {
  const std::pair<const char*, AttentionFn> impls[] = {{"sdpa", fused_attention}, {"math", math_attention}};
  for (const auto& device : devices) {
    const std::vector<int64_t> batches = device.is_cuda() ? std::vector<int64_t>{32, 128} : std::vector<int64_t>{1, 4};
    for (const bool backward : {false, true}) {
      for (const auto& [impl_name, fn] : impls) {
        const auto name = fmt::format("attention/{}/{}/{}", impl_name, device_tag(device), backward ? "fwd_bwd" : "fwd");
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [device, fn = fn, backward](benchmark::State& state) {
          run_attention(state, device, fn, backward);
        });
        for (const auto batch : batches) {
          for (const int64_t tokens : {197, 577}) b->Args({batch, tokens});
        }
        b->ArgNames({"batch", "tokens"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace colo::bench
