// colo::amp across ranks: overflow found on one rank is seen by all; the clipping norm of
// gradients sharded over a group equals the norm of the whole gradient.
#include <colo/amp/amax_history.h>
#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/grad_clip.h>
#include <colo/dist/process_group.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "dist_test_env.h"

namespace colo::amp {
namespace {

using test::world;

// The whole gradient, identical on every rank (same seed), and this rank's disjoint shard.
torch::Tensor full_gradient() {
  torch::manual_seed(42);
  return (torch::randn({103}) * 5).to(test::device());
}

torch::Tensor my_shard(const torch::Tensor& full, const dist::ProcessGroup& group) {
  return full.tensor_split(group.size())[group.rank()].clone();
}

TEST(AmpDist, OverflowOnOneRankIsSeenByAll) {
  auto& g = *world();
  DynamicLossScaler scaler;
  EXPECT_FALSE(scaler.has_overflow({torch::randn({4}).to(test::device())}, &g));
  auto grad = torch::randn({4}).to(test::device());
  if (g.rank() == g.size() - 1) grad[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(scaler.has_overflow({grad}, &g)) << "rank " << g.rank();
  // Without the group, only the rank holding the inf knows.
  EXPECT_EQ(scaler.has_overflow({grad}), g.rank() == g.size() - 1);
}

// Delayed float8 scaling agreed over the ranks holding the same operands (issue 39): every rank
// takes the scale of the largest amax any rank saw, and drops a non-finite amax that one rank saw.
TEST(AmpDist, DelayedScalingAgreesOnTheLargestAmaxOfAnyRank) {
  auto& g = *world();
  AmaxHistory h(DelayedScalingOptions().history_length(2), 448.0, torch::TensorOptions().device(test::device()), 3);
  // Operand 0: rank r saw r + 1 (the last rank the most); operand 1: the last rank alone saw a NaN;
  // operand 2: the same on every rank.
  h.current_amax(0).fill_(static_cast<float>(g.rank() + 1));
  h.current_amax(1).fill_(g.rank() == g.size() - 1 ? std::numeric_limits<float>::quiet_NaN() : 2.0f);
  h.current_amax(2).fill_(4.0f);
  h.update({&g});
  const auto scale = h.scale().cpu();
  EXPECT_FLOAT_EQ(scale[0].item<float>(), 448.0f / static_cast<float>(g.size())) << "rank " << g.rank();
  EXPECT_FLOAT_EQ(scale[1].item<float>(), 1.0f) << "rank " << g.rank() << " kept an amax the last rank found non-finite";
  EXPECT_FLOAT_EQ(scale[2].item<float>(), 112.0f);
  EXPECT_EQ(h.nonfinite_amaxes().cpu()[1].item<int64_t>(), 1) << "rank " << g.rank();
  // Without the group each rank keeps its own.
  AmaxHistory alone(DelayedScalingOptions(), 448.0, torch::TensorOptions().device(test::device()));
  alone.current_amax().fill_(static_cast<float>(g.rank() + 1));
  alone.update();
  EXPECT_FLOAT_EQ(alone.scale().cpu()[0].item<float>(), 448.0f / static_cast<float>(g.rank() + 1));
}

TEST(AmpDist, ShardedClipMatchesWholeGradient) {
  auto& g = *world();
  const double scale = 256.0, max_norm = 10.0;
  const auto full = full_gradient();
  auto reference = full.clone().requires_grad_();
  reference.mutable_grad() = full.clone();
  const double expected_norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{reference}, max_norm);
  ASSERT_GT(expected_norm, max_norm);  // clipping happens

  auto shard = my_shard(full, g) * scale;
  const auto result = unscale_and_clip({shard}, 1.0 / scale, max_norm, GradNormPlan{{world()}, nullptr, nullptr});
  EXPECT_FALSE(result.found_inf);
  EXPECT_NEAR(result.total_norm, expected_norm, 1e-5 * expected_norm);
  EXPECT_TRUE(torch::allclose(shard, my_shard(reference.grad(), g), 1e-6, 1e-7));
}

TEST(AmpDist, InfInOneShardIsFoundEverywhere) {
  auto& g = *world();
  auto shard = my_shard(full_gradient(), g);
  if (g.rank() == 0) shard[0] = std::numeric_limits<float>::quiet_NaN();
  const auto before = shard.clone();
  const auto result = unscale_and_clip({shard}, 0.5, 1.0, GradNormPlan{{world()}, nullptr, nullptr});
  EXPECT_TRUE(result.found_inf) << "rank " << g.rank();
  EXPECT_TRUE(torch::equal(shard.nan_to_num(), before.nan_to_num()));  // untouched
}

}  // namespace
}  // namespace colo::amp
