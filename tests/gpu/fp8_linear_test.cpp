// precision=fp8's linear layers on a GPU with float8 products (compute capability 8.9+; skipped
// elsewhere, where tests/unit covers the refusal): colo's cast kernel against ATen's float8 casts
// bit for bit, and colo::nn::fp8_linear's output and three gradients against the same products
// computed in fp64 from the dequantised float8 operands (what the float8 GEMMs must compute, up to
// their own accumulation and the bf16 rounding of the result), and against bf16 at::linear (what
// the float8 quantisation costs).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/linear.h>
#include <colo/nn/vision_transformer.h>

#include "../../core/src/kernels/fp8_cast.h"

namespace {

class Fp8Linear : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    const auto reason = colo::nn::fp8_unavailable_reason(torch::Device(torch::kCUDA, 0));
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

double relative_to_largest(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kCPU, torch::kDouble);
  const auto e = expected.to(torch::kCPU, torch::kDouble);
  return ((a - e).abs().max() / e.abs().max().clamp_min(1e-30)).item<double>();
}

// x rounded as fp8_linear rounds it: scaled to the format's largest value, cast (ATen's
// conversion), and scaled back; in fp64.
torch::Tensor dequantised(const torch::Tensor& x, torch::ScalarType format) {
  const double top = format == torch::kFloat8_e4m3fn ? 448.0 : 57344.0;
  const auto scale = top / x.abs().max().to(torch::kFloat).clamp_min(1e-12);
  return (x.to(torch::kFloat) * scale).to(format).to(torch::kDouble) / scale.to(torch::kDouble);
}

TEST_F(Fp8Linear, CastKernelMatchesAtenBitForBitInBothLayouts) {
  torch::manual_seed(3);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (const auto format : {colo::kernels::Fp8Format::kE4M3, colo::kernels::Fp8Format::kE5M2}) {
    const auto dtype = format == colo::kernels::Fp8Format::kE4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{197 * 4, 768}, {15, 32}, {1, 8}, {33, 72}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " + c10::toString(dtype));
      // Values over many binades, and some exact zeros.
      auto x = (torch::randn({rows, cols}, cuda) * torch::exp(torch::randn({rows, cols}, cuda) * 3)).to(torch::kBFloat16);
      x.index_put_({0, 0}, 0.0);
      // colo's one-pass max|x| equals ATen's, exactly.
      auto amax = torch::zeros({}, cuda.dtype(torch::kFloat));
      ASSERT_EQ(colo::kernels::bf16_abs_max(x.data_ptr(), x.numel(), amax.data_ptr<float>(), nullptr), cudaSuccess);
      EXPECT_EQ(amax.item<float>(), x.abs().max().to(torch::kFloat).item<float>());
      auto inverse_scale = torch::zeros({}, cuda.dtype(torch::kFloat));
      const int64_t ld = (rows + 15) / 16 * 16;
      auto row_major = torch::empty({rows, cols}, cuda.dtype(dtype));
      auto transposed = torch::full({cols, ld}, 1.0, cuda.dtype(torch::kFloat)).to(dtype);  // padding must be zeroed
      ASSERT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, amax.data_ptr<float>(),
                                               inverse_scale.data_ptr<float>(), row_major.data_ptr(),
                                               transposed.data_ptr(), ld, nullptr),
                cudaSuccess);
      const auto scale = colo::kernels::fp8_max(format) / amax.clamp_min(1e-12);
      EXPECT_FLOAT_EQ(inverse_scale.item<float>(), (amax.clamp_min(1e-12) / colo::kernels::fp8_max(format)).item<float>());
      const auto expected = (x.to(torch::kFloat) * scale).to(dtype);
      // Compared as bytes: float8 has no ATen comparison kernels everywhere.
      EXPECT_TRUE(torch::equal(row_major.view(torch::kUInt8), expected.view(torch::kUInt8)));
      EXPECT_TRUE(torch::equal(transposed.narrow(1, 0, rows).view(torch::kUInt8),
                               expected.t().contiguous().view(torch::kUInt8)));
      if (ld > rows) {
        EXPECT_EQ(transposed.narrow(1, rows, ld - rows).view(torch::kUInt8).to(torch::kInt).abs().sum().item<int>(), 0);
      }
    }
  }
}

struct Shape {
  std::vector<int64_t> input;  // [..., in]
  int64_t out;
  bool bias;
};

