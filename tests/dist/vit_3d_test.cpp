// 3D tensor parallelism (tp3d_grid.h) at 8 ranks, a 2×2×2 cube: the cube's coordinates, axis and
// plane groups; split_3d and gather_3d forward and backward against blocks written out here;
// Linear3D (both layouts, fused qkv, without bias) and LayerNorm3D against one colo::nn::linear and
// torch's layer_norm on the whole tensors; colo's ViT sharded by Vit3dSharder against the same ViT
// in one process (logits, loss, every gradient, and the gradient norm counting each piece once by
// its cuts); the refusals' texts. The world is the tp group: at any other world size the cases
// skip. Helpers carry a vit3d_ prefix: the CUDA build compiles the test files as one unity unit.
#include <colo/amp/grad_clip.h>
#include <colo/dist/process_group.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/linear.h>
#include <colo/nn/shard_spec.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/layer_norm_3d.h>
#include <colo/shardformer/linear_3d.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/tp3d_mappings.h>
#include <colo/shardformer/tp_mappings.h>
#include <colo/shardformer/vit_3d_policy.h>
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

constexpr int kVit3dSide = 2;  // q: a 2×2×2 cube, 8 ranks
constexpr int kVit3dRanks = kVit3dSide * kVit3dSide * kVit3dSide;

#define VIT3D_REQUIRE_EIGHT()                                                                             \
  if (world()->size() != kVit3dRanks) {                                                                   \
    GTEST_SKIP() << "3D's cases run on a 2x2x2 cube: 8 ranks, the world has " << world()->size();         \
  }

std::shared_ptr<Tp3dGrid> vit3d_grid(const std::string& name) {
  return std::make_shared<Tp3dGrid>(consecutive_group(kVit3dRanks, name));
}

// The same random tensor on every rank.
torch::Tensor vit3d_random(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape).to(device());
}

void vit3d_expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double tol) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LE(relative_error(got.cpu(), want.cpu()), tol) << what;
}

// This rank's block of a whole activation [B, ..., H] in `layout`, written out with narrow from
// the coordinates (not through the code under test): outer, rows block j·q + k of q² and features
// block i; inner, rows j·q + i and features k (cut with `parts`, as a fused layer's features are).
torch::Tensor vit3d_block(const torch::Tensor& whole, const Tp3dGrid& grid, Tp3dLayout layout, int64_t parts = 1) {
  const int64_t q = grid.q();
  const bool outer = layout == Tp3dLayout::kOuter;
  const int64_t row_block = grid.j() * q + (outer ? grid.k() : grid.i());
  const int64_t feature_block = outer ? grid.i() : grid.k();
  const int64_t rows = whole.size(0) / (q * q);
  const auto batch = whole.narrow(0, row_block * rows, rows);
  const int64_t part = whole.size(-1) / parts;
  const int64_t piece = part / q;
  std::vector<torch::Tensor> pieces;
  for (int64_t p = 0; p < parts; ++p) pieces.push_back(batch.narrow(-1, p * part + feature_block * piece, piece));
  return torch::cat(pieces, -1).contiguous();
}

// Every rank's piece is the one its cuts name (a repeated piece equals its first holder's).
void vit3d_expect_pieces_repeat(const torch::Tensor& local, const torch::Tensor& whole,
                                const std::vector<nn::ShardSpec>& cuts, const std::string& what) {
  EXPECT_TRUE(torch::allclose(local.cpu(), nn::shard_of(whole, cuts).cpu(), 1e-6, 1e-6)) << what;
}

