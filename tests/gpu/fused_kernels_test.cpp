// colo's row-wise LayerNorm kernels (forward, optionally after the residual add, and the input
// gradient, optionally plus the residual's gradient) and its GELU forward kernel (core/src/kernels),
// through colo::nn::layer_norm, add_layer_norm and gelu: against fp64 references and ATen, over
// the widths of timm's ViTs and the edges of what the kernels take. Shapes they do not take must
// fall back to ATen and give its answers. The timing tests measure the kernels beside ATen's at
// ViT-B/16's shape (medians of 20 runs, same process) and bound the ratio: the kernels exist to be
// faster (LayerNorm) or no slower (GELU). Measured colo/ATen ratios on H200s (2026-11-25, five
// sessions, benchmarks/results/2026-11-25-fused/device_calls.txt): LayerNorm forward 0.44-0.58,
// with the residual add 0.52-0.65, backward 0.40-0.52, with the residual gradient 0.48-0.60; GELU
// forward 0.89-1.07. The bounds leave 0.2-0.35 of the ratio for another card or a noisy neighbour.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <colo/nn/gelu.h>
#include <colo/nn/layer_norm.h>

namespace fused_kernels_test {
namespace {

double max_rel(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kCPU, torch::kDouble);
  const auto e = expected.to(torch::kCPU, torch::kDouble);
  return ((a - e).abs().max() / e.abs().max().clamp_min(1e-30)).item<double>();
}

// Relative to the reference's largest magnitude: a few roundings of the dtype.
double tolerance(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? 1.6e-2 : dtype == torch::kHalf ? 2e-3 : 2e-5;
}

// Median over 20 runs of `fn`, in microseconds, after 3 warm-up runs.
double median_us(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> times;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 20; ++i) {
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

// (x + residual, LayerNorm(x + residual)) and the input gradient for (dy, d_sum), in fp64 from
// the same inputs (the sum rounded to the dtype first, as the kernel and ATen's add round it).
struct Reference {
  torch::Tensor sum, out, d_input;
};

Reference reference(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& w,
                    const torch::Tensor& b, const torch::Tensor& dy, const torch::Tensor& d_sum, double eps) {
  const auto sum = residual.defined() ? (x + residual) : x;  // in the dtype
  auto s = sum.to(torch::kDouble).detach().requires_grad_();
  const auto mean = s.mean(-1, true);
  const auto var = (s - mean).pow(2).mean(-1, true);
  const auto out = (s - mean) / (var + eps).sqrt() * w.to(torch::kDouble) + b.to(torch::kDouble);
  auto d_input = torch::autograd::grad({out}, {s}, {dy.to(torch::kDouble)})[0];
  if (d_sum.defined()) d_input = d_input + d_sum.to(torch::kDouble);
  return {sum, out.detach(), d_input};
}

class FusedKernels : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(torch::cuda::is_available()) << "this test needs a CUDA device"; }
};

struct NormCase {
  std::vector<int64_t> shape;
  torch::ScalarType dtype;
  bool kernel;  // whether the row kernels are expected to run
};

TEST_F(FusedKernels, LayerNormRowsMatchFp64ForwardAndBackward) {
  torch::manual_seed(21);
  const std::vector<NormCase> cases{
      {{256, 197, 768}, torch::kBFloat16, true},  // ViT-B/16 at batch 256
      {{4, 197, 1024}, torch::kBFloat16, true},   // ViT-L
      {{4, 197, 384}, torch::kBFloat16, true},    // ViT-S: 48 vectors, lanes with one or two
      {{4, 197, 768}, torch::kHalf, true},        {{4, 197, 768}, torch::kFloat, true},
      {{3, 1024}, torch::kFloat, true},           // fp32's widest
      {{5, 2048}, torch::kBFloat16, true},        // bf16's widest: 8 vectors per lane
      {{3, 40}, torch::kBFloat16, true},          // 5 vectors: most lanes idle
      {{7, 1}, torch::kFloat, false},             // not a whole vector
      {{2, 4096}, torch::kBFloat16, false},       // wider than a warp holds
      {{3, 2048}, torch::kFloat, false},          {{3, 64}, torch::kDouble, false},
  };
  for (const auto& c : cases) {
    for (const bool with_residual : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(c.shape) + " " + c10::toString(c.dtype) +
                   (with_residual ? " + residual" : ""));
      const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
      const int64_t cols = c.shape.back();
      torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({cols}).eps(1e-6));
      norm->to(torch::kCUDA, c.dtype);
      {
        torch::NoGradGuard no_grad;
        norm->weight.copy_(1 + 0.2 * torch::randn({cols}));
        norm->bias.copy_(0.2 * torch::randn({cols}));
      }
      const auto x = (3 + 2 * torch::randn(c.shape)).to(options);  // an offset mean, as residual streams have
      const auto residual = with_residual ? torch::randn(c.shape).to(options) : torch::Tensor();
      const auto dy = torch::randn(c.shape).to(options);
      const auto d_sum = with_residual ? torch::randn(c.shape).to(options) : torch::Tensor();
      ASSERT_EQ(colo::nn::layer_norm_rows_use_colo_kernel(x, norm->weight, norm->bias), c.kernel);

      auto xi = x.clone().requires_grad_();
      torch::Tensor sum, out;
      if (with_residual) {
        auto ri = residual.clone().requires_grad_();
        std::tie(sum, out) = colo::nn::add_layer_norm(xi, ri, *norm);
        torch::autograd::backward({sum, out}, {d_sum, dy});
        EXPECT_TRUE(torch::equal(ri.grad(), xi.grad()));
      } else {
        out = colo::nn::layer_norm(xi, *norm);
        out.backward(dy);
      }
      const auto ref = reference(x, residual, norm->weight.detach(), norm->bias.detach(), dy, d_sum, 1e-6);
      if (with_residual) {
        EXPECT_TRUE(torch::equal(sum, ref.sum)) << "the sum is the dtype's x + residual";
      }
      EXPECT_LT(max_rel(out, ref.out), tolerance(c.dtype));
      EXPECT_LT(max_rel(xi.grad(), ref.d_input), tolerance(c.dtype));
      ASSERT_TRUE(norm->weight.grad().defined());
      ASSERT_TRUE(norm->bias.grad().defined());
    }
  }
}

