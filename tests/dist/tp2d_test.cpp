// 2D tensor parallelism's pieces (Optimus/SUMMA) on 2×2 grids of four ranks: the grid's rows and
// columns, each mapping's forward and backward against the blocks they should give, Linear2D
// (with and without bias, and a fused qkv) against one colo::nn::linear on the whole tensors,
// LayerNorm2D against torch's layer_norm, and the refusal of a tp size that is not a square.
// At 8 ranks the world runs two independent grids (ranks 0-3 and 4-7); at 2 the grid cases skip.
// Helpers carry a tp2d_ prefix: the CUDA build compiles the test files as one unity unit.
#include <colo/dist/process_group.h>
#include <colo/nn/linear.h>
#include <colo/nn/shard_spec.h>
#include <colo/shardformer/layer_norm_2d.h>
#include <colo/shardformer/linear_2d.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/tp2d_mappings.h>
#include <colo/shardformer/tp_mappings.h>
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

constexpr int kTp2dSide = 2;  // q: a grid of four ranks

// Every case that needs a grid says so first (collectives then run on every rank or on none).
#define TP2D_REQUIRE_GRID()                                                                       \
  if (world()->size() % (kTp2dSide * kTp2dSide) != 0) {                                           \
    GTEST_SKIP() << "a 2x2 grid needs a multiple of 4 ranks, the world has " << world()->size(); \
  }

// This rank's grid: the world cut into groups of four consecutive ranks, each a grid of its own.
std::shared_ptr<Tp2dGrid> tp2d_grid(const std::string& name) {
  return std::make_shared<Tp2dGrid>(consecutive_group(kTp2dSide * kTp2dSide, name));
}

// The same random tensor on every rank.
torch::Tensor tp2d_random(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape).to(device());
}

void tp2d_expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double tol) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LE(relative_error(got.cpu(), want.cpu()), tol) << what;
}

// Rank (i, j)'s block of a whole activation [B, ..., H], written out with narrow (not through the
// code under test): batch block i, feature block j (feature cut with `parts`, as a fused layer's).
torch::Tensor tp2d_block(const torch::Tensor& whole, const Tp2dGrid& grid, int64_t parts = 1) {
  const int64_t q = grid.q();
  const int64_t rows = whole.size(0) / q;
  const auto batch = whole.narrow(0, grid.row() * rows, rows);
  const int64_t part = whole.size(-1) / parts;
  const int64_t piece = part / q;
  std::vector<torch::Tensor> pieces;
  for (int64_t p = 0; p < parts; ++p) pieces.push_back(batch.narrow(-1, p * part + grid.column() * piece, piece));
  return torch::cat(pieces, -1).contiguous();
}

// Every rank's `local`, in the group's rank order.
std::vector<torch::Tensor> tp2d_pieces(const torch::Tensor& local, dist::ProcessGroup& group) {
  auto all = all_gather_along(local.unsqueeze(0).contiguous(), 0, group);
  std::vector<torch::Tensor> pieces;
  for (const auto& piece : all.chunk(group.size(), 0)) pieces.push_back(piece.squeeze(0));
  return pieces;
}

TEST(Tp2d, GridPutsRankRAtRowRDivQColumnRModQ) {
  TP2D_REQUIRE_GRID();
  const auto grid = tp2d_grid("tp2d_grid");
  const int r = grid->tp().rank();
  EXPECT_EQ(grid->q(), kTp2dSide);
  EXPECT_EQ(grid->row(), r / kTp2dSide);
  EXPECT_EQ(grid->column(), r % kTp2dSide);
  std::vector<int> same_row, same_column;
  for (int c = 0; c < kTp2dSide; ++c) same_row.push_back(grid->tp().global_rank(grid->row() * kTp2dSide + c));
  for (int c = 0; c < kTp2dSide; ++c) same_column.push_back(grid->tp().global_rank(c * kTp2dSide + grid->column()));
  EXPECT_EQ(grid->row_group().global_ranks(), same_row);
  EXPECT_EQ(grid->column_group().global_ranks(), same_column);
  world()->barrier().wait();
}

