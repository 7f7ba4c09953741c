// A linear layer's bias gradient by colo's column-sum kernel (core/src/kernels/column_sum.cu,
// through colo::nn's bias_gradient): against fp64 sums and cuBLAS's product with a ones vector (the
// path it replaces), at the shapes of timm's ViT-Ti/B/L linears and at the kernel's edges (fewer
// rows than warps, a tile's last columns, more rows than chunks can split evenly); twice on the same
// input gives the same bits (CUDA graphs' replays must match eager steps); what the kernel does not
// take falls back and gives cuBLAS's answer; linear's backward takes it. Every tensor is random.
// Timing beside cuBLAS at the ViT shapes, bounded: the kernel exists to be faster. Then
// linear_gelu (the MLP's fc1 and GELU, whose GELU backward sums fc1's bias gradient): against
// gelu(linear(...)) step by step, eagerly and under a zero-bubble deferral, and its timing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/gelu.h>
#include <colo/nn/linear.h>

#include "../../core/src/nn/bias_gradient.h"

namespace bias_gradient_test {
namespace {

using colo::nn::detail::bias_gradient;
using colo::nn::detail::bias_gradient_uses_colo_kernel;

double max_rel(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kCPU, torch::kDouble);
  const auto e = expected.to(torch::kCPU, torch::kDouble);
  return ((a - e).abs().max() / e.abs().max().clamp_min(1e-30)).item<double>();
}

// fp32 sums rounded once to the dtype: within a few of its roundings of the largest sum.
double tolerance(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? 8e-3 : dtype == torch::kHalf ? 1e-3 : 2e-5;
}

double median_us(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> times;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 21; ++i) {
    cudaEventRecord(start, c10::cuda::getCurrentCUDAStream());
    fn();
    cudaEventRecord(stop, c10::cuda::getCurrentCUDAStream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1000.f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

torch::Tensor ones_product(const torch::Tensor& rows) {
  return at::mv(rows.t(), torch::ones({rows.size(0)}, rows.options()));
}

class BiasGradient : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(torch::cuda::is_available()) << "this test needs a CUDA device"; }
};

TEST_F(BiasGradient, MatchesFp64AndCublasAndRepeatsBitForBit) {
  torch::manual_seed(41);
  // ViT-B/16 at batch 32 (qkv, proj/fc2, fc1), ViT-Ti/16 at batch 256 (qkv, proj/fc2, fc1), ViT-L's
  // fc1 at batch 4; then 1, 7 and 33 rows (fewer than a block's warps, a remainder past the rows
  // in flight), 264 columns (a tile's last lanes idle), 8 columns and 200000 rows (chunks of
  // uneven length).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {6304, 2304}, {6304, 768}, {6304, 3072}, {50432, 576}, {50432, 192}, {50432, 768},
      {788, 4096},  {1, 16},     {7, 24},      {33, 264},    {200000, 8}};
  for (const auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    for (const auto& [n, cols] : shapes) {
      SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(cols) + " " + c10::toString(dtype));
      // An offset, so that no column's sum is near zero and the relative error means something;
      // scaled in fp16 so that 200000 rows' sums stay inside its range (65504).
      const double scale = dtype == torch::kHalf ? 0.1 : 1.0;
      const auto rows =
          ((torch::randn({n, cols}) + 0.5) * scale).to(torch::TensorOptions().device(torch::kCUDA).dtype(dtype));
      ASSERT_TRUE(bias_gradient_uses_colo_kernel(rows));
      const auto ours = bias_gradient(rows);
      ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{cols}));
      ASSERT_EQ(ours.scalar_type(), dtype);
      EXPECT_LT(max_rel(ours, rows.to(torch::kDouble).sum(0)), tolerance(dtype));
      EXPECT_LT(max_rel(ours, ones_product(rows)), 2 * tolerance(dtype));
      EXPECT_TRUE(torch::equal(ours, bias_gradient(rows)));
    }
  }
}