// Closer than the fp64 bound: fp32 rows against ATen's fp32 LayerNorm (timm parity runs in fp32).
TEST_F(FusedKernels, LayerNormRowsAgreeWithAtenInFp32) {
  torch::manual_seed(22);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const auto x = torch::randn({8, 197, 768}, options);
  const auto w = 1 + 0.1 * torch::randn({768}, options);
  const auto b = 0.1 * torch::randn({768}, options);
  const auto dy = torch::randn({8, 197, 768}, options);
  auto xi = x.clone().requires_grad_();
  auto xr = x.clone().requires_grad_();
  const auto ours = colo::nn::layer_norm(xi, {768}, w, b, 1e-6);
  const auto aten = at::layer_norm(xr, {768}, w, b, 1e-6);
  EXPECT_LT((ours - aten).abs().max().item<double>(), 2e-6);
  ours.backward(dy);
  aten.backward(dy);
  EXPECT_LT(max_rel(xi.grad(), xr.grad()), 2e-6);
}

TEST_F(FusedKernels, LayerNormRowsFallBackForMisalignedOrStridedInputs) {
  torch::manual_seed(23);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto w = torch::ones({64}, options);
  const auto b = torch::zeros({64}, options);
  const auto base = torch::randn({1 + 6 * 64}, options);
  const auto shifted = base.narrow(0, 1, 6 * 64).view({6, 64});  // 2 bytes past a 16-byte boundary
  EXPECT_FALSE(colo::nn::layer_norm_rows_use_colo_kernel(shifted, w, b));
  EXPECT_TRUE(torch::equal(colo::nn::layer_norm(shifted, {64}, w, b, 1e-6), at::layer_norm(shifted, {64}, w, b, 1e-6)));
  const auto strided = torch::randn({64, 6}, options).t();
  EXPECT_FALSE(colo::nn::layer_norm_rows_use_colo_kernel(strided, w, b));
  EXPECT_TRUE(torch::equal(colo::nn::layer_norm(strided, {64}, w, b, 1e-6), at::layer_norm(strided, {64}, w, b, 1e-6)));
  // Parameters in another dtype than the input (fp32 parameters, bf16 activations): ATen's.
  EXPECT_FALSE(colo::nn::layer_norm_rows_use_colo_kernel(torch::randn({6, 64}, options), w.to(torch::kFloat), b));
  // A wrong normalised shape is ATen's error, not a silent kernel run.
  EXPECT_THROW(colo::nn::layer_norm(torch::randn({6, 64}, options), {32}, torch::ones({32}, options),
                                    torch::zeros({32}, options), 1e-6),
               c10::Error);
}