TEST_F(Fp8Linear, OutputAndGradientsAreTheDequantisedProducts) {
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const std::vector<Shape> shapes{
      {{4, 197, 768}, 2304, true},  // ViT-B's qkv at batch 4
      {{4, 197, 3072}, 768, true},  // fc2
      {{3, 5, 32}, 16, false},      // 15 token rows: the weight gradient's padding
      {{7, 64}, 48, true},          // a 2-D input
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::PrintToString(s.input) + " -> " + std::to_string(s.out));
    const int64_t in = s.input.back();
    auto x = torch::randn(s.input, cuda).requires_grad_();
    auto w = (torch::randn({s.out, in}, cuda) * 0.02).requires_grad_();
    auto b = s.bias ? (torch::randn({s.out}, cuda) * 0.1).requires_grad_() : torch::Tensor();
    auto out_sizes = s.input;
    out_sizes.back() = s.out;
    const auto g = torch::randn(out_sizes, cuda) * 1e-3;  // gradients are small: e5m2's range matters

    auto y = colo::nn::fp8_linear(x, w, b);
    ASSERT_NE(y.grad_fn(), nullptr);
    EXPECT_NE(y.grad_fn()->name().find(s.bias ? "Fp8LinearFunction" : "Fp8BiasFreeLinearFunction"), std::string::npos)
        << y.grad_fn()->name();
    y.backward(g);

    const auto xq = dequantised(x.detach().reshape({-1, in}), torch::kFloat8_e4m3fn);
    const auto wq = dequantised(w.detach(), torch::kFloat8_e4m3fn);
    const auto gq = dequantised(g.reshape({-1, s.out}), torch::kFloat8_e5m2);
    auto y_ref = xq.mm(wq.t());
    if (s.bias) y_ref = y_ref + b.detach().to(torch::kDouble);
    EXPECT_LT(relative_to_largest(y.reshape({-1, s.out}), y_ref), 8e-3);
    EXPECT_LT(relative_to_largest(x.grad().reshape({-1, in}), gq.mm(wq)), 8e-3);
    EXPECT_LT(relative_to_largest(w.grad(), gq.t().mm(xq)), 8e-3);
    if (s.bias) {
      EXPECT_LT(relative_to_largest(b.grad(), g.reshape({-1, s.out}).to(torch::kDouble).sum(0)), 8e-3);
    }

    // What float8 costs against the bf16 product: a few per cent at most.
    const auto y_bf16 = at::linear(x.detach(), w.detach(), s.bias ? b.detach() : torch::Tensor());
    EXPECT_LT(relative_to_largest(y, y_bf16), 0.1);
  }
}

TEST_F(Fp8Linear, DeferredWeightGradientEqualsTheImmediateOne) {
  torch::manual_seed(6);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x0 = torch::randn({2, 50, 64}, cuda);
  const auto w0 = torch::randn({32, 64}, cuda) * 0.05;
  const auto b0 = torch::randn({32}, cuda);
  const auto g = torch::randn({2, 50, 32}, cuda);
  torch::Tensor grads[2][3];
  for (int deferred = 0; deferred < 2; ++deferred) {
    auto x = x0.clone().requires_grad_();
    auto w = w0.clone().requires_grad_();
    auto b = b0.clone().requires_grad_();
    colo::nn::DeferredWeightGrads store;
    {
      std::optional<colo::nn::WeightGradDeferral> deferral;
      if (deferred) deferral.emplace(store);
      colo::nn::fp8_linear(x, w, b).backward(g);
    }
    if (deferred) {
      EXPECT_FALSE(w.grad().defined()) << "the weight gradient should wait for W";
      EXPECT_EQ(store.size(), 1u);
      store.run();
    }
    grads[deferred][0] = x.grad();
    grads[deferred][1] = w.grad();
    grads[deferred][2] = b.grad();
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "gradient " << i;
}

TEST_F(Fp8Linear, UseFp8LinearsSwitchesAViTsBlockLinearsAndKeepsTheHead) {
  auto model = colo::nn::make_vision_transformer(
      colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(2).num_heads(4).num_classes(10));
  model->to(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
  const auto coverage = colo::nn::use_fp8_linears(*model, torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(coverage.converted.size(), 8u) << coverage.summary();
  ASSERT_EQ(coverage.kept.size(), 1u) << coverage.summary();
  const auto images = torch::randn({4, 3, 32, 32}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16));
  const auto logits = model->forward(images);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 10}));
  logits.to(torch::kFloat).logsumexp(1).sum().backward();
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.grad().defined() && p.grad().isfinite().all().item<bool>());
}

}  // namespace