TEST(Vit3d, CubePutsRankRAtIJKWithItsAxesAndPlanes) {
  VIT3D_REQUIRE_EIGHT();
  const auto grid = vit3d_grid("vit3d_cube");
  const int r = grid->tp().rank(), q = kVit3dSide;
  EXPECT_EQ(grid->q(), q);
  EXPECT_EQ(grid->i(), r / (q * q));
  EXPECT_EQ(grid->j(), (r / q) % q);
  EXPECT_EQ(grid->k(), r % q);
  const auto global = [&](int i, int j, int k) { return grid->tp().global_rank((i * q + j) * q + k); };
  std::vector<int> i_line, j_line, k_line, jk, ij;
  for (int a = 0; a < q; ++a) {
    i_line.push_back(global(a, grid->j(), grid->k()));
    j_line.push_back(global(grid->i(), a, grid->k()));
    k_line.push_back(global(grid->i(), grid->j(), a));
    for (int b = 0; b < q; ++b) {
      jk.push_back(global(grid->i(), a, b));
      ij.push_back(global(a, b, grid->k()));
    }
  }
  EXPECT_EQ(grid->i_group().global_ranks(), i_line);
  EXPECT_EQ(grid->j_group().global_ranks(), j_line);
  EXPECT_EQ(grid->k_group().global_ranks(), k_line);
  EXPECT_EQ(grid->jk_plane().global_ranks(), jk);
  EXPECT_EQ(grid->ij_plane().global_ranks(), ij);
  EXPECT_EQ(&grid->feature_group(Tp3dLayout::kOuter), &grid->i_group());
  EXPECT_EQ(&grid->row_group(Tp3dLayout::kOuter), &grid->k_group());
  EXPECT_EQ(&grid->feature_group(Tp3dLayout::kInner), &grid->k_group());
  EXPECT_EQ(&grid->row_group(Tp3dLayout::kInner), &grid->i_group());
  EXPECT_EQ(grid->row_block(Tp3dLayout::kOuter), grid->j() * q + grid->k());
  EXPECT_EQ(grid->row_block(Tp3dLayout::kInner), grid->j() * q + grid->i());
  world()->barrier().wait();
}

TEST(Vit3d, SplitAndGatherForwardAndBackward) {
  VIT3D_REQUIRE_EIGHT();
  const auto grid = vit3d_grid("vit3d_maps");
  const auto whole = vit3d_random({8, 3, 6}, 1);
  const auto whole_grad = vit3d_random({8, 3, 6}, 2);

  auto x = whole.clone().requires_grad_();
  auto block = split_3d(x, *grid);
  vit3d_expect_close(block, vit3d_block(whole, *grid, Tp3dLayout::kOuter), "split_3d forward", 0);
  block.backward(vit3d_block(whole_grad, *grid, Tp3dLayout::kOuter));
  vit3d_expect_close(x.grad(), whole_grad, "split_3d backward: every block's gradient in its place", 0);

  auto mine = vit3d_block(whole, *grid, Tp3dLayout::kOuter).requires_grad_();
  auto gathered = gather_3d(mine, *grid);
  vit3d_expect_close(gathered, whole, "gather_3d forward", 0);
  gathered.backward(whole_grad);
  vit3d_expect_close(mine.grad(), vit3d_block(whole_grad, *grid, Tp3dLayout::kOuter), "gather_3d backward", 0);

  // gather_pieces: the plane's pieces in its rank order; backward, the sum over the plane's
  // (different) gradients, this rank's piece of it.
  const int plane_rank = grid->jk_plane().rank();
  auto piece = whole.flatten().narrow(0, plane_rank * 4, 4).clone().requires_grad_();
  auto joined = gather_pieces(piece, grid->jk_plane());
  vit3d_expect_close(joined, whole.flatten().narrow(0, 0, 16), "gather_pieces forward", 0);
  const auto grads = vit3d_random({4, 16}, 3);  // rank p of the plane passes row p
  joined.backward(grads[plane_rank]);
  vit3d_expect_close(piece.grad(), grads.sum(0).narrow(0, plane_rank * 4, 4), "gather_pieces backward", 1e-6);
  world()->barrier().wait();
}

