// 2.5D tensor parallelism (Tesseract: tp25d_grid.h) at 8 ranks, q = 2 and depth d = 2: the grid's
// layers, rows, columns and depth groups; split_25d and gather_25d forward and backward against
// blocks written out here; Linear2D and LayerNorm2D on a layer's grid with the depth group against
// one colo::nn::linear and torch's layer_norm on the whole tensors; colo's ViT sharded by
// Vit25dSharder against the same ViT in one process (logits, loss, every gradient, and the
// gradient norm counting each block once by its cuts); one layer (d = 1) as 2D exactly; the
// refusals' texts. The world is the tp group: at any other world size the cases skip.
// Helpers carry a vit25d_ prefix: the CUDA build compiles the test files as one unity unit.
#include <colo/amp/grad_clip.h>
#include <colo/dist/process_group.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/linear.h>
#include <colo/nn/shard_spec.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/layer_norm_2d.h>
#include <colo/shardformer/linear_2d.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp25d_mappings.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp_mappings.h>
#include <colo/shardformer/vit_25d_policy.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::shardformer {
namespace {

using namespace test;

constexpr int kVit25dSide = 2;   // q
constexpr int kVit25dDepth = 2;  // d: 2 layers of a 2×2 grid, 8 ranks
constexpr int kVit25dRanks = kVit25dSide * kVit25dSide * kVit25dDepth;

// Every case runs its collectives on all 8 ranks or on none.
#define VIT25D_REQUIRE_EIGHT()                                                                                  \
  if (world()->size() != kVit25dRanks) {                                                                        \
    GTEST_SKIP() << "2.5D's cases run on 2 layers of a 2x2 grid: 8 ranks, the world has " << world()->size(); \
  }

std::shared_ptr<Tp25dGrid> vit25d_grid(const std::string& name) {
  return std::make_shared<Tp25dGrid>(consecutive_group(kVit25dRanks, name), kVit25dDepth);
}

// The same random tensor on every rank.
torch::Tensor vit25d_random(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape).to(device());
}

void vit25d_expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double tol) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LE(relative_error(got.cpu(), want.cpu()), tol) << what;
}

// Rank (l, i, j)'s block of a whole activation [B, ..., H], written out with narrow (not through
// the code under test): batch block l·q + i of d·q, feature block j (cut with `parts`, as a fused
// layer's features are).
torch::Tensor vit25d_block(const torch::Tensor& whole, const Tp25dGrid& grid, int64_t parts = 1) {
  const int64_t q = grid.q();
  const int64_t rows = whole.size(0) / (grid.depth() * q);
  const auto batch = whole.narrow(0, (grid.layer() * q + grid.row()) * rows, rows);
  const int64_t part = whole.size(-1) / parts;
  const int64_t piece = part / q;
  std::vector<torch::Tensor> pieces;
  for (int64_t p = 0; p < parts; ++p) pieces.push_back(batch.narrow(-1, p * part + grid.column() * piece, piece));
  return torch::cat(pieces, -1).contiguous();
}

// `local` is the same on every rank of `group` (a depth replica's gradient).
void vit25d_expect_same_over(const torch::Tensor& local, dist::ProcessGroup& group, const std::string& what) {
  const auto pieces = pieces_over(local, group);
  for (std::size_t k = 1; k < pieces.size(); ++k) {
    EXPECT_TRUE(torch::equal(pieces[k].cpu(), pieces[0].cpu())) << what << ": layer " << k << " differs from layer 0";
  }
}

TEST(Vit25d, GridPutsRankRAtLayerRowAndColumn) {
  VIT25D_REQUIRE_EIGHT();
  const auto grid = vit25d_grid("vit25d_grid");
  const int r = grid->tp().rank(), q = kVit25dSide, layer_size = q * q;
  EXPECT_EQ(grid->q(), q);
  EXPECT_EQ(grid->depth(), kVit25dDepth);
  EXPECT_EQ(grid->layer(), r / layer_size);
  EXPECT_EQ(grid->row(), (r % layer_size) / q);
  EXPECT_EQ(grid->column(), r % q);
  std::vector<int> layer, depth, row;
  for (int k = 0; k < layer_size; ++k) layer.push_back(grid->tp().global_rank(grid->layer() * layer_size + k));
  for (int l = 0; l < kVit25dDepth; ++l) depth.push_back(grid->tp().global_rank(l * layer_size + r % layer_size));
  for (int c = 0; c < q; ++c) row.push_back(grid->tp().global_rank(grid->layer() * layer_size + grid->row() * q + c));
  EXPECT_EQ(grid->layer_grid()->tp().global_ranks(), layer);
  EXPECT_EQ(grid->depth_group()->global_ranks(), depth);
  EXPECT_EQ(grid->depth_group()->rank(), grid->layer());
  EXPECT_EQ(grid->layer_grid()->row_group().global_ranks(), row);
  world()->barrier().wait();
}

