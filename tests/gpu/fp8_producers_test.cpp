// Float8 producers (issue 39) on a GPU with float8 products (skipped elsewhere): the cast with the
// GELU inside it writes the same float8 bytes, inverse scale and amax as colo's GELU kernel
// followed by the plain cast, under current and delayed scaling; fp8_gelu_linear equals
// fp8_linear(gelu(pre)) bit for bit, forward and backward, deferred or not; the GELU's backward
// with fc1's gradient cast inside it writes what at::gelu_backward and the cast write, and
// fp8_mlp equals the unfused layers (fc1's bias gradient up to the order of its sums); a ViT's
// MLP takes the fused steps under precision=fp8 and trains as with them off.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/nn/gelu.h>
#include <colo/nn/mlp.h>
#include <colo/nn/vision_transformer.h>

#include "../../core/src/kernels/fp8_cast.h"

namespace {

using colo::kernels::Fp8Format;
using colo::kernels::Fp8Prologue;

class Fp8Producers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    const auto reason = colo::nn::fp8_unavailable_reason(torch::Device(torch::kCUDA, 0));
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

const auto kProducerCuda = torch::TensorOptions().device(torch::kCUDA);

torch::Tensor producer_bytes(const torch::Tensor& t) { return t.view(torch::kUInt8); }

// fc1-output-like values: mostly within a few units, some far out on both sides (GELU's negative
// tail rounds to tiny values and zeros, its positive side is near the identity).
torch::Tensor fc1_like(int64_t rows, int64_t cols) {
  return (torch::randn({rows, cols}, kProducerCuda) * torch::exp(torch::randn({rows, cols}, kProducerCuda)) * 2)
      .to(torch::kBFloat16);
}

struct CastResult {
  torch::Tensor row_major, transposed, inverse, amax;
};

// One cast of `x` (or of its GELU, `prologue`) into both layouts; with `scale` defined as delayed
// scaling does (the amax recorded by the cast), else current scaling (max|x| pass first).
CastResult cast(const torch::Tensor& x, Fp8Format format, Fp8Prologue prologue, const torch::Tensor& scale) {
  const auto dtype = format == Fp8Format::kE4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
  const int64_t rows = x.size(0), cols = x.size(1), ld = (rows + 15) / 16 * 16;
  CastResult r;
  r.row_major = torch::empty({rows, cols}, kProducerCuda.dtype(dtype));
  r.transposed = torch::full({cols, ld}, 1.0, kProducerCuda.dtype(torch::kFloat)).to(dtype);  // padding zeroed
  r.inverse = torch::zeros({}, kProducerCuda.dtype(torch::kFloat));
  r.amax = torch::zeros({}, kProducerCuda.dtype(torch::kFloat));
  colo::kernels::Fp8CastScaling scaling;
  scaling.inverse_scale = r.inverse.data_ptr<float>();
  scaling.prologue = prologue;
  if (scale.defined()) {
    scaling.scale = scale.data_ptr<float>();
    scaling.amax_out = r.amax.data_ptr<float>();
  } else {
    EXPECT_EQ(colo::kernels::bf16_abs_max(x.data_ptr(), x.numel(), r.amax.data_ptr<float>(), nullptr, prologue),
              cudaSuccess);
    scaling.amax = r.amax.data_ptr<float>();
  }
  EXPECT_EQ(colo::kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, scaling, r.row_major.data_ptr(),
                                           r.transposed.data_ptr(), ld, nullptr),
            cudaSuccess);
  return r;
}

void expect_same_cast(const CastResult& fused, const CastResult& unfused) {
  EXPECT_TRUE(torch::equal(producer_bytes(fused.row_major), producer_bytes(unfused.row_major)));
  EXPECT_TRUE(torch::equal(producer_bytes(fused.transposed), producer_bytes(unfused.transposed)));
  EXPECT_EQ(fused.inverse.item<float>(), unfused.inverse.item<float>());
  EXPECT_EQ(fused.amax.item<float>(), unfused.amax.item<float>());
}

