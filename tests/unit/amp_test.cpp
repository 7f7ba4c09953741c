// colo::amp: precision parsing and policy, fp32 master weights, the dynamic loss scaler, and
// fused unscaling + clipping (against torch::nn::utils::clip_grad_norm_).
#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/grad_clip.h>
#include <colo/amp/master_weights.h>
#include <colo/amp/precision.h>
#include <colo/amp/precision_policy.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace colo::amp {
namespace {

// ---- Precision and PrecisionPolicy -----------------------------------------------------------

TEST(Precision, ParsesPrintsAndMapsToDtypes) {
  for (auto p : {Precision::kFp32, Precision::kFp16, Precision::kBf16, Precision::kFp8}) {
    EXPECT_EQ(parse_precision(to_string(p)), p);
  }
  EXPECT_EQ(to_string(Precision::kBf16), "bf16");
  EXPECT_EQ(to_string(Precision::kFp8), "fp8");
  // fp8's tensors between layers are bf16: only its linear layers' products are float8.
  EXPECT_EQ(to_dtype(Precision::kFp8), torch::kBFloat16);
  EXPECT_EQ(to_dtype(Precision::kFp32), torch::kFloat);
  EXPECT_EQ(to_dtype(Precision::kFp16), torch::kHalf);
  EXPECT_EQ(to_dtype(Precision::kBf16), torch::kBFloat16);
}

TEST(Precision, UnknownNameListsTheValidOnes) {
  try {
    parse_precision("float16");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'float16'"), std::string::npos) << what;
    EXPECT_NE(what.find("fp32, fp16, bf16, fp8"), std::string::npos) << what;
  }
}

TEST(PrecisionPolicy, DecidesDtypeMastersAndScaler) {
  const PrecisionPolicy fp32(Precision::kFp32), bf16(Precision::kBf16), fp16(Precision::kFp16);
  EXPECT_EQ(fp32.compute_dtype(), torch::kFloat);
  EXPECT_FALSE(fp32.uses_master_weights());
  EXPECT_FALSE(fp32.needs_loss_scaler());
  EXPECT_EQ(bf16.compute_dtype(), torch::kBFloat16);
  EXPECT_TRUE(bf16.uses_master_weights());
  EXPECT_FALSE(bf16.needs_loss_scaler());
  EXPECT_EQ(fp16.compute_dtype(), torch::kHalf);
  EXPECT_TRUE(fp16.uses_master_weights());
  EXPECT_TRUE(fp16.needs_loss_scaler());
  EXPECT_FALSE(PrecisionPolicy(Precision::kBf16).master_weights(false).uses_master_weights());
  const PrecisionPolicy fp8(Precision::kFp8);
  EXPECT_EQ(fp8.compute_dtype(), torch::kBFloat16);
  EXPECT_TRUE(fp8.uses_master_weights());
  EXPECT_FALSE(fp8.needs_loss_scaler()) << "each float8 product scales its own operands";
  EXPECT_TRUE(fp8.uses_fp8_matmuls());
  for (const auto* other : {&fp32, &bf16, &fp16}) EXPECT_FALSE(other->uses_fp8_matmuls());

  EXPECT_EQ(bf16.cast_to_compute(torch::ones({2})).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf16.cast_to_compute(torch::ones({2}, torch::kLong)).scalar_type(), torch::kLong);
}

// ---- MasterWeights ---------------------------------------------------------------------------

TEST(MasterWeights, CastsWorkingParamsInPlaceAndKeepsExactMasters) {
  torch::manual_seed(0);
  torch::nn::Linear layer(5, 3);
  auto params = layer->parameters();
  std::vector<torch::Tensor> original;
  for (auto& p : params) original.push_back(p.detach().clone());

  MasterWeights masters(*layer, torch::kBFloat16);
  ASSERT_EQ(masters.master_params().size(), 2u);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(masters.working_params()[i].is_same(params[i]));  // the module's own tensors
    EXPECT_EQ(params[i].scalar_type(), torch::kBFloat16);
    EXPECT_EQ(masters.master_params()[i].scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(masters.master_params()[i], original[i]));  // not round-tripped through bf16
  }
  EXPECT_EQ(layer->weight.scalar_type(), torch::kBFloat16);

  // bf16 forward/backward on the CPU, then the gradient reaches the masters in fp32.
  auto x = torch::randn({4, 5}).to(torch::kBFloat16);
  layer->forward(x).sum().backward();
  masters.copy_grads_to_master();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(masters.master_params()[i].grad().defined());
    EXPECT_EQ(masters.master_params()[i].grad().scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(masters.master_params()[i].grad(), params[i].grad().to(torch::kFloat)));
  }
  // A second backward reuses the master gradient storage.
  const auto* storage = masters.master_params()[0].grad().data_ptr();
  layer->zero_grad();
  layer->forward(x).sum().backward();
  masters.copy_grads_to_master();
  EXPECT_EQ(masters.master_params()[0].grad().data_ptr(), storage);

  // An optimizer step on the masters reaches the working weights rounded to bf16.
  torch::optim::SGD sgd(masters.master_params(), torch::optim::SGDOptions(0.1));
  sgd.step();
  masters.copy_master_to_working();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], masters.master_params()[i].to(torch::kBFloat16)));
  }
}

