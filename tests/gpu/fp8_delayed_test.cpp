// Delayed float8 scaling on a GPU with float8 products (issue 39; skipped elsewhere, where
// tests/unit/fp8_scaling_test.cpp covers the state and the refusal): the cast with a given scale
// writes the same float8 bytes as the current-scaling cast at the same scale and records the exact
// amax (overflow included) in the same pass; fp8_linear with a layer's delayed slots scales by the
// history, records all three operands, records nothing under no_grad, defers its weight gradient
// as the current path does; a ViT trains alike under both scalings.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/nn/vision_transformer.h>

#include "../../core/src/kernels/fp8_cast.h"

namespace {

using colo::kernels::Fp8Format;

class Fp8Delayed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    const auto reason = colo::nn::fp8_unavailable_reason(torch::Device(torch::kCUDA, 0));
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

const auto kCuda = torch::TensorOptions().device(torch::kCUDA);

torch::Tensor bytes(const torch::Tensor& t) { return t.view(torch::kUInt8); }

double delayed_relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kCPU, torch::kDouble);
  const auto e = expected.to(torch::kCPU, torch::kDouble);
  return ((a - e).abs().max() / e.abs().max().clamp_min(1e-30)).item<double>();
}

// x rounded as a cast with `scale` rounds it (saturated), back in fp64.
torch::Tensor dequantised(const torch::Tensor& x, torch::ScalarType format, const torch::Tensor& scale) {
  const double top = format == torch::kFloat8_e4m3fn ? 448.0 : 57344.0;
  return (x.to(torch::kFloat) * scale).clamp(-top, top).to(format).to(torch::kDouble) / scale.to(torch::kDouble);
}

TEST_F(Fp8Delayed, CastWithAGivenScaleEqualsTheCurrentCastAndRecordsTheExactAmax) {
  torch::manual_seed(11);
  for (const auto format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const auto dtype = format == Fp8Format::kE4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{197 * 4, 768}, {15, 32}, {1, 8}, {33, 72}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " + c10::toString(dtype));
      const auto x = (torch::randn({rows, cols}, kCuda) * torch::exp(torch::randn({rows, cols}, kCuda) * 3))
                         .to(torch::kBFloat16);
      const int64_t ld = (rows + 15) / 16 * 16;
      auto amax = torch::zeros({}, kCuda.dtype(torch::kFloat));
      ASSERT_EQ(colo::kernels::bf16_abs_max(x.data_ptr(), x.numel(), amax.data_ptr<float>(), nullptr), cudaSuccess);
      // Current scaling's own scale, handed over as a delayed one.
      const auto scale = colo::kernels::fp8_max(format) / amax.clamp_min(1e-12);
      auto current_rm = torch::empty({rows, cols}, kCuda.dtype(dtype));
      auto current_tr = torch::empty({cols, ld}, kCuda.dtype(dtype));
      auto current_inverse = torch::zeros({}, kCuda.dtype(torch::kFloat));
      ASSERT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, amax.data_ptr<float>(),
                                               current_inverse.data_ptr<float>(), current_rm.data_ptr(),
                                               current_tr.data_ptr(), ld, nullptr),
                cudaSuccess);
      auto delayed_rm = torch::empty({rows, cols}, kCuda.dtype(dtype));
      auto delayed_tr = torch::full({cols, ld}, 1.0, kCuda.dtype(torch::kFloat)).to(dtype);  // padding must be zeroed
      auto inverse = torch::zeros({}, kCuda.dtype(torch::kFloat));
      // The slot already holds a smaller amax of an earlier cast: the record is their max.
      auto slot = (amax * 0.5).contiguous();
      colo::kernels::Fp8CastScaling scaling;
      scaling.scale = scale.data_ptr<float>();
      scaling.inverse_scale = inverse.data_ptr<float>();
      scaling.amax_out = slot.data_ptr<float>();
      ASSERT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, scaling, delayed_rm.data_ptr(),
                                               delayed_tr.data_ptr(), ld, nullptr),
                cudaSuccess);
      EXPECT_TRUE(torch::equal(bytes(delayed_rm), bytes(current_rm)));
      EXPECT_TRUE(torch::equal(bytes(delayed_tr), bytes(current_tr)));
      EXPECT_EQ(slot.item<float>(), x.abs().max().to(torch::kFloat).item<float>());
      EXPECT_EQ(inverse.item<float>(), scale.reciprocal().item<float>());
      // A larger amax already there stays; a transposed-only cast records too.
      slot.fill_(1e30f);
      scaling.amax_out = slot.data_ptr<float>();
      ASSERT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, scaling, nullptr, delayed_tr.data_ptr(),
                                               ld, nullptr),
                cudaSuccess);
      EXPECT_EQ(slot.item<float>(), 1e30f);
      slot.zero_();
      ASSERT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, scaling, nullptr, delayed_tr.data_ptr(),
                                               ld, nullptr),
                cudaSuccess);
      EXPECT_EQ(slot.item<float>(), x.abs().max().to(torch::kFloat).item<float>());
      // A scale that saturates: the cast clamps to the format's largest value, as the current one.
      auto big = scale * 64;
      scaling.scale = big.data_ptr<float>();
      ASSERT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, scaling, delayed_rm.data_ptr(), nullptr,
                                               0, nullptr),
                cudaSuccess);
      const double top = colo::kernels::fp8_max(format);
      const auto want = (x.to(torch::kFloat) * big).clamp(-top, top).to(dtype);
      EXPECT_TRUE(torch::equal(bytes(delayed_rm), bytes(want)));
    }
  }
  // Neither an amax nor a scale: refused, nothing launched.
  const auto x = torch::ones({2, 8}, kCuda.dtype(torch::kBFloat16));
  auto out = torch::empty({2, 8}, kCuda.dtype(torch::kFloat8_e4m3fn));
  EXPECT_EQ(colo::kernels::fp8_scaled_cast(Fp8Format::kE4M3, x.data_ptr(), 2, 8, colo::kernels::Fp8CastScaling{},
                                           out.data_ptr(), nullptr, 0, nullptr),
            cudaErrorInvalidValue);
}