// Linear3D against one colo::nn::linear on the whole tensors: the output block (in the other
// layout), the input-gradient block, and the weight and bias gradients, whole from the tp group's
// pieces as a checkpoint reads them, every rank's piece the one its cuts name.
TEST(Vit3d, LinearInEitherLayoutEqualsOneLinear) {
  VIT3D_REQUIRE_EIGHT();
  struct Case {
    Tp3dLayout input;
    bool bias;
    int64_t parts;
  };
  for (const auto& c : {Case{Tp3dLayout::kOuter, true, 1}, Case{Tp3dLayout::kOuter, false, 1},
                        Case{Tp3dLayout::kOuter, true, 3}, Case{Tp3dLayout::kInner, true, 1},
                        Case{Tp3dLayout::kInner, false, 1}}) {
    const bool outer = c.input == Tp3dLayout::kOuter;
    SCOPED_TRACE(fmt::format("{} input, bias {}, parts {}", outer ? "outer" : "inner", c.bias, c.parts));
    const auto grid = vit3d_grid("vit3d_linear");
    const auto output = outer ? Tp3dLayout::kInner : Tp3dLayout::kOuter;
    constexpr int64_t kBatch = 8, kSeq = 3, kIn = 8, kOut = 24;
    const auto w = vit3d_random({kOut, kIn}, 11), b = vit3d_random({kOut}, 12);
    const auto x = vit3d_random({kBatch, kSeq, kIn}, 13), gy = vit3d_random({kBatch, kSeq, kOut}, 14);

    auto rw = w.clone().requires_grad_(), rb = b.clone().requires_grad_();
    auto rx = x.clone().requires_grad_();
    auto ry = nn::linear(rx, rw, c.bias ? rb : torch::Tensor());
    ry.backward(gy);

    auto weight = w.clone().requires_grad_();
    auto bias = c.bias ? b.clone().requires_grad_() : torch::Tensor();
    Linear3D layer(weight, bias, grid, Linear3DOptions().input(c.input).parts(c.parts));
    EXPECT_TRUE(layer->weight.is_same(weight)) << "the same tensor, cut in place";
    EXPECT_EQ(layer->weight.sizes(), outer ? (std::vector<int64_t>{kOut / 2, kIn / 4})
                                           : (std::vector<int64_t>{kOut / 4, kIn / 2}));
    auto xb = vit3d_block(x, *grid, c.input).requires_grad_();
    auto y = layer(xb);
    vit3d_expect_close(y, vit3d_block(ry.detach(), *grid, output, c.parts), "output block", 1e-6);
    y.backward(vit3d_block(gy, *grid, output, c.parts));
    vit3d_expect_close(xb.grad(), vit3d_block(rx.grad(), *grid, c.input), "input gradient block", 1e-5);
    vit3d_expect_close(whole_from_pieces(layer->weight.grad(), layer->weight_cuts(), grid->tp()), rw.grad(),
                       "weight gradient", 1e-5);
    vit3d_expect_pieces_repeat(layer->weight.grad(), rw.grad(), layer->weight_cuts(), "weight gradient piece");
    if (c.bias) {
      EXPECT_EQ(nn::pieces_of(layer->bias_cuts()), outer ? 2 : 8);
      vit3d_expect_close(whole_from_pieces(layer->bias.grad(), layer->bias_cuts(), grid->tp()), rb.grad(), "bias gradient",
                         1e-5);
      vit3d_expect_pieces_repeat(layer->bias.grad(), rb.grad(), layer->bias_cuts(), "bias gradient piece");
    } else {
      EXPECT_FALSE(layer->bias.defined());
    }
  }
  world()->barrier().wait();
}

TEST(Vit3d, LayerNormOnTheResidualLayoutEqualsOneLayerNorm) {
  VIT3D_REQUIRE_EIGHT();
  const auto grid = vit3d_grid("vit3d_norm");
  constexpr int64_t kHidden = 16;
  constexpr double kEps = 1e-6;
  const auto w = vit3d_random({kHidden}, 31), b = vit3d_random({kHidden}, 32);
  // An offset and a scale, so that the mean and the variance both matter.
  const auto x = vit3d_random({8, 3, kHidden}, 33) * 3 + 1, gy = vit3d_random({8, 3, kHidden}, 34);

  auto rw = w.clone().requires_grad_(), rb = b.clone().requires_grad_();
  auto rx = x.clone().requires_grad_();
  auto ry = torch::layer_norm(rx, {kHidden}, rw, rb, kEps);
  ry.backward(gy);

  auto weight = w.clone().requires_grad_();
  LayerNorm3D norm(weight, b.clone().requires_grad_(), grid, LayerNorm3DOptions().eps(kEps));
  EXPECT_TRUE(norm->weight.is_same(weight));
  EXPECT_EQ(norm->weight.sizes(), (std::vector<int64_t>{kHidden / 8}));
  auto xb = vit3d_block(x, *grid, Tp3dLayout::kOuter).requires_grad_();
  auto y = norm(xb);
  vit3d_expect_close(y, vit3d_block(ry.detach(), *grid, Tp3dLayout::kOuter), "output block", 1e-6);
  y.backward(vit3d_block(gy, *grid, Tp3dLayout::kOuter));
  vit3d_expect_close(xb.grad(), vit3d_block(rx.grad(), *grid, Tp3dLayout::kOuter), "input gradient block", 1e-5);
  vit3d_expect_close(whole_from_pieces(norm->weight.grad(), norm->weight_cuts(), grid->tp()), rw.grad(), "weight gradient",
                     1e-5);
  vit3d_expect_close(whole_from_pieces(norm->bias.grad(), norm->bias_cuts(), grid->tp()), rb.grad(), "bias gradient", 1e-5);
  world()->barrier().wait();
}



