// colo's ViT under 2D tensor parallelism (Vit2dSharder, vit_2d_policy.h) on 2×2 grids of four
// ranks against the same ViT unsharded in one process: one forward and backward, the logits
// (whole on every rank after the head's gather), the loss, and every parameter's gradient
// (a replaced one's blocks gathered over the grid and unsharded by its recorded cuts), with the
// gradient norm from the cuts (expect_sharded_vit_equals_one_process). Then the
// refusals' texts. At 8 ranks the world runs two independent grids; at 2 the cases skip.
// Helpers carry a vit2d_ prefix: the CUDA build compiles the test files as one unity unit.
#include <colo/dist/process_group.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/shard_spec.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/linear_2d.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp_mappings.h>
#include <colo/shardformer/vit_2d_policy.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::shardformer {
namespace {

using namespace test;

constexpr int kVit2dSide = 2;

#define VIT2D_REQUIRE_GRID()                                                                      \
  if (world()->size() % (kVit2dSide * kVit2dSide) != 0) {                                         \
    GTEST_SKIP() << "a 2x2 grid needs a multiple of 4 ranks, the world has " << world()->size(); \
  }

std::shared_ptr<Tp2dGrid> vit2d_grid(const std::string& name) {
  return std::make_shared<Tp2dGrid>(consecutive_group(kVit2dSide * kVit2dSide, name));
}



TEST(Vit2d, ForwardAndBackwardEqualOneProcess) {
  VIT2D_REQUIRE_GRID();
  const auto grid = vit2d_grid("vit2d_equal");
  torch::manual_seed(17);
  const auto images = torch::randn({4, 3, 16, 16}).to(device());
  const auto labels = torch::randint(0, 10, {4}, torch::kLong).to(device());
  auto reference = randomised_vit(grid_test_vit());
  auto model = randomised_vit(grid_test_vit());
  Vit2dSharder(grid).shard(*model);
  ShardedVitCheck check;
  check.logits_tolerance = 1e-5;
  expect_sharded_vit_equals_one_process(*model, *reference, consecutive_group(kVit2dSide * kVit2dSide, "vit2d_equal_tp"),
                                        images, labels, check);
  world()->barrier().wait();
}

// A 1 x 1 grid (tp_size 1) has nothing to split: the blocks keep their own LayerNorms (and with
// them the block's fused residual-and-norm path; LayerNorm2D at q = 1 is the same arithmetic in a
// dozen unfused kernels: 2D at tp_size 1 ran at 0.60x torch_ddp on one H200), the linears become
// Linear2D (a plain linear at q = 1), and the sharded model computes what the unsharded one does.
TEST(Vit2d, AOneByOneGridKeepsTheBlocksOwnLayerNorms) {
  const auto alone = world()->new_subgroup({world()->global_rank(world()->rank())}, "vit2d_alone");
  const auto grid = std::make_shared<Tp2dGrid>(alone);
  const auto config = grid_test_vit();
  torch::manual_seed(23);
  const auto images = torch::randn({3, 3, 16, 16}).to(device());
  auto reference = randomised_vit(config);
  auto model = randomised_vit(config);
  Vit2dSharder(grid).shard(*model);
  int blocks = 0;
  for (std::size_t k = 0; k < model->size(); ++k) {
    const auto& layer = *model->layer(k);
    if (layer.attention_heads() == 0) continue;
    ++blocks;
    for (const auto& item : layer.named_modules("", /*include_self=*/false)) {
      if (item.key() == "norm1" || item.key() == "norm2") {
        EXPECT_NE(std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(item.value()), nullptr)
            << layer.canonical_prefix() << item.key() << " was replaced";
      }
      if (item.key() == "attn.qkv") {
        EXPECT_NE(std::dynamic_pointer_cast<Linear2DImpl>(item.value()), nullptr) << "attn.qkv is not a Linear2D";
      }
    }
    EXPECT_EQ(layer.shard_cuts().count("norm1.weight"), 0u);
  }
  EXPECT_EQ(blocks, config.depth());
  torch::NoGradGuard no_grad;
  EXPECT_LE(relative_error(model->forward(images), reference->forward(images)), 1e-6);
  world()->barrier().wait();
}

// The problems' texts, and shard() refusing with them before it changes anything.
TEST(Vit2d, RefusesWhatDoesNotDivideAndSequenceParallelism) {
  VIT2D_REQUIRE_GRID();
  const auto grid = vit2d_grid("vit2d_refuse");
  const auto problems = [&](const nn::ViTConfig& config, bool sequence_parallel = false) {
    Vit2dOptions options;
    options.sequence_parallel = sequence_parallel;
    torch::manual_seed(1);
    return Vit2dSharder(grid, options).problems(*nn::make_vision_transformer(config));
  };
  using Texts = std::vector<std::string>;
  EXPECT_EQ(problems(grid_test_vit()), Texts{});
  EXPECT_EQ(problems(grid_test_vit().embed_dim(12).num_heads(3)),
            Texts{"tp_mode=2d on a 2×2 grid: 3 heads do not divide by q=2 (each grid column keeps whole heads): use a "
                  "q that divides 3"});
  EXPECT_EQ(problems(grid_test_vit().mlp_ratio(2.0625)),
            Texts{"tp_mode=2d on a 2×2 grid: the MLP's 33 hidden units do not divide by q=2: use a q that divides 33"});
  EXPECT_EQ(problems(grid_test_vit().embed_dim(9).num_heads(3).mlp_ratio(2.0)),
            (Texts{"tp_mode=2d on a 2×2 grid: the embedding width 9 does not divide by q=2 (each grid column keeps "
                   "D/q features): use a q that divides 9",
                   "tp_mode=2d on a 2×2 grid: 3 heads do not divide by q=2 (each grid column keeps whole heads): use "
                   "a q that divides 3"}));
  EXPECT_EQ(problems(grid_test_vit(), /*sequence_parallel=*/true),
            Texts{"tp_mode=2d on a 2×2 grid: sequence parallelism is not supported with 2d (the 2D blocks already "
                  "split every activation by batch rows and features); turn sequence parallelism off or use "
                  "tp_mode=1d"});

  expect_odd_mlp_refused_and_left_whole([&](nn::LayerStack& model) { Vit2dSharder(grid).shard(model); },
                                        "tensor parallelism over 4 ranks: tp_mode=2d on a 2×2 grid: the MLP's 33 hidden "
                                        "units do not divide by q=2: use a q that divides 33");
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo::shardformer