TEST(Vit25d, SplitAndGatherForwardAndBackward) {
  VIT25D_REQUIRE_EIGHT();
  const auto grid = vit25d_grid("vit25d_maps");
  const auto whole = vit25d_random({8, 3, 6}, 1);
  const auto whole_grad = vit25d_random({8, 3, 6}, 2);

  // split_25d: batch block l·q + i, feature block j; backward, every block's gradient in place.
  auto x = whole.clone().requires_grad_();
  auto block = split_25d(x, *grid);
  vit25d_expect_close(block, vit25d_block(whole, *grid), "split_25d forward", 0);
  block.backward(vit25d_block(whole_grad, *grid));
  vit25d_expect_close(x.grad(), whole_grad, "split_25d backward: every block's gradient in its place", 0);

  // gather_25d: the whole; backward, this rank's block of the (replicated) gradient.
  auto mine = vit25d_block(whole, *grid).requires_grad_();
  auto gathered = gather_25d(mine, *grid);
  vit25d_expect_close(gathered, whole, "gather_25d forward", 0);
  gathered.backward(whole_grad);
  vit25d_expect_close(mine.grad(), vit25d_block(whole_grad, *grid), "gather_25d backward", 0);
  world()->barrier().wait();
}

// Linear2D on a layer's grid with the depth group against one colo::nn::linear on the whole
// tensors: output block, input-gradient block, and the weight and bias gradients, whole from the
// tp group's pieces as a checkpoint reads them, and equal over the depth group.
TEST(Vit25d, LinearOnALayerWithTheDepthGroupEqualsOneLinear) {
  VIT25D_REQUIRE_EIGHT();
  struct Case {
    bool bias;
    int64_t parts;
  };
  for (const auto& c : {Case{true, 1}, Case{false, 1}, Case{true, 3}}) {
    SCOPED_TRACE(fmt::format("bias {} parts {}", c.bias, c.parts));
    const auto grid = vit25d_grid("vit25d_linear");
    constexpr int64_t kBatch = 8, kSeq = 3, kIn = 8, kOut = 12;
    const auto w = vit25d_random({kOut, kIn}, 11), b = vit25d_random({kOut}, 12);
    const auto x = vit25d_random({kBatch, kSeq, kIn}, 13), gy = vit25d_random({kBatch, kSeq, kOut}, 14);

    auto rw = w.clone().requires_grad_(), rb = b.clone().requires_grad_();
    auto rx = x.clone().requires_grad_();
    auto ry = nn::linear(rx, rw, c.bias ? rb : torch::Tensor());
    ry.backward(gy);

    auto weight = w.clone().requires_grad_();
    auto bias = c.bias ? b.clone().requires_grad_() : torch::Tensor();
    Linear2D layer(weight, bias, grid->layer_grid(), Linear2DOptions().parts(c.parts).depth(grid->depth_group()));
    EXPECT_TRUE(layer->weight.is_same(weight)) << "the same tensor, cut in place";
    EXPECT_EQ(layer->weight.sizes(), (std::vector<int64_t>{kOut / 2, kIn / 2}));
    auto xb = vit25d_block(x, *grid).requires_grad_();
    auto y = layer(xb);
    vit25d_expect_close(y, vit25d_block(ry.detach(), *grid, c.parts), "output block", 1e-6);
    y.backward(vit25d_block(gy, *grid, c.parts));
    vit25d_expect_close(xb.grad(), vit25d_block(rx.grad(), *grid), "input gradient block", 1e-5);
    vit25d_expect_close(whole_from_pieces(layer->weight.grad(), layer->weight_cuts(), grid->tp()), rw.grad(),
                        "weight gradient", 1e-5);
    vit25d_expect_same_over(layer->weight.grad(), *grid->depth_group(), "weight gradient");
    if (c.bias) {
      vit25d_expect_close(whole_from_pieces(layer->bias.grad(), layer->bias_cuts(), grid->tp()), rb.grad(),
                          "bias gradient", 1e-5);
      vit25d_expect_same_over(layer->bias.grad(), *grid->depth_group(), "bias gradient");
    } else {
      EXPECT_FALSE(layer->bias.defined());
    }
  }
  world()->barrier().wait();
}