TEST_F(Fp8Delayed, TheRecordedAmaxKeepsAnOverflowVisible) {
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    auto x = torch::randn({64, 64}, kCuda).to(torch::kBFloat16);
    x.index_put_({37, 5}, bad);
    const auto scale = torch::ones({}, kCuda.dtype(torch::kFloat));
    auto slot = torch::zeros({}, kCuda.dtype(torch::kFloat));
    auto out = torch::empty({64, 64}, kCuda.dtype(torch::kFloat8_e4m3fn));
    colo::kernels::Fp8CastScaling scaling;
    scaling.scale = scale.data_ptr<float>();
    scaling.amax_out = slot.data_ptr<float>();
    ASSERT_EQ(colo::kernels::fp8_scaled_cast(Fp8Format::kE4M3, x.data_ptr(), 64, 64, scaling, out.data_ptr(), nullptr, 0,
                                             nullptr),
              cudaSuccess);
    const float got = slot.item<float>();
    if (std::isnan(bad)) {
      EXPECT_TRUE(std::isnan(got)) << got;
    } else {
      EXPECT_EQ(got, std::numeric_limits<float>::infinity());
    }
  }
}

TEST_F(Fp8Delayed, LinearScalesByTheHistoryAndRecordsEveryOperand) {
  torch::manual_seed(12);
  const auto bf16 = kCuda.dtype(torch::kBFloat16);
  colo::nn::Fp8DelayedScaling state(1, colo::amp::DelayedScalingOptions().history_length(4), kCuda);
  const auto slots = state.layer(0);
  const auto amax_of = [](const torch::Tensor& t) { return t.abs().max().to(torch::kFloat).item<float>(); };
  // Step 1, before any history: exactly the current-scaling layer, its amaxes recorded.
  const auto x1 = torch::randn({3, 50, 64}, bf16) * 2;
  const auto w1 = torch::randn({32, 64}, bf16) * 0.05;
  const auto b = torch::randn({32}, bf16);
  const auto g1 = torch::randn({3, 50, 32}, bf16) * 1e-3;
  torch::Tensor ref[4], got[4];
  for (int delayed = 0; delayed < 2; ++delayed) {
    auto x = x1.clone().requires_grad_();
    auto w = w1.clone().requires_grad_();
    auto bias = b.clone().requires_grad_();
    auto y = colo::nn::fp8_linear(x, w, bias, delayed ? slots.get() : nullptr);
    y.backward(g1);
    auto& out = delayed ? got : ref;
    out[0] = y.detach(), out[1] = x.grad(), out[2] = w.grad(), out[3] = bias.grad();
  }
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::equal(got[i], ref[i])) << "unprimed, tensor " << i;
  EXPECT_EQ(slots->input_amax.item<float>(), amax_of(x1));
  EXPECT_EQ(slots->weight_amax.item<float>(), amax_of(w1));
  EXPECT_EQ(slots->grad_amax.item<float>(), amax_of(g1));
  state.update();
  ASSERT_TRUE(state.primed());
  EXPECT_FLOAT_EQ(slots->input_scale.item<float>(), 448.0f / amax_of(x1));

  // Step 2: other values (twice as large, so step 1's scales would saturate a current cast's
  // largest values, as delayed scaling does), multiplied at step 1's scales.
  const auto x2 = torch::randn({3, 50, 64}, bf16) * 4;
  const auto w2 = torch::randn({32, 64}, bf16) * 0.1;
  const auto g2 = torch::randn({3, 50, 32}, bf16) * 2e-3;
  const auto sx = slots->input_scale.clone(), sw = slots->weight_scale.clone(), sg = slots->grad_scale.clone();
  torch::Tensor immediate[3];
  for (int deferred = 0; deferred < 2; ++deferred) {
    auto x = x2.clone().requires_grad_();
    auto w = w2.clone().requires_grad_();
    auto bias = b.clone().requires_grad_();
    colo::nn::DeferredWeightGrads store;
    torch::Tensor y;
    {
      std::optional<colo::nn::WeightGradDeferral> deferral;
      if (deferred) deferral.emplace(store);
      y = colo::nn::fp8_linear(x, w, bias, slots.get());
      y.backward(g2);
    }
    if (deferred) {
      EXPECT_FALSE(w.grad().defined());
      store.run();
      EXPECT_TRUE(torch::equal(x.grad(), immediate[0]));
      EXPECT_TRUE(torch::equal(w.grad(), immediate[1]));
      EXPECT_TRUE(torch::equal(bias.grad(), immediate[2]));
      continue;
    }
    immediate[0] = x.grad(), immediate[1] = w.grad(), immediate[2] = bias.grad();
    const auto xq = dequantised(x2.reshape({-1, 64}), torch::kFloat8_e4m3fn, sx);
    const auto wq = dequantised(w2, torch::kFloat8_e4m3fn, sw);
    const auto gq = dequantised(g2.reshape({-1, 32}), torch::kFloat8_e5m2, sg);
    EXPECT_LT(delayed_relative_error(y.reshape({-1, 32}), xq.mm(wq.t()) + b.to(torch::kDouble)), 8e-3);
    EXPECT_LT(delayed_relative_error(x.grad().reshape({-1, 64}), gq.mm(wq)), 8e-3);
    EXPECT_LT(delayed_relative_error(w.grad(), gq.t().mm(xq)), 8e-3);
    // The current layer on the same values is not what was computed: the scale came from step 1.
    const auto current = colo::nn::fp8_linear(x2, w2, b);
    EXPECT_FALSE(torch::equal(current, y.detach()));
  }
  // Both passes (immediate, deferred) recorded the same operands: their amaxes, exactly.
  EXPECT_EQ(slots->input_amax.item<float>(), amax_of(x2));
  EXPECT_EQ(slots->weight_amax.item<float>(), amax_of(w2));
  EXPECT_EQ(slots->grad_amax.item<float>(), amax_of(g2));

  // Evaluation (no_grad) records nothing.
  state.update();
  {
    torch::NoGradGuard no_grad;
    colo::nn::fp8_linear(x2 * 100, w2, b, slots.get());
  }
  EXPECT_EQ(slots->input_amax.item<float>(), 0.0f);
  EXPECT_EQ(slots->weight_amax.item<float>(), 0.0f);
}