TEST(MasterWeights, MissingWorkingGradLeavesMasterWithout) {
  auto a = torch::randn({3}).requires_grad_();
  auto b = torch::randn({3}).requires_grad_();
  MasterWeights masters({a, b}, torch::kBFloat16);
  (a * 2).sum().backward();
  masters.copy_grads_to_master();
  EXPECT_TRUE(masters.master_params()[0].grad().defined());
  EXPECT_FALSE(masters.master_params()[1].grad().defined());
}

TEST(MasterWeights, Fp32IsAPassThrough) {
  auto a = torch::randn({3}).requires_grad_();
  MasterWeights masters({a}, torch::kFloat);
  EXPECT_TRUE(masters.master_params()[0].is_same(a));
  (a * 3).sum().backward();
  masters.copy_grads_to_master();
  masters.copy_master_to_working();
  EXPECT_TRUE(torch::equal(a.grad(), torch::full({3}, 3.0)));
}

TEST(MasterWeights, RejectsNonFloatingDtypes) {
  EXPECT_THROW(MasterWeights({torch::randn({2})}, torch::kInt), std::invalid_argument);
  EXPECT_THROW(MasterWeights({torch::ones({2}, torch::kLong)}, torch::kBFloat16), std::invalid_argument);
}

// ---- DynamicLossScaler -----------------------------------------------------------------------

LossScalerOptions small_options() {
  return LossScalerOptions().initial_scale(1024).min_scale(64).max_scale(4096).growth_interval(3).hysteresis(2);
}

TEST(DynamicLossScaler, DefaultsAreColossalAis) {
  DynamicLossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.options().min_scale(), 1.0);
  EXPECT_EQ(scaler.options().max_scale(), 16777216.0);
  EXPECT_EQ(scaler.options().growth_factor(), 2.0);
  EXPECT_EQ(scaler.options().backoff_factor(), 0.5);
  EXPECT_EQ(scaler.options().growth_interval(), 1000);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
}

TEST(DynamicLossScaler, GrowsAfterIntervalUpToMax) {
  DynamicLossScaler scaler(small_options());
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 2048.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4096.0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4096.0);  // max_scale
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(DynamicLossScaler, HysteresisDelaysTheFirstBackoffOnly) {
  DynamicLossScaler scaler(small_options());
  EXPECT_FALSE(scaler.update(true));  // tolerated: skipped, scale kept
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  EXPECT_FALSE(scaler.update(true));  // hysteresis exhausted: back off
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.hysteresis_left(), 0);
  EXPECT_FALSE(scaler.update(true));  // further overflows back off at once
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_TRUE(scaler.update(false));  // a clean step neither grows nor refills
  EXPECT_EQ(scaler.hysteresis_left(), 0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 128.0);
  EXPECT_EQ(scaler.skipped_steps(), 4);
  // Growth refills the hysteresis.
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256.0);
}

TEST(DynamicLossScaler, OverflowResetsGrowthTracker) {
  DynamicLossScaler scaler(small_options());
  scaler.update(false);
  scaler.update(false);
  scaler.update(true);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024.0);  // only 2 clean steps since the overflow
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 2048.0);
}

TEST(DynamicLossScaler, NeverBacksOffBelowMin) {
  DynamicLossScaler scaler(small_options().hysteresis(1));
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 64.0);
  EXPECT_EQ(scaler.skipped_steps(), 10);
}

TEST(DynamicLossScaler, ZeroHysteresisBacksOffAtOnce) {
  DynamicLossScaler scaler(small_options().hysteresis(0));
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512.0);
}

TEST(DynamicLossScaler, StateRoundTripResumesIdentically) {
  DynamicLossScaler a(small_options());
  for (bool overflow : {false, true, false, true, true, false}) a.update(overflow);
  const auto state = a.state_dict();
  EXPECT_EQ(state.at("scale"), a.scale());
  EXPECT_EQ(state.at("skipped_steps"), 3.0);

  DynamicLossScaler b(small_options());
  b.load_state_dict(state);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.hysteresis_left(), a.hysteresis_left());
  EXPECT_EQ(b.skipped_steps(), a.skipped_steps());
  for (bool overflow : {false, false, false, true, false, true, true}) {
    EXPECT_EQ(a.update(overflow), b.update(overflow));
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.hysteresis_left(), b.hysteresis_left());
  }
}

TEST(DynamicLossScaler, BadStateAndOptionsAreReported) {
  DynamicLossScaler scaler;
  auto state = scaler.state_dict();
  state.erase("hysteresis_left");
  EXPECT_THROW(scaler.load_state_dict(state), std::invalid_argument);
  state = scaler.state_dict();
  state["scale"] = 0.0;
  EXPECT_THROW(scaler.load_state_dict(state), std::invalid_argument);
  EXPECT_EQ(scaler.scale(), 65536.0);  // a failed load changes nothing

  try {
    DynamicLossScaler bad(LossScalerOptions().growth_factor(0.5).backoff_factor(2.0).min_scale(0));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();  // every violated rule at once
    EXPECT_NE(what.find("growth_factor"), std::string::npos) << what;
    EXPECT_NE(what.find("backoff_factor"), std::string::npos) << what;
    EXPECT_NE(what.find("min_scale"), std::string::npos) << what;
  }
}