TEST(Vit25d, LayerNormOnALayerWithTheDepthGroupEqualsOneLayerNorm) {
  VIT25D_REQUIRE_EIGHT();
  const auto grid = vit25d_grid("vit25d_norm");
  constexpr int64_t kHidden = 8;
  constexpr double kEps = 1e-6;
  const auto w = vit25d_random({kHidden}, 31), b = vit25d_random({kHidden}, 32);
  // An offset and a scale, so that the mean and the variance both matter.
  const auto x = vit25d_random({8, 3, kHidden}, 33) * 3 + 1, gy = vit25d_random({8, 3, kHidden}, 34);

  auto rw = w.clone().requires_grad_(), rb = b.clone().requires_grad_();
  auto rx = x.clone().requires_grad_();
  auto ry = torch::layer_norm(rx, {kHidden}, rw, rb, kEps);
  ry.backward(gy);

  auto weight = w.clone().requires_grad_();
  LayerNorm2D norm(weight, b.clone().requires_grad_(), grid->layer_grid(),
                   LayerNorm2DOptions().eps(kEps).depth(grid->depth_group()));
  EXPECT_TRUE(norm->weight.is_same(weight));
  auto xb = vit25d_block(x, *grid).requires_grad_();
  auto y = norm(xb);
  vit25d_expect_close(y, vit25d_block(ry.detach(), *grid), "output block", 1e-6);
  y.backward(vit25d_block(gy, *grid));
  vit25d_expect_close(xb.grad(), vit25d_block(rx.grad(), *grid), "input gradient block", 1e-5);
  vit25d_expect_close(whole_from_pieces(norm->weight.grad(), norm->weight_cuts(), grid->tp()), rw.grad(), "weight gradient",
                      1e-5);
  vit25d_expect_close(whole_from_pieces(norm->bias.grad(), norm->bias_cuts(), grid->tp()), rb.grad(), "bias gradient", 1e-5);
  vit25d_expect_same_over(norm->weight.grad(), *grid->depth_group(), "weight gradient");
  vit25d_expect_same_over(norm->bias.grad(), *grid->depth_group(), "bias gradient");
  world()->barrier().wait();
}



// One forward and backward of a batch of 8 (two samples a layer and row: 8 / (d·q) = 2); every
// replaced parameter's gradient equal over the depth group.
TEST(Vit25d, ShardedVitEqualsOneProcess) {
  VIT25D_REQUIRE_EIGHT();
  const auto grid = vit25d_grid("vit25d_equal");
  torch::manual_seed(17);
  const auto images = torch::randn({8, 3, 16, 16}).to(device());
  const auto labels = torch::randint(0, 10, {8}, torch::kLong).to(device());
  auto reference = randomised_vit(grid_test_vit());
  auto model = randomised_vit(grid_test_vit());
  Vit25dSharder(grid).shard(*model);
  ShardedVitCheck check;
  check.each_cut = [&](const torch::Tensor& local, const torch::Tensor&, const std::vector<nn::ShardSpec>&,
                       const std::string& name) { vit25d_expect_same_over(local, *grid->depth_group(), name); };
  expect_sharded_vit_equals_one_process(*model, *reference, consecutive_group(kVit25dRanks, "vit25d_norm_tp"), images,
                                        labels, check);
  world()->barrier().wait();
}

// One layer (tp_depth 1) is 2D exactly: no depth group in the modules (Linear2D at q = 1 keeps
// colo::nn::linear's deferrable path), and the sharded ViT computes the whole one's logits. The 8
// ranks run two such grids of 4 side by side.
TEST(Vit25d, ADepthOfOneIsTwoD) {
  VIT25D_REQUIRE_EIGHT();
  const auto grid = std::make_shared<Tp25dGrid>(consecutive_group(4, "vit25d_one_layer"), 1);
  EXPECT_EQ(grid->q(), 2);
  EXPECT_EQ(grid->depth_group()->size(), 1);
  EXPECT_EQ(grid->layer_grid()->tp().global_ranks(), grid->tp().global_ranks()) << "the layer is the tp group";
  const auto config = grid_test_vit();
  torch::manual_seed(29);
  const auto images = torch::randn({4, 3, 16, 16}).to(device());
  auto reference = randomised_vit(config);
  auto model = randomised_vit(config);
  Vit25dSharder(grid).shard(*model);
  int linears = 0;
  for (std::size_t k = 0; k < model->size(); ++k) {
    for (const auto& item : model->layer(k)->named_modules("", /*include_self=*/false)) {
      if (const auto linear = std::dynamic_pointer_cast<Linear2DImpl>(item.value())) {
        ++linears;
        EXPECT_EQ(linear->options().depth(), nullptr) << item.key() << " has a depth group of one rank";
      }
    }
  }
  EXPECT_EQ(linears, config.depth() * 4);
  torch::NoGradGuard no_grad;
  EXPECT_LE(relative_error(model->forward(images), reference->forward(images)), 1e-6);
  world()->barrier().wait();
}

