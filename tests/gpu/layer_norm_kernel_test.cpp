// colo's CUDA kernel for LayerNorm's weight and bias gradients (core/src/kernels), through
// colo::nn::layer_norm's backward, against the sums computed in fp64 from the same saved mean and
// rstd; the input gradient against ATen's. Shapes the kernel does not take must fall back to
// ATen's backward and give the same answers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include <colo/nn/layer_norm.h>

namespace {

struct Case {
  std::vector<int64_t> shape;  // the last dimension is normalised
  torch::ScalarType dtype;
  bool kernel;  // whether colo's kernel is expected to run
};

std::string describe(const Case& c) {
  return ::testing::PrintToString(c.shape) + " " + std::string(c10::toString(c.dtype));
}

double max_rel(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kCPU, torch::kDouble);
  const auto e = expected.to(torch::kCPU, torch::kDouble);
  return ((a - e).abs().max() / e.abs().max().clamp_min(1e-30)).item<double>();
}

class LayerNormKernel : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(torch::cuda::is_available()) << "this test needs a CUDA device"; }
};

TEST_F(LayerNormKernel, WeightAndBiasGradientsMatchFp64Sums) {
  torch::manual_seed(11);
  const std::vector<Case> cases{
      {{256, 197, 768}, torch::kBFloat16, true},  // ViT-B/16 at batch 256: 50432 rows
      {{4, 197, 768}, torch::kBFloat16, true},    {{4, 197, 768}, torch::kHalf, true},
      {{4, 197, 768}, torch::kFloat, true},       {{3, 5, 1024}, torch::kBFloat16, true},
      {{7, 64}, torch::kFloat, true},             {{3, 40}, torch::kBFloat16, true},  // 40: a partial column tile
      {{5, 12}, torch::kFloat, true},             {{5, 12}, torch::kBFloat16, false},  // 12 bf16 is not 16 bytes' worth
      {{2, 768}, torch::kBFloat16, true},                                               // fewer rows than warps
      {{3, 6}, torch::kDouble, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(describe(c));
    const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
    const int64_t cols = c.shape.back();
    const auto x = torch::randn(c.shape, options);
    const auto g = torch::randn(c.shape, options);
    auto w = (1 + 0.1 * torch::randn({cols}, options)).requires_grad_();
    auto b = (0.1 * torch::randn({cols}, options)).requires_grad_();
    auto xi = x.clone().requires_grad_();
    ASSERT_EQ(colo::nn::layer_norm_uses_colo_kernel(g, x, cols), c.kernel);
    colo::nn::layer_norm(xi, {cols}, w, b, 1e-6).backward(g);

    // The fp64 reference, from the mean and rstd LayerNorm's forward saved.
    auto [out, mean, rstd] = at::native_layer_norm(x, {cols}, w.detach(), b.detach(), 1e-6);
    const auto rows = x.numel() / cols;
    const auto x_hat = (x.to(torch::kDouble).reshape({rows, cols}) - mean.to(torch::kDouble).reshape({rows, 1})) *
                       rstd.to(torch::kDouble).reshape({rows, 1});
    const auto g64 = g.to(torch::kDouble).reshape({rows, cols});
    const auto dgamma = (g64 * x_hat).sum(0);
    const auto dbeta = g64.sum(0);
    ASSERT_EQ(w.grad().scalar_type(), c.dtype);
    // fp32 sums of up to 50432 terms, then rounded to the parameter's dtype.
    const double tolerance = c.dtype == torch::kBFloat16 ? 8e-3 : c.dtype == torch::kHalf ? 1e-3 : 1e-5;
    EXPECT_LT(max_rel(w.grad(), dgamma), tolerance);
    EXPECT_LT(max_rel(b.grad(), dbeta), tolerance);

    // The input gradient beside ATen's: colo's row kernel where it applies (fused_kernels_test.cpp
    // holds it to fp64), ATen's own kernel otherwise.
    auto xr = x.clone().requires_grad_();
    at::layer_norm(xr, {cols}, w.detach(), b.detach(), 1e-6).backward(g);
    if (colo::nn::layer_norm_rows_use_colo_kernel(x, w, b)) {
      EXPECT_LT(max_rel(xi.grad(), xr.grad()), tolerance);
    } else {
      EXPECT_TRUE(torch::equal(xi.grad(), xr.grad()));
    }
  }
}

TEST_F(LayerNormKernel, MisalignedOrStridedTensorsFallBackToAten) {
  torch::manual_seed(12);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  // Contiguous but 2 bytes past a 16-byte boundary.
  const auto base = torch::randn({1 + 6 * 64}, options);
  const auto shifted = base.narrow(0, 1, 6 * 64).view({6, 64});
  ASSERT_TRUE(shifted.is_contiguous());
  const auto g = torch::randn({6, 64}, options);
  EXPECT_FALSE(colo::nn::layer_norm_uses_colo_kernel(g, shifted, 64));
  EXPECT_FALSE(colo::nn::layer_norm_uses_colo_kernel(g, torch::randn({64, 6}, options).t(), 64));

  auto w1 = torch::ones({64}, options).requires_grad_();
  auto b1 = torch::zeros({64}, options).requires_grad_();
  colo::nn::layer_norm(shifted, {64}, w1, b1, 1e-6).backward(g);
  auto w2 = torch::ones({64}, options).requires_grad_();
  auto b2 = torch::zeros({64}, options).requires_grad_();
  at::layer_norm(shifted, {64}, w2, b2, 1e-6).backward(g);
  EXPECT_TRUE(torch::equal(w1.grad(), w2.grad()));
  EXPECT_TRUE(torch::equal(b1.grad(), b2.grad()));

  // A strided output gradient is made contiguous first, and then the kernel takes it.
  const auto x = torch::randn({6, 64}, options);
  const auto g_strided = torch::randn({64, 6}, options).t();
  auto w3 = torch::ones({64}, options).requires_grad_();
  auto b3 = torch::zeros({64}, options).requires_grad_();
  colo::nn::layer_norm(x, {64}, w3, b3, 1e-6).backward(g_strided);
  EXPECT_LT(max_rel(b3.grad(), g_strided.to(torch::kDouble).sum(0)), 8e-3);
}

}  // namespace