TEST_F(BiasGradient, WhatTheKernelDoesNotTakeFallsBackToCublas) {
  torch::manual_seed(42);
  const auto bf16 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto check = [](const torch::Tensor& rows, const char* what) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(bias_gradient_uses_colo_kernel(rows));
    EXPECT_TRUE(torch::equal(bias_gradient(rows), ones_product(rows)));
  };
  check(torch::randn({64, 12}, bf16), "12 columns (not a multiple of 8)");
  check(torch::randn({16, 64}, bf16).t(), "a transposed gradient");
  check(torch::randn({64 * 16 + 1}, bf16).narrow(0, 1, 64 * 16).view({64, 16}), "a misaligned gradient");
  check(torch::randn({64, 16}, bf16.dtype(torch::kFloat64)), "fp64");
  EXPECT_FALSE(bias_gradient_uses_colo_kernel(torch::randn({64, 16})));
  EXPECT_FALSE(bias_gradient_uses_colo_kernel(torch::randn({0, 16}, bf16)));
}

TEST_F(BiasGradient, LinearBackwardTakesIt) {
  torch::manual_seed(43);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x = torch::randn({4, 197, 768}).to(options).requires_grad_();
  const auto w = (0.05 * torch::randn({3072, 768})).to(options).requires_grad_();
  const auto b = torch::randn({3072}).to(options).requires_grad_();
  const auto g = (torch::randn({4, 197, 3072}) + 0.5).to(options);
  colo::nn::linear(x, w, b).backward(g);
  EXPECT_TRUE(torch::equal(b.grad(), bias_gradient(g.reshape({-1, 3072}))));
  EXPECT_LT(max_rel(b.grad(), g.to(torch::kDouble).reshape({-1, 3072}).sum(0)), tolerance(torch::kBFloat16));
}

TEST_F(BiasGradient, TimeBesideCublas) {
  torch::manual_seed(44);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  double ours_total = 0, cublas_total = 0;
  for (const auto& [n, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {6304, 2304}, {6304, 768}, {6304, 3072}, {50432, 576}, {50432, 192}, {50432, 768}}) {
    const auto rows = torch::randn({n, cols}, options);
    const auto ones = torch::ones({n}, options);
    const double ours = median_us([&] { bias_gradient(rows); });
    const double cublas = median_us([&] { at::mv(rows.t(), ones); });
    std::printf("bias gradient %ldx%ld: colo %.1f us, cuBLAS mv %.1f us (%.3f), %.0f GB/s\n", static_cast<long>(n),
                static_cast<long>(cols), ours, cublas, ours / cublas, static_cast<double>(n * cols * 2) / ours / 1e3);
    ours_total += ours;
    cublas_total += cublas;
  }
  std::printf("bias gradient, all shapes: colo %.1f us, cuBLAS mv %.1f us (%.3f)\n", ours_total, cublas_total,
              ours_total / cublas_total);
  EXPECT_LT(ours_total, 0.9 * cublas_total);
}

struct LinearGeluCase {
  std::vector<int64_t> input;  // [batch, tokens, in]
  int64_t out;
};

// x, w, b, and the output gradient, random; the same draws for the fused and unfused runs.
struct LinearGeluRun {
  torch::Tensor y, x_grad, w_grad, b_grad;
};