TEST(Tp2d, EachMappingsForwardAndBackward) {
  TP2D_REQUIRE_GRID();
  const auto grid = tp2d_grid("tp2d_maps");
  const int q = grid->q(), i = grid->row(), j = grid->column();
  const auto whole = tp2d_random({4, 3, 8}, 1);
  const auto whole_grad = tp2d_random({4, 3, 8}, 2);

  // split_2d: this rank's block; backward, the blocks' gradients gathered to the whole.
  auto x = whole.clone().requires_grad_();
  auto block = split_2d(x, *grid);
  tp2d_expect_close(block, tp2d_block(whole, *grid), "split_2d forward: batch block i, feature block j", 0);
  block.backward(tp2d_block(whole_grad, *grid));
  tp2d_expect_close(x.grad(), whole_grad, "split_2d backward: every block's gradient in its place", 0);

  // gather_2d: the whole; backward, this rank's block of the (replicated) gradient.
  auto mine = tp2d_block(whole, *grid).requires_grad_();
  auto gathered = gather_2d(mine, *grid);
  tp2d_expect_close(gathered, whole, "gather_2d forward", 0);
  gathered.backward(whole_grad);
  tp2d_expect_close(mine.grad(), tp2d_block(whole_grad, *grid), "gather_2d backward", 0);

  // shared_sum over the row: forward and backward both sum over the row's ranks. Each rank's
  // input and upstream gradient differ (seeded by its tp rank); the sums are formed here from
  // the seeds, without a collective.
  const auto of_rank = [&](uint64_t base, int rank) { return tp2d_random({4, 3, 1}, base + static_cast<uint64_t>(rank)); };
  auto partial = of_rank(100, i * q + j).requires_grad_();
  auto summed = shared_sum(partial, grid->row_group());
  auto row_inputs = torch::zeros({4, 3, 1}), row_grads = torch::zeros({4, 3, 1});
  for (int c = 0; c < q; ++c) {
    row_inputs += of_rank(100, i * q + c).cpu();
    row_grads += of_rank(200, i * q + c).cpu();
  }
  tp2d_expect_close(summed, row_inputs, "shared_sum forward: the row's sum", 1e-6);
  summed.backward(of_rank(200, i * q + j));
  tp2d_expect_close(partial.grad(), row_grads, "shared_sum backward: the row's gradients summed", 1e-6);

  // replicated_in over the column: forward the identity, backward the column's sum.
  auto param = tp2d_random({8}, 3).requires_grad_();
  auto used = replicated_in(param, grid->column_group());
  tp2d_expect_close(used, param.detach(), "replicated_in forward", 0);
  used.backward(tp2d_random({8}, 300 + static_cast<uint64_t>(i * q + j)));
  auto column_grads = torch::zeros({8});
  for (int r = 0; r < q; ++r) column_grads += tp2d_random({8}, 300 + static_cast<uint64_t>(r * q + j)).cpu();
  tp2d_expect_close(param.grad(), column_grads, "replicated_in backward: the column's gradients summed", 1e-6);
  world()->barrier().wait();
}

// Linear2D on the blocks against one colo::nn::linear on the whole tensors: output block,
// input-gradient block, and the weight and bias gradients gathered and unsharded by their cuts.
TEST(Tp2d, Linear2DEqualsOneLinear) {
  TP2D_REQUIRE_GRID();
  struct Case {
    bool bias;
    int64_t parts;
  };
  for (const auto& c : {Case{true, 1}, Case{false, 1}, Case{true, 3}}) {
    SCOPED_TRACE(fmt::format("bias {} parts {}", c.bias, c.parts));
    const auto grid = tp2d_grid("tp2d_linear");
    constexpr int64_t kBatch = 4, kSeq = 3, kIn = 8, kOut = 12;
    const auto w = tp2d_random({kOut, kIn}, 11), b = tp2d_random({kOut}, 12);
    const auto x = tp2d_random({kBatch, kSeq, kIn}, 13), gy = tp2d_random({kBatch, kSeq, kOut}, 14);

    auto rw = w.clone().requires_grad_(), rb = b.clone().requires_grad_();
    auto rx = x.clone().requires_grad_();
    auto ry = nn::linear(rx, rw, c.bias ? rb : torch::Tensor());
    ry.backward(gy);

    auto weight = w.clone().requires_grad_();
    auto bias = c.bias ? b.clone().requires_grad_() : torch::Tensor();
    Linear2D layer(weight, bias, grid, Linear2DOptions().parts(c.parts));
    EXPECT_TRUE(layer->weight.is_same(weight)) << "the same tensor, cut in place";
    EXPECT_EQ(layer->weight.sizes(), (std::vector<int64_t>{kOut / 2, kIn / 2}));
    auto xb = tp2d_block(x, *grid).requires_grad_();
    auto y = layer(xb);
    tp2d_expect_close(y, tp2d_block(ry.detach(), *grid, c.parts), "output block", 1e-6);
    y.backward(tp2d_block(gy, *grid, c.parts));
    tp2d_expect_close(xb.grad(), tp2d_block(rx.grad(), *grid), "input gradient block", 1e-5);
    const auto weight_grad = nn::unshard(tp2d_pieces(layer->weight.grad(), grid->tp()), layer->weight_cuts());
    tp2d_expect_close(weight_grad, rw.grad(), "weight gradient", 1e-5);
    if (c.bias) {
      // The bias blocks are the same down a column: the row's pieces make the whole.
      const auto bias_grad = nn::unshard(tp2d_pieces(layer->bias.grad(), grid->row_group()), layer->bias_cuts());
      tp2d_expect_close(bias_grad, rb.grad(), "bias gradient", 1e-5);
    } else {
      EXPECT_FALSE(layer->bias.defined());
    }
  }
  world()->barrier().wait();
}