TEST_F(Fp8Producers, TheGeluInsideTheCastWritesWhatTheGeluKernelAndTheCastWrite) {
  torch::manual_seed(31);
  for (const auto format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{197 * 3, 3072}, {33, 72}, {1, 8}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (format == Fp8Format::kE4M3 ? " e4m3" : " e5m2"));
      const auto pre = fc1_like(rows, cols);
      const auto activated = colo::nn::gelu(pre);  // colo's GELU kernel, as the unfused MLP runs it
      ASSERT_TRUE(torch::equal(activated, torch::gelu(pre)));  // and ATen's, bit for bit
      // Current scaling: the max|x| pass sees the GELU too.
      const auto unfused = cast(activated, format, Fp8Prologue::kNone, torch::Tensor());
      const auto fused = cast(pre, format, Fp8Prologue::kGelu, torch::Tensor());
      EXPECT_EQ(unfused.amax.item<float>(), activated.abs().max().to(torch::kFloat).item<float>());
      expect_same_cast(fused, unfused);
      // Delayed scaling at a scale that saturates the largest values: the same bytes, and the cast
      // records gelu(pre)'s exact amax.
      const auto scale = (colo::kernels::fp8_max(format) / unfused.amax * 4).contiguous();
      expect_same_cast(cast(pre, format, Fp8Prologue::kGelu, scale), cast(activated, format, Fp8Prologue::kNone, scale));
    }
  }
}

TEST_F(Fp8Producers, TheMaxPassOverTheGeluReadsTheTailPastTheLastVector) {
  torch::manual_seed(32);
  // 8k + 5 values, the largest GELU in the tail (past the 16-byte vectors).
  auto pre = (torch::randn({8 * 40 + 5}, kProducerCuda) * 0.1).to(torch::kBFloat16);
  pre[8 * 40 + 3] = 7.5;
  pre[11] = -9.0;  // the largest |pre| has a GELU of about zero: not the answer
  auto amax = torch::zeros({}, kProducerCuda.dtype(torch::kFloat));
  ASSERT_EQ(colo::kernels::bf16_abs_max(pre.data_ptr(), pre.numel(), amax.data_ptr<float>(), nullptr, Fp8Prologue::kGelu),
            cudaSuccess);
  EXPECT_EQ(amax.item<float>(), torch::gelu(pre).abs().max().to(torch::kFloat).item<float>());
  EXPECT_GT(amax.item<float>(), 7.0f);
}

TEST_F(Fp8Producers, GeluLinearEqualsTheUnfusedPairForwardAndBackward) {
  torch::manual_seed(33);
  const auto bf16 = kProducerCuda.dtype(torch::kBFloat16);
  colo::nn::Fp8DelayedScaling state(2, colo::amp::DelayedScalingOptions().history_length(4), kProducerCuda);
  const auto pre0 = fc1_like(2 * 50, 128).view({2, 50, 128});
  const auto w0 = torch::randn({64, 128}, bf16) * 0.05;
  const auto b0 = torch::randn({64}, bf16);
  const auto g0 = torch::randn({2, 50, 64}, bf16) * 1e-3;
  // Current scaling; then delayed, unprimed (current, amaxes recorded) and primed (the history's
  // scales); each fused and unfused, immediate and deferred. Layer 0's slots for the fused form,
  // layer 1's for the unfused: both must record the same amaxes.
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    if (mode == 2) state.update();
    for (int deferred = 0; deferred < 2; ++deferred) {
      torch::Tensor out[2][4];
      for (int fused = 0; fused < 2; ++fused) {
        const auto slots = mode == 0 ? nullptr : state.layer(fused ? 0 : 1);
        auto pre = pre0.clone().requires_grad_();
        auto w = w0.clone().requires_grad_();
        auto b = b0.clone().requires_grad_();
        colo::nn::DeferredWeightGrads store;
        torch::Tensor y;
        {
          std::optional<colo::nn::WeightGradDeferral> deferral;
          if (deferred) deferral.emplace(store);
          y = fused ? colo::nn::fp8_gelu_linear(pre, w, b, slots.get())
                    : colo::nn::fp8_linear(colo::nn::gelu(pre), w, b, slots.get());
          y.backward(g0);
        }
        if (deferred) {
          EXPECT_FALSE(w.grad().defined());
          store.run();
        }
        out[fused][0] = y.detach(), out[fused][1] = pre.grad(), out[fused][2] = w.grad(), out[fused][3] = b.grad();
      }
      for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::equal(out[1][i], out[0][i])) << "tensor " << i;
    }
    if (mode > 0) {
      const auto fused_slots = state.layer(0), unfused_slots = state.layer(1);
      EXPECT_EQ(fused_slots->input_amax.item<float>(), unfused_slots->input_amax.item<float>());
      EXPECT_EQ(fused_slots->input_amax.item<float>(), torch::gelu(pre0).abs().max().to(torch::kFloat).item<float>());
      EXPECT_EQ(fused_slots->grad_amax.item<float>(), unfused_slots->grad_amax.item<float>());
    }
  }
  // Evaluation (no_grad): the same output, nothing saved.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(colo::nn::fp8_gelu_linear(pre0, w0, b0), colo::nn::fp8_linear(torch::gelu(pre0), w0, b0)));
}