TEST(DynamicLossScaler, ScalesLossAndDetectsOverflow) {
  DynamicLossScaler scaler(small_options());
  EXPECT_EQ(scaler.scale_loss(torch::tensor(0.5)).item<double>(), 512.0);
  EXPECT_EQ(scaler.inv_scale(), 1.0 / 1024.0);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.has_overflow({torch::randn({3}), torch::Tensor(), torch::randn({2, 2})}));
  EXPECT_TRUE(scaler.has_overflow({torch::randn({3}), torch::tensor({1.0f, inf})}));
  EXPECT_TRUE(scaler.has_overflow({torch::tensor({nan}), torch::randn({3})}));
  EXPECT_TRUE(scaler.has_overflow({torch::tensor({-inf}).to(torch::kHalf)}));
  EXPECT_FALSE(scaler.has_overflow({}));
}

// ---- unscale_and_clip ------------------------------------------------------------------------

std::vector<torch::Tensor> random_params(int64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{7, 5}, {5}, {3, 2, 4}, {1}}) {
    auto p = torch::randn(shape).requires_grad_();
    p.mutable_grad() = torch::randn(shape) * 3;
    params.push_back(p);
  }
  return params;
}

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  return grads;
}

TEST(UnscaleAndClip, MatchesTorchClipGradNorm) {
  for (double max_norm : {0.5, 4.0, 1000.0}) {
    auto ours = random_params(1);
    auto reference = random_params(1);
    const double expected = torch::nn::utils::clip_grad_norm_(reference, max_norm);
    const auto result = unscale_and_clip(grads_of(ours), 1.0, max_norm);
    EXPECT_FALSE(result.found_inf);
    EXPECT_NEAR(result.total_norm, expected, 1e-5 * expected);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i].grad(), reference[i].grad(), 1e-6, 1e-7)) << "max_norm " << max_norm;
    }
  }
}

TEST(UnscaleAndClip, UnscalesAndClipsInOneMultiply) {
  const double scale = 1024.0;
  auto ours = random_params(2);
  auto reference = random_params(2);
  for (auto& p : ours) p.mutable_grad().mul_(scale);
  const double expected = torch::nn::utils::clip_grad_norm_(reference, 1.0);
  const auto result = unscale_and_clip(grads_of(ours), 1.0 / scale, 1.0);
  EXPECT_NEAR(result.total_norm, expected, 1e-5 * expected);  // the norm of the unscaled gradients
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ours[i].grad(), reference[i].grad(), 1e-6, 1e-7));
  }
}

TEST(UnscaleAndClip, NonPositiveMaxNormOnlyUnscales) {
  auto ours = random_params(3);
  auto reference = random_params(3);
  for (auto& p : ours) p.mutable_grad().mul_(8.0);
  const auto result = unscale_and_clip(grads_of(ours), 0.125, 0.0);
  double sq = 0;
  for (auto& p : reference) sq += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(result.total_norm, std::sqrt(sq), 1e-5);
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(torch::allclose(ours[i].grad(), reference[i].grad()));
}

TEST(UnscaleAndClip, InfOrNanIsFoundAndLeavesGradientsUntouched) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto params = random_params(4);
    params[2].mutable_grad().view(-1)[5] = bad;
    std::vector<torch::Tensor> before;
    for (auto& p : params) before.push_back(p.grad().clone());
    const auto result = unscale_and_clip(grads_of(params), 0.5, 1.0);
    EXPECT_TRUE(result.found_inf);
    EXPECT_FALSE(std::isfinite(result.total_norm));
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i].grad().nan_to_num(), before[i].nan_to_num()));
    }
  }
}

TEST(UnscaleAndClip, Bf16GradientsAreNormedInFp32) {
  auto params = random_params(5);
  std::vector<torch::Tensor> bf16;
  double sq = 0;
  for (auto& p : params) {
    bf16.push_back(p.grad().to(torch::kBFloat16));
    sq += bf16.back().to(torch::kDouble).pow(2).sum().item<double>();
  }
  bf16.push_back(torch::Tensor());  // skipped
  const auto result = unscale_and_clip(bf16, 1.0, 0.0);
  EXPECT_NEAR(result.total_norm, std::sqrt(sq), 1e-5 * std::sqrt(sq));
  EXPECT_NEAR(grad_sq_norm(bf16).item<double>(), sq, 1e-5 * sq);
}

TEST(UnscaleAndClip, RejectsBadInverseScale) {
  auto params = random_params(6);
  EXPECT_THROW(unscale_and_clip(grads_of(params), 0.0, 1.0), std::invalid_argument);
  EXPECT_THROW(unscale_and_clip(grads_of(params), std::numeric_limits<double>::infinity(), 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace colo::amp
