// Float8 producers (issue 39) on a GPU with float8 products (skipped elsewhere): the cast with the
// GELU inside it writes the same float8 bytes, inverse scale and amax as colo's GELU kernel
// followed by the plain cast, under current and delayed scaling; fp8_gelu_linear equals
// fp8_linear(gelu(pre)) bit for bit, forward and backward, deferred or not; a ViT's MLP takes the
// fused step under precision=fp8 and trains exactly as with it off.
#include <gtest/gtest.h>
#include <torch/torch.h>

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

TEST_F(Fp8Producers, AViTsMlpTakesTheFusedStepAndTrainsAsWithItOff) {
  const auto device = torch::Device(torch::kCUDA, 0);
  const auto config =
      colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(2).num_heads(4).num_classes(16);
  std::vector<float> losses[2];
  std::vector<torch::Tensor> weights[2];
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
    // The MLP's output comes from the fused function exactly when the fusion is on.
    {
      colo::nn::Mlp* mlp = nullptr;
      for (const auto& module : model->modules()) {
        if (mlp == nullptr) mlp = module->as<colo::nn::Mlp>();
      }
      ASSERT_NE(mlp, nullptr);
      const auto x = torch::randn({2, 17, 64}, kProducerCuda.dtype(torch::kBFloat16)).requires_grad_();
      const auto name = mlp->forward(x).grad_fn()->name();
      EXPECT_EQ(name.find("Fp8GeluLinear") != std::string::npos, fusion == 1) << name;
    }
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05));
    torch::manual_seed(35);
    for (int step = 0; step < 5; ++step) {
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
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_EQ(losses[1][i], losses[0][i]) << "step " << i;
  for (size_t i = 0; i < weights[0].size(); ++i) EXPECT_TRUE(torch::equal(weights[1][i], weights[0][i])) << "parameter " << i;
}

}  // namespace