// The ViT trains with the fusions on as with them off: step 0 (unprimed: fc2's GELU fusion only)
// bit for bit; from step 1 (primed: fp8_mlp, whose fc1 bias gradient sums in another order) the
// losses and weights within bf16's rounding of those sums.
TEST_F(Fp8Producers, AViTsMlpTakesTheFusedStepAndTrainsAsWithItOff) {
  const auto device = torch::Device(torch::kCUDA, 0);
  const auto config =
      colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(2).num_heads(4).num_classes(16);
  std::vector<float> losses[2];
  std::vector<torch::Tensor> weights[2];
  std::vector<std::string> functions[2];
  for (int fusion = 0; fusion < 2; ++fusion) {
    torch::manual_seed(34);
    auto model = colo::nn::make_vision_transformer(config);
    // Every tensor randomised: a fresh ViT's zero biases and unit norms would hide a wrong gradient.
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
    }
    model->to(device, torch::kBFloat16);
    EXPECT_EQ(colo::nn::set_fp8_gelu_fusion(*model, fusion == 1), 2);
    const auto coverage = colo::nn::use_fp8_linears(*model, device, colo::nn::Fp8Recipe().scaling(colo::nn::Fp8Scaling::kDelayed));
    auto state = coverage.delayed_scaling;
    ASSERT_NE(state, nullptr);
    colo::nn::Mlp* mlp = nullptr;
    for (const auto& module : model->modules()) {
      if (mlp == nullptr) mlp = module->as<colo::nn::Mlp>();
    }
    ASSERT_NE(mlp, nullptr);
    // Which function the MLP's output comes from, before each step.
    auto mlp_function = [&] {
      const auto x = torch::randn({2, 17, 64}, kProducerCuda.dtype(torch::kBFloat16)).requires_grad_();
      return mlp->forward(x).grad_fn()->name();
    };
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05));
    torch::manual_seed(35);
    for (int step = 0; step < 5; ++step) {
      // The probe records amaxes as a step would, the same in both arms.
      functions[fusion].push_back(mlp_function());
      const auto images = torch::randn({16, 3, 32, 32}, kProducerCuda.dtype(torch::kBFloat16));
      const auto labels = torch::randint(16, {16}, kProducerCuda.dtype(torch::kLong));
      auto loss = torch::cross_entropy_loss(model->forward(images).to(torch::kFloat), labels);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      state->update();
      losses[fusion].push_back(loss.item<float>());
    }
    for (const auto& p : model->parameters()) weights[fusion].push_back(p.detach().clone());
  }
  for (int step = 0; step < 5; ++step) {
    const bool primed = step > 0;
    EXPECT_NE(functions[0][step].find("Fp8Linear"), std::string::npos) << functions[0][step];
    const char* expected = primed ? "Fp8MlpFunction" : "Fp8GeluLinear";
    EXPECT_NE(functions[1][step].find(expected), std::string::npos) << "step " << step << ": " << functions[1][step];
  }
  EXPECT_EQ(losses[1][0], losses[0][0]);
  EXPECT_EQ(losses[1][1], losses[0][1]);  // step 0's update was the same bit for bit
  for (size_t i = 2; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 2e-3) << "step " << i;
  for (size_t i = 0; i < weights[0].size(); ++i) {
    EXPECT_TRUE(torch::allclose(weights[1][i].to(torch::kFloat), weights[0][i].to(torch::kFloat), 1e-2, 1e-3))
        << "parameter " << i;
  }
}

