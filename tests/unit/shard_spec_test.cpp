// nn::ShardSpec: one dimension's cut (qkv's parts), and lists of cuts (2D tensor parallelism's
// blocks) with their piece order, on a tensor whose every element says where it came from.
#include <colo/nn/shard_spec.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace colo::nn {
namespace {

// [rows, cols] with element (r, c) = r * 100 + c.
torch::Tensor numbered(int64_t rows, int64_t cols) {
  return torch::arange(rows).unsqueeze(1) * 100 + torch::arange(cols).unsqueeze(0);
}

TEST(ShardSpec, OneCutWithPartsKeepsEachPartsShard) {
  const auto full = numbered(6, 2);  // rows [q0 q1; k0 k1; v0 v1] as 3 parts of 2 rows
  const ShardSpec spec{0, 3, 2, 1};
  const auto mine = shard_of(full, spec);
  EXPECT_TRUE(torch::equal(mine.select(1, 0), torch::tensor({100, 300, 500}, torch::kLong)));
  const auto back = unshard({shard_of(full, ShardSpec{0, 3, 2, 0}), mine}, spec);
  EXPECT_TRUE(torch::equal(back, full));
}

TEST(ShardSpec, ListOfCutsTakesABlock) {
  const auto full = numbered(4, 6);
  // Columns by 2 (index 1), then rows by 2 (index 0): rows 0-1, columns 3-5.
  const std::vector<ShardSpec> cuts{{1, 1, 2, 1}, {0, 1, 2, 0}};
  EXPECT_TRUE(torch::equal(shard_of(full, cuts), full.narrow(0, 0, 2).narrow(1, 3, 3)));
  // Cuts of different dims commute.
  EXPECT_TRUE(torch::equal(shard_of(full, std::vector<ShardSpec>{cuts[1], cuts[0]}), shard_of(full, cuts)));
  EXPECT_TRUE(torch::equal(shard_of(full, std::vector<ShardSpec>{}), full));
}

// The pieces of every index combination, the first cut's index slowest, give the whole back; the
// order is checked by a 2×3 grid whose wrong order would give another tensor.
TEST(ShardSpec, UnshardAListTakesPiecesFirstCutSlowest) {
  const auto full = numbered(9, 4);
  std::vector<ShardSpec> cuts{{1, 1, 2, 0}, {0, 3, 3, 0}};  // columns in 2, then rows: 3 parts, each in 3
  std::vector<torch::Tensor> pieces;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 3; ++b) {
      cuts[0].index = a;
      cuts[1].index = b;
      pieces.push_back(shard_of(full, cuts));
    }
  }
  EXPECT_TRUE(torch::equal(unshard(pieces, cuts), full));
  // The other order is another tensor: the order is the contract.
  std::vector<torch::Tensor> transposed;
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t a = 0; a < 2; ++a) transposed.push_back(pieces[static_cast<size_t>(a * 3 + b)]);
  }
  EXPECT_FALSE(torch::equal(unshard(transposed, cuts), full));
  // One cut in a list is the single-cut unshard.
  const std::vector<torch::Tensor> halves{shard_of(full, ShardSpec{1, 1, 2, 0}), shard_of(full, ShardSpec{1, 1, 2, 1})};
  EXPECT_TRUE(torch::equal(unshard(halves, std::vector<ShardSpec>{{1, 1, 2, 0}}), full));
}

TEST(ShardSpec, UnshardAListRefusesAWrongCountOfPieces) {
  const std::vector<ShardSpec> cuts{{1, 1, 2, 0}, {0, 1, 2, 0}};
  const std::vector<torch::Tensor> three(3, torch::zeros({2, 2}));
  try {
    unshard(three, cuts);
    FAIL() << "3 pieces for 2 x 2 blocks were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 pieces for 2 cuts that make 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace colo::nn