TEST_F(Fp8Delayed, AViTTrainsAlikeUnderBothScalings) {
  const auto device = torch::Device(torch::kCUDA, 0);
  const auto config =
      colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(2).num_heads(4).num_classes(16);
  std::vector<float> losses[2];
  std::shared_ptr<colo::nn::Fp8DelayedScaling> state;
  for (int delayed = 0; delayed < 2; ++delayed) {
    torch::manual_seed(21);
    auto model = colo::nn::make_vision_transformer(config);
    model->to(device, torch::kBFloat16);
    const auto recipe = colo::nn::Fp8Recipe().scaling(delayed ? colo::nn::Fp8Scaling::kDelayed
                                                              : colo::nn::Fp8Scaling::kCurrent);
    const auto coverage = colo::nn::use_fp8_linears(*model, device, recipe);
    EXPECT_EQ(coverage.converted.size(), 9u) << coverage.summary();  // 8 block linears and the 16-class head
    EXPECT_EQ(coverage.delayed_scaling != nullptr, delayed == 1);
    if (delayed) state = coverage.delayed_scaling;
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05));
    torch::manual_seed(22);
    for (int step = 0; step < 8; ++step) {
      const auto images = torch::randn({16, 3, 32, 32}, kCuda.dtype(torch::kBFloat16));
      const auto labels = torch::randint(16, {16}, kCuda.dtype(torch::kLong));
      auto loss = torch::cross_entropy_loss(model->forward(images).to(torch::kFloat), labels);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      if (state && delayed) state->update();
      losses[delayed].push_back(loss.item<float>());
    }
  }
  ASSERT_EQ(state->layers(), 9);
  EXPECT_EQ(state->nonfinite_amaxes(), 0);
  EXPECT_TRUE(torch::isfinite(state->forward().scale()).all().item<bool>());
  for (size_t i = 0; i < losses[0].size(); ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 0.02 * std::abs(losses[0][i])) << "step " << i;
  }
}

}  // namespace