TEST_F(FusedKernels, LayerNormRowsTimeBesideAten) {
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({768}).eps(1e-6));
  norm->to(torch::kCUDA, torch::kBFloat16);
  const auto x = torch::randn({256 * 197, 768}, options);
  const auto r = torch::randn({256 * 197, 768}, options);
  const auto dy = torch::randn({256 * 197, 768}, options);
  // Backward: the input gradient plus the weight and bias gradients, colo's and ATen's autograd.
  auto xi = x.clone().requires_grad_();
  auto ri = r.clone().requires_grad_();
  const auto out = colo::nn::layer_norm(xi, *norm);
  auto [sum, fused] = colo::nn::add_layer_norm(xi, ri, *norm);
  const auto aten_out = at::layer_norm(xi, {768}, norm->weight, norm->bias, 1e-6);
  const std::vector<torch::Tensor> inputs{xi, norm->weight, norm->bias};
  const double bwd = median_us([&] { torch::autograd::grad({out}, inputs, {dy}, true); });
  const double bwd_add = median_us([&] { torch::autograd::grad({sum, fused}, inputs, {r, dy}, true); });
  const double bwd_aten = median_us([&] { torch::autograd::grad({aten_out}, inputs, {dy}, true); });
  std::printf("TIMING layer_norm backward 50432x768 bf16: colo %.1f us (with the residual gradient %.1f), ATen %.1f "
              "us\n",
              bwd, bwd_add, bwd_aten);
  torch::NoGradGuard no_grad;
  const double ours = median_us([&] { colo::nn::layer_norm(x, *norm); });
  const double aten = median_us([&] { at::layer_norm(x, {768}, norm->weight, norm->bias, 1e-6); });
  const double ours_add = median_us([&] { colo::nn::add_layer_norm(x, r, *norm); });
  const double aten_add = median_us([&] { at::layer_norm(x + r, {768}, norm->weight, norm->bias, 1e-6); });
  std::printf("TIMING layer_norm forward 50432x768 bf16: colo %.1f us, ATen %.1f us; with the residual add: colo %.1f "
              "us, ATen %.1f us\n",
              ours, aten, ours_add, aten_add);
  EXPECT_LT(ours, 0.8 * aten) << "LayerNorm forward: measured 0.44-0.58 of ATen's time";
  EXPECT_LT(ours_add, 0.85 * aten_add) << "add + LayerNorm forward: measured 0.52-0.65 of ATen's time";
  EXPECT_LT(bwd, 0.8 * bwd_aten) << "LayerNorm backward: measured 0.40-0.52 of ATen's time";
  EXPECT_LT(bwd_add, 0.9 * bwd_aten) << "LayerNorm backward with the residual gradient: measured 0.48-0.60 of ATen's";
}

TEST_F(FusedKernels, GeluMatchesAtenForwardAndBackward) {
  torch::manual_seed(24);
  // Sizes with and without a tail past the last 16-byte vector; ViT-B's MLP at batch 16.
  for (const auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    for (const int64_t n : {int64_t{16} * 197 * 3072, int64_t{1000003}, int64_t{5}, int64_t{8}}) {
      SCOPED_TRACE(std::to_string(n) + " " + c10::toString(dtype));
      const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      const auto x = (3 * torch::randn({n})).to(options);
      const auto g = torch::randn({n}).to(options);
      ASSERT_TRUE(colo::nn::gelu_uses_colo_kernel(x));
      auto xi = x.clone().requires_grad_();
      auto xr = x.clone().requires_grad_();
      const auto ours = colo::nn::gelu(xi);
      const auto aten = torch::gelu(xr);
      ours.backward(g);
      aten.backward(g);
      // The forward is ATen's fp32 arithmetic (equal up to erff's last bit); the backward is ATen's.
      EXPECT_LT(max_rel(ours, aten), dtype == torch::kFloat ? 1e-6 : 8e-3);
      EXPECT_TRUE(torch::equal(xi.grad(), xr.grad()));
      // And against fp64.
      const auto x64 = x.to(torch::kDouble);
      const auto ref = x64 * 0.5 * (1 + torch::erf(x64 / std::sqrt(2.0)));
      EXPECT_LT(max_rel(ours, ref), tolerance(dtype));
    }
  }
  // A misaligned view and a strided one take ATen's path.
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto base = torch::randn({65}, options);
  const auto shifted = base.narrow(0, 1, 64);
  EXPECT_FALSE(colo::nn::gelu_uses_colo_kernel(shifted));
  EXPECT_TRUE(torch::equal(colo::nn::gelu(shifted), torch::gelu(shifted)));
  EXPECT_FALSE(colo::nn::gelu_uses_colo_kernel(torch::randn({8, 16}, options).t()));
  // A non-contiguous output gradient.
  auto xi = torch::randn({16, 8}, options).requires_grad_();
  auto xr = xi.detach().clone().requires_grad_();
  const auto g = torch::randn({8, 16}, options).t();
  colo::nn::gelu(xi).backward(g);
  torch::gelu(xr).backward(g);
  EXPECT_LT(max_rel(xi.grad(), xr.grad()), 8e-3);
}

TEST_F(FusedKernels, GeluTimeBesideAten) {
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto h = torch::randn({256 * 197, 3072}, options);
  const auto g = torch::randn({256 * 197, 3072}, options);
  auto hi = h.clone().requires_grad_();
  const auto out = colo::nn::gelu(hi);
  torch::NoGradGuard no_grad;
  const double fwd = median_us([&] { colo::nn::gelu(h); });
  const double fwd_aten = median_us([&] { torch::gelu(h); });
  std::printf("TIMING gelu forward 50432x3072 bf16: colo %.1f us, ATen %.1f us\n", fwd, fwd_aten);
  EXPECT_TRUE(out.requires_grad());
  EXPECT_LT(fwd, 1.25 * fwd_aten) << "GELU forward: measured 0.89-1.07 of ATen's time";
}

}  // namespace
}  // namespace fused_kernels_test