// The whole path a 2D region takes: split, Linear2D, gather; the input's gradient is the whole's.
TEST(Tp2d, SplitLinearGatherEqualsOneLinear) {
  TP2D_REQUIRE_GRID();
  const auto grid = tp2d_grid("tp2d_path");
  const auto w = tp2d_random({12, 8}, 21), b = tp2d_random({12}, 22);
  const auto x = tp2d_random({4, 3, 8}, 23), gy = tp2d_random({4, 3, 12}, 24);
  auto rx = x.clone().requires_grad_();
  auto ry = nn::linear(rx, w, b);
  ry.backward(gy);
  Linear2D layer(w.clone().requires_grad_(), b.clone().requires_grad_(), grid);
  auto px = x.clone().requires_grad_();
  auto py = gather_2d(layer(split_2d(px, *grid)), *grid);
  tp2d_expect_close(py, ry.detach(), "output", 1e-6);
  py.backward(gy);
  tp2d_expect_close(px.grad(), rx.grad(), "input gradient", 1e-5);
  world()->barrier().wait();
}

TEST(Tp2d, LayerNorm2DEqualsOneLayerNorm) {
  TP2D_REQUIRE_GRID();
  const auto grid = tp2d_grid("tp2d_norm");
  constexpr int64_t kHidden = 8;
  constexpr double kEps = 1e-6;
  const auto w = tp2d_random({kHidden}, 31), b = tp2d_random({kHidden}, 32);
  // An offset and a scale, so that the mean and the variance both matter.
  const auto x = tp2d_random({4, 3, kHidden}, 33) * 3 + 1, gy = tp2d_random({4, 3, kHidden}, 34);

  auto rw = w.clone().requires_grad_(), rb = b.clone().requires_grad_();
  auto rx = x.clone().requires_grad_();
  auto ry = torch::layer_norm(rx, {kHidden}, rw, rb, kEps);
  ry.backward(gy);

  auto weight = w.clone().requires_grad_();
  LayerNorm2D norm(weight, b.clone().requires_grad_(), grid, LayerNorm2DOptions().eps(kEps));
  EXPECT_TRUE(norm->weight.is_same(weight));
  auto xb = tp2d_block(x, *grid).requires_grad_();
  auto y = norm(xb);
  tp2d_expect_close(y, tp2d_block(ry.detach(), *grid), "output block", 1e-6);
  y.backward(tp2d_block(gy, *grid));
  tp2d_expect_close(xb.grad(), tp2d_block(rx.grad(), *grid), "input gradient block", 1e-5);
  tp2d_expect_close(nn::unshard(tp2d_pieces(norm->weight.grad(), grid->row_group()), norm->weight_cuts()), rw.grad(),
                    "weight gradient", 1e-5);
  tp2d_expect_close(nn::unshard(tp2d_pieces(norm->bias.grad(), grid->row_group()), norm->bias_cuts()), rb.grad(),
                    "bias gradient", 1e-5);
  world()->barrier().wait();
}

TEST(Tp2d, RefusesATpSizeThatIsNotASquare) {
  const auto refusal = [](int tp_size) {
    try {
      Tp2dGrid::side_of(tp_size);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(6), "tp_mode=2d needs tp_size = q² (a q × q grid), got 6: use 4 or 9");
  EXPECT_EQ(refusal(8), "tp_mode=2d needs tp_size = q² (a q × q grid), got 8: use 4 or 9");
  EXPECT_EQ(refusal(2), "tp_mode=2d needs tp_size = q² (a q × q grid), got 2: use 1 or 4");
  EXPECT_EQ(refusal(4), "accepted");
  EXPECT_EQ(Tp2dGrid::side_of(9), 3);
  // On a real group of two ranks the grid refuses before it creates any group.
  if (world()->size() % 2 == 0) {
    auto pair = consecutive_group(2, "tp2d_pair");
    try {
      Tp2dGrid grid(pair);
      ADD_FAILURE() << "a grid over 2 ranks was built";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "tp_mode=2d needs tp_size = q² (a q × q grid), got 2: use 1 or 4");
    }
  }
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo::shardformer