// One forward and backward of a batch of 8 (two samples a row block of q² = 4); every rank's
// piece of a replaced parameter's gradient is the one its cuts name.
TEST(Vit3d, ShardedVitEqualsOneProcess) {
  VIT3D_REQUIRE_EIGHT();
  const auto grid = vit3d_grid("vit3d_equal");
  torch::manual_seed(17);
  const auto images = torch::randn({8, 3, 16, 16}).to(device());
  const auto labels = torch::randint(0, 10, {8}, torch::kLong).to(device());
  auto reference = randomised_vit(grid_test_vit());
  auto model = randomised_vit(grid_test_vit());
  Vit3dSharder(grid).shard(*model);
  ShardedVitCheck check;
  check.each_cut = [](const torch::Tensor& local, const torch::Tensor& want, const std::vector<nn::ShardSpec>& cuts,
                      const std::string& name) { vit3d_expect_pieces_repeat(local, want, cuts, name + " piece"); };
  expect_sharded_vit_equals_one_process(*model, *reference, consecutive_group(kVit3dRanks, "vit3d_equal_tp"), images,
                                        labels, check);
  world()->barrier().wait();
}

TEST(Vit3d, RefusesSizesThatAreNotCubes) {
  VIT3D_REQUIRE_EIGHT();
  const auto refusal = [](int tp_size) {
    try {
      Tp3dGrid::side_of(tp_size);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(4), "tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 4: use 1 or 8");
  EXPECT_EQ(refusal(26), "tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 26: use 8 or 27");
  EXPECT_EQ(refusal(8), "accepted");
  EXPECT_EQ(refusal(1), "accepted");
  EXPECT_EQ(Tp3dGrid::side_of(27), 3);
  // On a real group of 4 ranks, refused before any group is created.
  try {
    Tp3dGrid grid(consecutive_group(4, "vit3d_four"));
    ADD_FAILURE() << "4 ranks were made a cube";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 4: use 1 or 8");
  }
  // A batch that does not split over the q² = 4 row blocks.
  const auto grid = vit3d_grid("vit3d_batch");
  try {
    split_3d(vit3d_random({6, 3, 8}, 3), *grid);
    ADD_FAILURE() << "a batch of 6 was split 4 ways";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "3D tensor parallelism: a tensor of shape [6, 3, 8] does not split into 4 x 2 blocks (dim 0 must be a "
              "multiple of q² = 4, the last dim of q = 2)");
  }
  try {
    Linear3D bad(vit3d_random({12, 8}, 4), torch::Tensor(), grid, Linear3DOptions().input(Tp3dLayout::kInner).parts(3));
    ADD_FAILURE() << "a fused layer took the inner layout";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "Linear3D: a fused layer (parts > 1) must take the outer layout (its output "
                                     "features are cut by k alone)");
  }
  world()->barrier().wait();
}

// The problems' texts, and shard() refusing with them before it changes anything.
TEST(Vit3d, RefusesWhatDoesNotDivideAndSequenceParallelism) {
  VIT3D_REQUIRE_EIGHT();
  const auto grid = vit3d_grid("vit3d_refuse");
  const auto problems = [&](const nn::ViTConfig& config, bool sequence_parallel = false) {
    Vit3dOptions options;
    options.sequence_parallel = sequence_parallel;
    torch::manual_seed(1);
    return Vit3dSharder(grid, options).problems(*nn::make_vision_transformer(config));
  };
  using Texts = std::vector<std::string>;
  EXPECT_EQ(problems(grid_test_vit()), Texts{});
  // 12 features divide by q = 2 but not by q³ = 8; 3 heads not by q.
  EXPECT_EQ(problems(grid_test_vit().embed_dim(12).num_heads(3)),
            (Texts{"tp_mode=3d on a 2×2×2 cube: the embedding width 12 does not divide by 8 (q³: the LayerNorms and "
                   "the residual-side biases keep D/q³ features a rank): use a q whose cube divides 12",
                   "tp_mode=3d on a 2×2×2 cube: 3 heads do not divide by q=2 (each k slice of the cube keeps whole "
                   "heads): use a q that divides 3"}));
  EXPECT_EQ(problems(grid_test_vit(), /*sequence_parallel=*/true),
            Texts{"tp_mode=3d on a 2×2×2 cube: sequence parallelism is not supported with 3d (the 3D blocks already "
                  "split every activation by batch rows and features); turn sequence parallelism off or use "
                  "tp_mode=1d"});

  expect_odd_mlp_refused_and_left_whole([&](nn::LayerStack& model) { Vit3dSharder(grid).shard(model); },
                                        "tensor parallelism over 8 ranks: tp_mode=3d on a 2×2×2 cube: the MLP's 33 hidden units do not divide "
      "by q=2: use a q that divides 33");
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo::shardformer