TEST(Vit25d, RefusesSizesThatAreNotQSquaredTimesDepth) {
  VIT25D_REQUIRE_EIGHT();
  const auto refusal = [](int tp_size, int depth) {
    try {
      Tp25dGrid::side_and_depth_of(tp_size, depth);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(12, 2),
            "tp_mode=2.5d with tp_depth=2 needs tp_size = q² × 2 (2 layers of a q × q grid), got 12: use 8 or 18");
  EXPECT_EQ(refusal(8, 3),
            "tp_mode=2.5d with tp_depth=3 needs tp_size = q² × 3 (3 layers of a q × q grid), got 8: use 3 or 12");
  EXPECT_EQ(refusal(2, 4),
            "tp_mode=2.5d with tp_depth=4 needs tp_size = q² × 4 (4 layers of a q × q grid), got 2: use 4");
  EXPECT_EQ(refusal(8, 0), "tp_depth must be at least 1, got 0");
  EXPECT_EQ(refusal(8, 2), "accepted");
  EXPECT_EQ(Tp25dGrid::side_and_depth_of(18, 2).q, 3);
  EXPECT_EQ(Tp25dGrid::side_and_depth_of(4, 1).q, 2) << "depth 1 is 2D";
  // On the real group of 8 ranks, a depth of 3 is refused before any group is created.
  try {
    Tp25dGrid grid(consecutive_group(kVit25dRanks, "vit25d_depth3"), 3);
    ADD_FAILURE() << "8 ranks were cut into 3 layers";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "tp_mode=2.5d with tp_depth=3 needs tp_size = q² × 3 (3 layers of a q × q grid), got 8: use 3 or 12");
  }
  // A batch that does not split over the d·q = 4 layer rows.
  const auto grid = vit25d_grid("vit25d_batch");
  try {
    split_25d(vit25d_random({6, 3, 8}, 3), *grid);
    ADD_FAILURE() << "a batch of 6 was split 4 ways";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "2.5D tensor parallelism: a tensor of shape [6, 3, 8] does not split into 4 x 2 blocks (dim 0 must be "
              "a multiple of d·q = 4, the last dim of q = 2)");
  }
  world()->barrier().wait();
}

// The problems' texts, and shard() refusing with them before it changes anything.
TEST(Vit25d, RefusesWhatDoesNotDivideAndSequenceParallelism) {
  VIT25D_REQUIRE_EIGHT();
  const auto grid = vit25d_grid("vit25d_refuse");
  const auto problems = [&](const nn::ViTConfig& config, bool sequence_parallel = false) {
    Vit25dOptions options;
    options.sequence_parallel = sequence_parallel;
    torch::manual_seed(1);
    return Vit25dSharder(grid, options).problems(*nn::make_vision_transformer(config));
  };
  using Texts = std::vector<std::string>;
  EXPECT_EQ(problems(grid_test_vit()), Texts{});
  EXPECT_EQ(problems(grid_test_vit().embed_dim(12).num_heads(3)),
            Texts{"tp_mode=2.5d on 2 layers of a 2×2 grid: 3 heads do not divide by q=2 (each grid column keeps "
                  "whole heads): use a q that divides 3"});
  EXPECT_EQ(problems(grid_test_vit(), /*sequence_parallel=*/true),
            Texts{"tp_mode=2.5d on 2 layers of a 2×2 grid: sequence parallelism is not supported with 2.5d (the 2.5D "
                  "blocks already split every activation by batch rows and features); turn sequence parallelism off "
                  "or use tp_mode=1d"});

  expect_odd_mlp_refused_and_left_whole([&](nn::LayerStack& model) { Vit25dSharder(grid).shard(model); },
                                        "tensor parallelism over 8 ranks: tp_mode=2.5d on 2 layers of a 2×2 grid: the MLP's 33 hidden units do "
      "not divide by q=2: use a q that divides 33");
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo::shardformer
