// docs/tensor_parallel_modes.md against the code: one encoder block of colo's ViT, sharded 1D
// over four ranks (two in a world of two), 2D on a 2×2 grid, 2.5D on 2 layers of one and 3D on a
// 2×2×2 cube (8 ranks), runs a forward and a backward
// while its groups count what they move (ProcessGroup::traffic); the counts must be the cost
// note's formulas to the byte, group by group, with the number of collectives. A change that adds
// a collective, or moves a bigger tensor, fails here until the note says so. At 8 ranks the world
// runs two groups of four; at 2 the 2D case skips. Helpers carry a tptraffic_ prefix (the CUDA
// build compiles these files as one unit).
#include <colo/dist/process_group.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/vit_25d_policy.h>
#include <colo/shardformer/vit_2d_policy.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/vit_3d_policy.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::shardformer {
namespace {

using namespace test;

#define TPTRAFFIC_REQUIRE_FOUR()                                                                     \
  if (world()->size() % 4 != 0) {                                                                    \
    GTEST_SKIP() << "the block is sharded over groups of 4 ranks, the world has " << world()->size(); \
  }

// Batch 4 of 16×16 images in patches of 8: s = 5 tokens a sample, T = 20; width h = 16, 4 heads,
// MLP 2h; every linear with a bias.
constexpr int64_t kBatch = 4, kTokens = 5, kWidth = 16, kMlp = 32;
constexpr double kElement = 4;  // fp32

std::shared_ptr<nn::LayerStack> tptraffic_vit() { return randomised_vit(grid_test_vit().depth(1), 23); }

nn::EncoderBlock& tptraffic_block(nn::LayerStack& model) {
  for (std::size_t k = 0; k < model.size(); ++k) {
    if (auto* block = dynamic_cast<nn::EncoderBlock*>(model.layer(k).get())) return *block;
  }
  throw std::logic_error("the ViT has no encoder block");
}

// One forward and backward of `block` on a random input of `shape`, with a random output gradient.
void tptraffic_step(nn::EncoderBlock& block, std::vector<int64_t> shape) {
  torch::manual_seed(31);
  const auto x = torch::randn(shape).to(device()).requires_grad_(true);
  const auto y = block.forward(x);
  y.backward(torch::randn_like(y));
}

// The note's four linears of a block: qkv (h → 3h), proj (h → h), fc1 (h → 4h; here 2h), fc2.
struct TptrafficLinear {
  int64_t in, out;
};
constexpr TptrafficLinear kLinears[] = {{kWidth, 3 * kWidth}, {kWidth, kWidth}, {kWidth, kMlp}, {kMlp, kWidth}};

// 1D over p = 4 ranks (2 in a world of 2): two all-reduces of T·h forward (after proj and fc2),
// two backward (the input gradients of qkv and fc1), 2(p−1)/p·T·h each; the LayerNorms
// replicated, no collective.
TEST(TpTraffic, OneBlockIn1dMovesWhatTheCostNoteSays) {
  const auto tp = consecutive_group(world()->size() % 4 == 0 ? 4 : 2, "tptraffic_1d");
  auto model = tptraffic_vit();
  ShardFormer(tp).shard(*model);
  tp->reset_traffic();
  tptraffic_step(tptraffic_block(*model), {kBatch, kTokens, kWidth});
  const double p = tp->size(), T = kBatch * kTokens;
  const auto got = tp->traffic();
  EXPECT_EQ(got.collectives, 4);
  EXPECT_DOUBLE_EQ(got.received_bytes, 4 * 2 * (p - 1) / p * T * kWidth * kElement);
  EXPECT_EQ(got.sent_p2p_bytes + got.received_p2p_bytes, 0);
}

// 1D with sequence parallelism over p ranks, T' = p·ceil(s/p)·b padded tokens: an all-gather
// before qkv and fc1 and a reduce-scatter after proj and fc2 forward, their conjugates backward,
// (p−1)/p·T'·h each; and backward, the all-reduce of each replicated parameter's gradient
// (norm1, norm2 weight and bias; proj and fc2 bias: each sees only this rank's tokens),
// 2(p−1)/p·h each: the planner's kSequenceParallelPartialGradients.
TEST(TpTraffic, OneBlockIn1dWithSequenceParallelismMovesWhatTheCostNoteSays) {
  const auto tp = consecutive_group(world()->size() % 4 == 0 ? 4 : 2, "tptraffic_1d_sp");
  auto model = tptraffic_vit();
  ShardFormer(tp, ShardFormerOptions().sequence_parallel(true)).shard(*model);
  const int64_t p = tp->size();
  const int64_t padded = (kTokens + p - 1) / p * p;
  tp->reset_traffic();
  tptraffic_step(tptraffic_block(*model), {kBatch, padded / p, kWidth});
  const double share = static_cast<double>(p - 1) / static_cast<double>(p);
  const double activation = static_cast<double>(kBatch * padded * kWidth) * kElement;
  const auto got = tp->traffic();
  constexpr int kPartialGradients = 6;  // planner::detail::kSequenceParallelPartialGradients
  EXPECT_EQ(got.collectives, 8 + kPartialGradients);
  EXPECT_DOUBLE_EQ(got.received_bytes, 8 * share * activation + kPartialGradients * 2 * share * kWidth * kElement);
  EXPECT_EQ(got.sent_p2p_bytes + got.received_p2p_bytes, 0);
}

// 2D on a q = 2 grid, per group. Each Linear2D(in, out): q broadcasts of the input block
// T·in/q² along the row forward and q again backward, plus the reduce-scatter of the stacked dX
// terms (q·T/q·in/q elements) over the row; q + q broadcasts of the weight block out·in/q² down
// the column, the reduce-scatter of the dW terms (q·out/q·in/q) and the bias gradient's all-reduce
// [out/q] over the column. Each LayerNorm2D: four all-reduces of [T/q] statistics over the row, the
// weight and bias gradients [h/q] all-reduced over the column.
TEST(TpTraffic, OneBlockIn2dMovesWhatTheCostNoteSays) {
  TPTRAFFIC_REQUIRE_FOUR();
  const auto grid = std::make_shared<Tp2dGrid>(consecutive_group(4, "tptraffic_2d"));
  auto model = tptraffic_vit();
  Vit2dSharder(grid).shard(*model);
  for (auto* group : {&grid->tp(), &grid->row_group(), &grid->column_group()}) group->reset_traffic();
  const int64_t q = grid->q();
  tptraffic_step(tptraffic_block(*model), {kBatch / q, kTokens, kWidth / q});

  const double Q = static_cast<double>(q), T = kBatch * kTokens;
  const double ring = (Q - 1) / Q;  // an all-gather's or reduce-scatter's share per rank
  double row = 0, column = 0;
  int64_t row_calls = 0, column_calls = 0;
  for (const auto& linear : kLinears) {
    const double in = static_cast<double>(linear.in), out = static_cast<double>(linear.out);
    row += 2 * (Q - 1) * T * in / (Q * Q) + ring * (Q * (T / Q) * (in / Q));
    column += 2 * (Q - 1) * out * in / (Q * Q) + ring * (Q * (out / Q) * (in / Q)) + 2 * ring * out / Q;
    row_calls += 2 * q + 1;
    column_calls += 2 * q + 2;
  }
  for (int norm = 0; norm < 2; ++norm) {
    row += 4 * 2 * ring * T / Q;
    column += 2 * 2 * ring * kWidth / Q;
    row_calls += 4;
    column_calls += 2;
  }
  const auto got_row = grid->row_group().traffic();
  const auto got_column = grid->column_group().traffic();
  EXPECT_EQ(got_row.collectives, row_calls) << "row group";
  EXPECT_DOUBLE_EQ(got_row.received_bytes, row * kElement) << "row group";
  EXPECT_EQ(got_column.collectives, column_calls) << "column group";
  EXPECT_DOUBLE_EQ(got_column.received_bytes, column * kElement) << "column group";
  EXPECT_EQ(grid->tp().traffic().collectives, 0) << "a 2D block talks along the grid's rows and columns only";
}

// 2.5D on d = 2 layers of a q = 2 grid (8 ranks): each layer runs 2D's collectives above on its
// T/d tokens, and the depth group (the d ranks holding the same blocks) sums every parameter
// gradient: per Linear2D the weight block (out·in/q²) and the bias block (out/q), per LayerNorm2D
// the weight and bias blocks (h/q), each an all-reduce, 2(d−1)/d of it received.
TEST(TpTraffic, OneBlockIn25dMovesWhatTheCostNoteSays) {
  if (world()->size() % 8 != 0) GTEST_SKIP() << "2.5D on 2 layers of a 2x2 grid needs 8 ranks";
  const auto grid = std::make_shared<Tp25dGrid>(consecutive_group(8, "tptraffic_25d"), 2);
  auto model = tptraffic_vit();
  Vit25dSharder(grid).shard(*model);
  const auto& layer = *grid->layer_grid();
  for (auto* group : {&grid->tp(), &layer.row_group(), &layer.column_group(), grid->depth_group().get()}) {
    group->reset_traffic();
  }
  const int64_t q = grid->q(), d = grid->depth();
  tptraffic_step(tptraffic_block(*model), {kBatch / (d * q), kTokens, kWidth / q});

  const double Q = static_cast<double>(q), D = static_cast<double>(d), T = kBatch * kTokens / D;
  const double ring = (Q - 1) / Q, deep = 2 * (D - 1) / D;
  double row = 0, column = 0, depth = 0;
  int64_t row_calls = 0, column_calls = 0, depth_calls = 0;
  for (const auto& linear : kLinears) {
    const double in = static_cast<double>(linear.in), out = static_cast<double>(linear.out);
    row += 2 * (Q - 1) * T * in / (Q * Q) + ring * (Q * (T / Q) * (in / Q));
    column += 2 * (Q - 1) * out * in / (Q * Q) + ring * (Q * (out / Q) * (in / Q)) + 2 * ring * out / Q;
    depth += deep * (out * in / (Q * Q) + out / Q);
    row_calls += 2 * q + 1;
    column_calls += 2 * q + 2;
    depth_calls += 2;
  }
  for (int norm = 0; norm < 2; ++norm) {
    row += 4 * 2 * ring * T / Q;
    column += 2 * 2 * ring * kWidth / Q;
    depth += 2 * deep * kWidth / Q;
    row_calls += 4;
    column_calls += 2;
    depth_calls += 2;
  }
  EXPECT_EQ(layer.row_group().traffic().collectives, row_calls) << "row group";
  EXPECT_DOUBLE_EQ(layer.row_group().traffic().received_bytes, row * kElement) << "row group";
  EXPECT_EQ(layer.column_group().traffic().collectives, column_calls) << "column group";
  EXPECT_DOUBLE_EQ(layer.column_group().traffic().received_bytes, column * kElement) << "column group";
  EXPECT_EQ(grid->depth_group()->traffic().collectives, depth_calls) << "depth group";
  EXPECT_DOUBLE_EQ(grid->depth_group()->traffic().received_bytes, depth * kElement) << "depth group";
  EXPECT_EQ(grid->tp().traffic().collectives, 0) << "a 2.5D block talks along its layer's grid and its depth only";
}

// 3D on a q = 2 cube (8 ranks), per group, T the whole batch's tokens. Each Linear3D(in, out)
// with its input's rows over group R and features over F (qkv, fc1: R = k, F = i; proj, fc2:
// R = i, F = k): over R the input gathered forward and again backward and dX reduce-scattered,
// 3·(q−1)·T·in/q³; over F the output reduce-scattered forward and dY gathered backward,
// 2·(q−1)·T·out/q³; over j the weight gathered twice and dW reduce-scattered, 3·(q−1)·out·in/q³.
// The bias [out/q]: qkv's and fc1's all-reduced over the ij plane (2(q²−1)/q² of it), proj's
// and fc2's gathered over the jk plane forward and reduce-scattered back (2·(q²−1)/q² of it).
// Each LayerNorm3D: four all-reduces of [T/q²] statistics over i; its weight and bias [h/q]
// gathered over the jk plane and reduce-scattered back.
TEST(TpTraffic, OneBlockIn3dMovesWhatTheCostNoteSays) {
  if (world()->size() % 8 != 0) GTEST_SKIP() << "3D on a 2x2x2 cube needs 8 ranks";
  const auto grid = std::make_shared<Tp3dGrid>(consecutive_group(8, "tptraffic_3d"));
  auto model = tptraffic_vit();
  Vit3dSharder(grid).shard(*model);
  for (auto* group : {&grid->tp(), &grid->i_group(), &grid->j_group(), &grid->k_group(), &grid->jk_plane(),
                      &grid->ij_plane()}) {
    group->reset_traffic();
  }
  const int64_t q = grid->q();
  tptraffic_step(tptraffic_block(*model), {kBatch / (q * q), kTokens, kWidth / q});

  const double Q = static_cast<double>(q), T = kBatch * kTokens, cube = Q * Q * Q;
  const double plane = (Q * Q - 1) / (Q * Q);  // a gather's or reduce-scatter's share over a plane
  double i = 0, j = 0, k = 0, jk = 0, ij = 0;
  int64_t i_calls = 0, j_calls = 0, k_calls = 0, jk_calls = 0, ij_calls = 0;
  for (std::size_t n = 0; n < std::size(kLinears); ++n) {
    const double in = static_cast<double>(kLinears[n].in), out = static_cast<double>(kLinears[n].out);
    const bool outer = n == 0 || n == 2;  // qkv and fc1 read the residual stream
    (outer ? k : i) += 3 * (Q - 1) * T * in / cube;
    (outer ? i : k) += 2 * (Q - 1) * T * out / cube;
    (outer ? k_calls : i_calls) += 3;
    (outer ? i_calls : k_calls) += 2;
    j += 3 * (Q - 1) * out * in / cube;
    j_calls += 3;
    if (outer) {
      ij += 2 * plane * out / Q;
      ij_calls += 1;
    } else {
      jk += 2 * plane * out / Q;
      jk_calls += 2;
    }
  }
  for (int norm = 0; norm < 2; ++norm) {
    i += 4 * 2 * (Q - 1) / Q * T / (Q * Q);
    i_calls += 4;
    jk += 2 * 2 * plane * kWidth / Q;
    jk_calls += 4;
  }
  const auto expect = [](dist::ProcessGroup& group, int64_t calls, double elements, const char* name) {
    EXPECT_EQ(group.traffic().collectives, calls) << name;
    EXPECT_DOUBLE_EQ(group.traffic().received_bytes, elements * kElement) << name;
  };
  expect(grid->i_group(), i_calls, i, "i group");
  expect(grid->j_group(), j_calls, j, "j group");
  expect(grid->k_group(), k_calls, k, "k group");
  expect(grid->jk_plane(), jk_calls, jk, "jk plane");
  expect(grid->ij_plane(), ij_calls, ij, "ij plane");
  EXPECT_EQ(grid->tp().traffic().collectives, 0) << "a 3D block talks along the cube's axes and planes only";
}

}  // namespace
}  // namespace colo::shardformer