LinearGeluRun run_linear_gelu(bool fused, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                              const torch::Tensor& g, bool defer) {
  auto x = x0.clone().requires_grad_();
  auto w = w0.clone().requires_grad_();
  auto b = b0.clone().requires_grad_();
  auto y = fused ? colo::nn::linear_gelu(x, w, b) : colo::nn::gelu(colo::nn::linear(x, w, b));
  if (defer) {
    colo::nn::DeferredWeightGrads store;
    {
      colo::nn::WeightGradDeferral deferral(store);
      y.backward(g);
    }
    EXPECT_FALSE(w.grad().defined());
    store.run();
  } else {
    y.backward(g);
  }
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

TEST_F(BiasGradient, LinearGeluMatchesTheUnfusedStepsEagerAndDeferred) {
  torch::manual_seed(45);
  // ViT-Ti/16's and ViT-B/16's fc1, and 7 rows (fewer than a block's warps).
  const std::vector<LinearGeluCase> cases = {{{8, 197, 192}, 768}, {{2, 197, 768}, 3072}, {{1, 7, 64}, 256}};
  for (const auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    for (const auto& c : cases) {
      for (const bool defer : {false, true}) {
        SCOPED_TRACE(std::to_string(c.input[1]) + "x" + std::to_string(c.input[2]) + "->" + std::to_string(c.out) +
                     " " + c10::toString(dtype) + (defer ? " deferred" : ""));
        const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
        const int64_t in = c.input[2];
        const auto x = torch::randn(c.input).to(options);
        const auto w = (torch::randn({c.out, in}) / std::sqrt(static_cast<double>(in))).to(options);
        const auto b = (0.1 * torch::randn({c.out})).to(options);
        auto sizes = c.input;
        sizes.back() = c.out;
        const auto g = (torch::randn(sizes) + 0.5).to(options);
        ASSERT_TRUE(colo::nn::linear_gelu_fuses(x, w, b));
        const auto fused = run_linear_gelu(true, x, w, b, g, defer);
        const auto plain = run_linear_gelu(false, x, w, b, g, defer);
        // The forward is the same kernels on the same inputs.
        EXPECT_TRUE(torch::equal(fused.y, plain.y));
        // The GELU backward is ATen's arithmetic in another kernel (the last bit may differ where the
        // compilers contract differently); the products are the same products of nearly the same dx.
        EXPECT_LT(max_rel(fused.x_grad, plain.x_grad), tolerance(dtype));
        EXPECT_LT(max_rel(fused.w_grad, plain.w_grad), tolerance(dtype));
        // The bias gradient against fp64 sums of the unfused step's GELU gradient.
        const auto pre = colo::nn::linear(x, w, b).detach().to(torch::kDouble);
        const auto dpre = at::gelu_backward(g.to(torch::kDouble), pre).reshape({-1, c.out});
        EXPECT_LT(max_rel(fused.b_grad, dpre.sum(0)), 2 * tolerance(dtype));
        EXPECT_LT(max_rel(fused.b_grad, plain.b_grad), 2 * tolerance(dtype));
      }
    }
  }
  // Without a bias, or 12 output features, it is gelu(linear(...)) itself.
  const auto bf16 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  EXPECT_FALSE(colo::nn::linear_gelu_fuses(torch::randn({4, 16}, bf16), torch::randn({16, 16}, bf16), torch::Tensor()));
  EXPECT_FALSE(colo::nn::linear_gelu_fuses(torch::randn({4, 16}, bf16), torch::randn({12, 16}, bf16),
                                           torch::randn({12}, bf16)));
}

TEST_F(BiasGradient, LinearGeluBackwardTimeBesideTheUnfusedSteps) {
  torch::manual_seed(46);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  double fused_total = 0, plain_total = 0;
  for (const auto& c : std::vector<LinearGeluCase>{{{256, 197, 192}, 768}, {{32, 197, 768}, 3072}}) {
    const auto x = torch::randn(c.input, options).requires_grad_();
    const auto w = (0.05 * torch::randn({c.out, c.input[2]}, options)).requires_grad_();
    const auto b = torch::randn({c.out}, options).requires_grad_();
    auto sizes = c.input;
    sizes.back() = c.out;
    const auto g = torch::randn(sizes, options);
    const auto y_fused = colo::nn::linear_gelu(x, w, b);
    const auto y_plain = colo::nn::gelu(colo::nn::linear(x, w, b));
    const double fused = median_us([&] { torch::autograd::grad({y_fused}, {x, w, b}, {g}, /*retain_graph=*/true); });
    const double plain = median_us([&] { torch::autograd::grad({y_plain}, {x, w, b}, {g}, /*retain_graph=*/true); });
    std::printf("linear+gelu backward %ldx%ld->%ld: fused %.1f us, unfused %.1f us (%.3f)\n",
                static_cast<long>(c.input[0] * c.input[1]), static_cast<long>(c.input[2]), static_cast<long>(c.out),
                fused, plain, fused / plain);
    fused_total += fused;
    plain_total += plain;
  }
  EXPECT_LT(fused_total, plain_total);
}

}  // namespace
}  // namespace bias_gradient_test