// The GELU's backward with fc1's output-gradient cast inside it writes the float8 bytes, inverse
// scale and amax that at::gelu_backward followed by the plain cast write, and column sums that add
// up to the bf16 gradient's column sums.
TEST_F(Fp8Producers, TheGeluBackwardInsideTheCastWritesWhatGeluBackwardAndTheCastWrite) {
  torch::manual_seed(36);
  for (const bool transposed : {true, false}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{197 * 3, 3072}, {33, 72}, {1, 8}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (transposed ? " both layouts" : " row-major"));
      const auto pre = fc1_like(rows, cols);
      const auto dy = (torch::randn({rows, cols}, kProducerCuda) * 1e-3).to(torch::kBFloat16);
      const auto dx = at::gelu_backward(dy, pre);  // what the unfused MLP hands fc1's backward
      const auto amax = dx.abs().max().to(torch::kFloat);
      // A scale that saturates the largest values.
      const auto scale = (colo::kernels::fp8_max(Fp8Format::kE5M2) / amax * 4).contiguous();
      const auto unfused = cast(dx, Fp8Format::kE5M2, Fp8Prologue::kNone, scale);
      const int64_t ld = (rows + 15) / 16 * 16;
      CastResult fused;
      fused.row_major = torch::empty({rows, cols}, kProducerCuda.dtype(torch::kFloat8_e5m2));
      fused.transposed = torch::full({cols, ld}, 1.0, kProducerCuda.dtype(torch::kFloat)).to(torch::kFloat8_e5m2);
      fused.inverse = torch::zeros({}, kProducerCuda.dtype(torch::kFloat));
      fused.amax = torch::zeros({}, kProducerCuda.dtype(torch::kFloat));
      const int64_t tiles = colo::kernels::fp8_cast_row_tiles(rows, ld, transposed);
      EXPECT_EQ(tiles, ((transposed ? ld : rows) + 31) / 32);
      auto partials = torch::full({tiles, cols}, std::nan(""), kProducerCuda.dtype(torch::kFloat));
      colo::kernels::Fp8CastScaling scaling;
      scaling.scale = scale.data_ptr<float>();
      scaling.inverse_scale = fused.inverse.data_ptr<float>();
      scaling.amax_out = fused.amax.data_ptr<float>();
      ASSERT_EQ(colo::kernels::fp8_gelu_backward_cast(Fp8Format::kE5M2, dy.data_ptr(), pre.data_ptr(), rows, cols,
                                                      scaling, fused.row_major.data_ptr(),
                                                      transposed ? fused.transposed.data_ptr() : nullptr, ld,
                                                      partials.data_ptr<float>(), nullptr),
                cudaSuccess);
      EXPECT_TRUE(torch::equal(producer_bytes(fused.row_major), producer_bytes(unfused.row_major)));
      if (transposed) {
        EXPECT_TRUE(torch::equal(producer_bytes(fused.transposed), producer_bytes(unfused.transposed)));
      }
      EXPECT_EQ(fused.inverse.item<float>(), unfused.inverse.item<float>());
      EXPECT_EQ(fused.amax.item<float>(), amax.item<float>());
      // Each tile row's sums: the bf16 gradient's 32 rows (zeros past the last), in fp32.
      auto padded = torch::zeros({tiles * 32, cols}, kProducerCuda.dtype(torch::kFloat));
      padded.narrow(0, 0, rows).copy_(dx.to(torch::kFloat));
      const auto expected = padded.view({tiles, 32, cols}).sum(1);
      EXPECT_TRUE(torch::allclose(partials, expected, 1e-5, 1e-7)) << (partials - expected).abs().max().item<float>();
    }
  }
  // No scale (current scaling cannot know the amax before the pass): refused.
  const auto x = fc1_like(32, 64);
  auto partials = torch::empty({1, 64}, kProducerCuda.dtype(torch::kFloat));
  colo::kernels::Fp8CastScaling scaling;
  auto amax = torch::zeros({}, kProducerCuda.dtype(torch::kFloat));
  scaling.amax = amax.data_ptr<float>();
  EXPECT_EQ(colo::kernels::fp8_gelu_backward_cast(Fp8Format::kE5M2, x.data_ptr(), x.data_ptr(), 32, 64, scaling, nullptr,
                                                  nullptr, 32, partials.data_ptr<float>(), nullptr),
            cudaErrorInvalidValue);
}

// fp8_mlp equals fp8_gelu_linear(fp8_linear(...)) bit for bit, forward and backward, immediate and
// deferred, except fc1's bias gradient (sums in another order: within one bf16 rounding); it
// takes its own function only once the delayed state is primed.
TEST_F(Fp8Producers, MlpInOneFunctionEqualsTheUnfusedLayers) {
  torch::manual_seed(37);
  const auto bf16 = kProducerCuda.dtype(torch::kBFloat16);
  colo::nn::Fp8DelayedScaling state(4, colo::amp::DelayedScalingOptions().history_length(4), kProducerCuda);
  const auto x0 = torch::randn({2, 50, 64}, bf16);
  const auto w10 = torch::randn({256, 64}, bf16) * 0.1;
  const auto b10 = torch::randn({256}, bf16);
  const auto w20 = torch::randn({64, 256}, bf16) * 0.05;
  const auto b20 = torch::randn({64}, bf16);
  const auto g0 = torch::randn({2, 50, 64}, bf16) * 1e-3;
  for (int mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE(mode == 0 ? "unprimed" : "primed");
    if (mode == 1) state.update();
    EXPECT_EQ(colo::nn::fp8_mlp_fuses_backward(b10, b20, state.layer(0).get(), state.layer(1).get()), mode == 1);
    for (int deferred = 0; deferred < 2; ++deferred) {
      torch::Tensor out[2][6];
      for (int fused = 0; fused < 2; ++fused) {
        // Layers 0 and 1 for the fused form, 2 and 3 for the unfused: both must record the same amaxes.
        const auto fc1 = state.layer(fused ? 0 : 2), fc2 = state.layer(fused ? 1 : 3);
        auto x = x0.clone().requires_grad_();
        auto w1 = w10.clone().requires_grad_(), b1 = b10.clone().requires_grad_();
        auto w2 = w20.clone().requires_grad_(), b2 = b20.clone().requires_grad_();
        colo::nn::DeferredWeightGrads store;
        torch::Tensor y;
        {
          std::optional<colo::nn::WeightGradDeferral> deferral;
          if (deferred) deferral.emplace(store);
          y = fused ? colo::nn::fp8_mlp(x, w1, b1, w2, b2, fc1.get(), fc2.get())
                    : colo::nn::fp8_gelu_linear(colo::nn::fp8_linear(x, w1, b1, fc1.get()), w2, b2, fc2.get());
          if (fused) {
            EXPECT_EQ(y.grad_fn()->name().find("Fp8MlpFunction") != std::string::npos, mode == 1) << y.grad_fn()->name();
          }
          y.backward(g0);
        }
        if (deferred) {
          EXPECT_FALSE(w1.grad().defined());
          EXPECT_FALSE(b1.grad().defined());
          store.run();
        }
        out[fused][0] = y.detach(), out[fused][1] = x.grad(), out[fused][2] = w1.grad();
        out[fused][3] = w2.grad(), out[fused][4] = b2.grad(), out[fused][5] = b1.grad();
      }
      for (int i = 0; i < 5; ++i) EXPECT_TRUE(torch::equal(out[1][i], out[0][i])) << "tensor " << i;
      // fc1's bias gradient: the same up to one bf16 rounding of differently ordered fp32 sums.
      EXPECT_TRUE(torch::allclose(out[1][5].to(torch::kFloat), out[0][5].to(torch::kFloat), 8e-3, 1e-6))
          << (out[1][5].to(torch::kFloat) - out[0][5].to(torch::kFloat)).abs().max().item<float>();
    }
    for (int layer = 0; layer < 2; ++layer) {
      const auto fused_slots = state.layer(layer), unfused_slots = state.layer(layer + 2);
      EXPECT_EQ(fused_slots->input_amax.item<float>(), unfused_slots->input_amax.item<float>()) << layer;
      EXPECT_EQ(fused_slots->weight_amax.item<float>(), unfused_slots->weight_amax.item<float>()) << layer;
      EXPECT_EQ(fused_slots->grad_amax.item<float>(), unfused_slots->grad_amax.item<float>()) << layer;
    }
  }
  // Evaluation (no_grad): the unfused layers' output.
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(colo::nn::fp8_mlp_fuses_backward(b10, b20, state.layer(0).get(), state.layer(1).get()));
  EXPECT_TRUE(torch::equal(colo::nn::fp8_mlp(x0, w10, b10, w20, b20, nullptr, nullptr),
                           colo::nn::fp8_gelu_linear(colo::nn::fp8_linear(x0, w10, b10), w20, b20)));
}

}  // namespace
