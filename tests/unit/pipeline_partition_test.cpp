// core/pipeline's layer partitioner (uniform, balanced, explicit; the ViT's glued head) and the
// stage manager's arithmetic.
#include <colo/pipeline/partition.h>
#include <colo/pipeline/stage_manager.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"

namespace colo::pipeline {
namespace {

using colo::testing::error_of;

std::vector<int> sizes_of(const std::vector<LayerRange>& ranges) {
  std::vector<int> sizes;
  for (const auto& r : ranges) sizes.push_back(r.size());
  return sizes;
}

// Contiguous, non-empty, covering [0, num_layers) in order.
void expect_tiling(const std::vector<LayerRange>& ranges, int num_layers) {
  ASSERT_FALSE(ranges.empty());
  EXPECT_EQ(ranges.front().begin, 0);
  EXPECT_EQ(ranges.back().end, num_layers);
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    EXPECT_GT(ranges[s].size(), 0) << "stage " << s;
    if (s > 0) {
      EXPECT_EQ(ranges[s].begin, ranges[s - 1].end) << "stage " << s;
    }
  }
}

double largest_stage_cost(const std::vector<LayerRange>& ranges, const std::vector<double>& costs) {
  double largest = 0;
  for (const auto& r : ranges) {
    largest = std::max(largest, std::accumulate(costs.begin() + r.begin, costs.begin() + r.end, 0.0));
  }
  return largest;
}

TEST(PipelinePartition, UniformPutsTheRemainderOnTheMiddleStages) {
  EXPECT_EQ(sizes_of(partition_layers(12, 4)), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(sizes_of(partition_layers(13, 4)), (std::vector<int>{3, 3, 4, 3}));
  EXPECT_EQ(sizes_of(partition_layers(14, 4)), (std::vector<int>{3, 4, 4, 3}));
  EXPECT_EQ(sizes_of(partition_layers(15, 4)), (std::vector<int>{3, 4, 4, 4}));
  EXPECT_EQ(sizes_of(partition_layers(7, 2)), (std::vector<int>{3, 4}));
  EXPECT_EQ(sizes_of(partition_layers(17, 5)), (std::vector<int>{3, 4, 4, 3, 3}));
  EXPECT_EQ(sizes_of(partition_layers(5, 1)), (std::vector<int>{5}));
  for (int layers = 1; layers <= 40; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      const auto ranges = partition_layers(layers, stages);
      ASSERT_EQ(ranges.size(), static_cast<std::size_t>(stages));
      expect_tiling(ranges, layers);
      const auto sizes = sizes_of(ranges);
      EXPECT_LE(*std::max_element(sizes.begin(), sizes.end()) - *std::min_element(sizes.begin(), sizes.end()), 1);
    }
  }
  EXPECT_EQ(partition_layers(13, 4)[2].str(), "[6, 10)");
}

// The ViT's stack: patch embedding, N blocks, head (final norm + head). glue_last 1 keeps the head
// with the last block: ViT-B (12 blocks, 14 modules) over pp 2 × chunks 2 places 13 layers.
TEST(PipelinePartition, TheViTHeadStaysWithTheLastBlock) {
  const auto ranges = partition_layers(14, 4, PartitionOptions().glue_last(1));
  EXPECT_EQ(sizes_of(ranges), (std::vector<int>{3, 3, 4, 4}));  // 3 3 4 3 layers, the last holding the head
  expect_tiling(ranges, 14);
  // Two stages, explicit: the embedding and 6 blocks, then 6 blocks and the head.
  const auto explicit_ranges = partition_layers(
      14, 2, PartitionOptions().method(PartitionMethod::kExplicit).layers_per_stage({7, 6}).glue_last(1));
  EXPECT_EQ(explicit_ranges[0], (LayerRange{0, 7}));
  EXPECT_EQ(explicit_ranges[1], (LayerRange{7, 14}));
  // Balanced by parameter count (tiny embedding and head, equal blocks): the glued head's cost
  // counts with the last block.
  std::vector<double> params(14, 10.0);
  params.front() = 1;
  params.back() = 25;
  const auto balanced =
      partition_layers(14, 2, PartitionOptions().method(PartitionMethod::kBalanced).layer_costs(params).glue_last(1));
  expect_tiling(balanced, 14);
  EXPECT_EQ(sizes_of(balanced), (std::vector<int>{8, 6}));  // costs 71 and 75 (7 blocks + embedding | 5 + head)
  EXPECT_DOUBLE_EQ(largest_stage_cost(balanced, params), 75);
  // Every stage needs a layer: 14 modules glued to 13 cannot fill 14 stages. The message counts
  // the layers one way (14, as the caller gave them), never as 13 "layers".
  const auto message =
      error_of<std::invalid_argument>([] { partition_layers(14, 14, PartitionOptions().glue_last(1)); });
  EXPECT_NE(message.find("cannot partition 14 layers into 14 pipeline stages (uniform): every stage needs at least one "
                         "layer, and the 14 layers fill at most 13 stages (the last 2 stay on one stage)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("13 layers"), std::string::npos) << message;
  // At the boundary: 13 stages fit, 14 do not.
  EXPECT_EQ(partition_layers(14, 13, PartitionOptions().glue_last(1)).size(), 13u);
}

TEST(PipelinePartition, BalancedMinimisesTheLargestStageThenEvensTheRest) {
  const auto balanced = [](const std::vector<double>& costs, int stages) {
    return partition_layers(static_cast<int>(costs.size()), stages,
                            PartitionOptions().method(PartitionMethod::kBalanced).layer_costs(costs));
  };
  EXPECT_EQ(sizes_of(balanced({1, 1, 1, 1, 10}, 2)), (std::vector<int>{4, 1}));
  // The 10 decides the largest stage whatever happens; the rest is split 2 + 2, not 1 + 3.
  EXPECT_EQ(sizes_of(balanced({10, 1, 1, 1, 1}, 3)), (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(sizes_of(balanced({0, 0, 0, 0}, 2)), (std::vector<int>{2, 2}));
  EXPECT_EQ(sizes_of(balanced({2, 2, 2, 2, 2, 2}, 3)), (std::vector<int>{2, 2, 2}));

  // Optimal against brute force over every cut.
  unsigned state = 12345;
  const auto next_cost = [&state] {
    state = state * 1103515245u + 12345u;
    return static_cast<double>((state >> 16) % 20);
  };
  for (int trial = 0; trial < 200; ++trial) {
    const int layers = 2 + trial % 9;
    const int stages = 1 + trial % std::min(layers, 4);
    std::vector<double> costs(layers);
    for (auto& c : costs) c = next_cost();
    double best = std::numeric_limits<double>::infinity();
    // Every composition of `layers` into `stages` positive parts, as a bit mask of cut points.
    for (unsigned mask = 0; mask < (1u << (layers - 1)); ++mask) {
      if (__builtin_popcount(mask) != stages - 1) continue;
      double largest = 0;
      double current = 0;
      for (int l = 0; l < layers; ++l) {
        current += costs[l];
        if (l == layers - 1 || (mask >> l) & 1u) {
          largest = std::max(largest, current);
          current = 0;
        }
      }
      best = std::min(best, largest);
    }
    const auto ranges = balanced(costs, stages);
    expect_tiling(ranges, layers);
    EXPECT_DOUBLE_EQ(largest_stage_cost(ranges, costs), best) << "trial " << trial;
  }
}

TEST(PipelinePartition, ErrorsSayWhatToChange) {
  const auto message_of = [](int layers, int stages, const PartitionOptions& options) {
    return error_of<std::invalid_argument>([&] { partition_layers(layers, stages, options); });
  };
  EXPECT_NE(message_of(3, 4, {}).find("every stage needs at least one layer, and the 3 layers fill at most 3 stages; "
                                      "lower pp or chunks"),
            std::string::npos);
  EXPECT_NE(message_of(4, 0, {}).find("at least 1"), std::string::npos);
  EXPECT_NE(message_of(4, 2, PartitionOptions().glue_last(4)).find("glue_last must be in [0, 4)"), std::string::npos);
  EXPECT_NE(message_of(4, 2, PartitionOptions().glue_last(-1)).find("glue_last"), std::string::npos);

  const auto explicit_sizes = [](std::vector<int> sizes) {
    return PartitionOptions().method(PartitionMethod::kExplicit).layers_per_stage(std::move(sizes));
  };
  EXPECT_NE(message_of(12, 2, explicit_sizes({7, 4})).find("layers_per_stage sums to 11, but there are 12 layers"),
            std::string::npos);
  EXPECT_NE(message_of(12, 3, explicit_sizes({7, 5}))
                .find("layers_per_stage has 2 entries: give one per virtual stage "
                      "(pp × chunks = 3)"),
            std::string::npos);
  EXPECT_NE(message_of(12, 3, explicit_sizes({7, 5, 0})).find("gives stage 2 0 layers"), std::string::npos);
  EXPECT_EQ(sizes_of(partition_layers(12, 2, explicit_sizes({7, 5}))), (std::vector<int>{7, 5}));

  const auto costs = [](std::vector<double> c) {
    return PartitionOptions().method(PartitionMethod::kBalanced).layer_costs(std::move(c));
  };
  EXPECT_NE(message_of(3, 2, costs({1, 2})).find("layer_costs has 2 entries: give one cost per layer of the stack (3)"),
            std::string::npos);
  EXPECT_NE(message_of(3, 2, costs({1, -2, 1})).find("layer 1's cost is -2"), std::string::npos);
  EXPECT_NE(message_of(3, 2, costs({1, std::numeric_limits<double>::quiet_NaN(), 1})).find("finite"),
            std::string::npos);
  // Options the method does not read are a mistake, not silently ignored.
  EXPECT_NE(message_of(4, 2, PartitionOptions().layer_costs({1, 1, 1, 1})).find("only the balanced method reads it"),
            std::string::npos);
  EXPECT_NE(message_of(4, 2, PartitionOptions().layers_per_stage({2, 2})).find("only the explicit method reads it"),
            std::string::npos);
}

TEST(PipelinePartition, MethodNamesRoundTrip) {
  for (auto method : {PartitionMethod::kUniform, PartitionMethod::kBalanced, PartitionMethod::kExplicit}) {
    EXPECT_EQ(parse_partition_method(to_string(method)), method);
  }
  const auto message = error_of<std::invalid_argument>([] { parse_partition_method("even"); });
  EXPECT_NE(message.find("'even': use one of uniform, balanced, explicit"), std::string::npos) << message;
}

TEST(PipelineStageManager, InterleavedStagesAndNeighbours) {
  // pp 4, 2 chunks: 8 virtual stages; rank 1 holds stages 1 and 5.
  const StageManager rank1(4, 1, 2);
  EXPECT_EQ(rank1.num_stages(), 8);
  EXPECT_EQ(rank1.stages(), (std::vector<int>{1, 5}));
  EXPECT_EQ(rank1.stage(1), 5);
  EXPECT_FALSE(rank1.is_first_stage(0));
  EXPECT_FALSE(rank1.is_last_stage());
  EXPECT_EQ(rank1.prev_rank(5), 0);
  EXPECT_EQ(rank1.next_rank(5), 2);

  const StageManager rank0(4, 0, 2);
  EXPECT_TRUE(rank0.is_first_stage(0));
  EXPECT_FALSE(rank0.is_first_stage(1));  // stage 4 is fed by rank 3's stage 3
  EXPECT_EQ(rank0.prev_rank(4), 3);
  EXPECT_THROW(rank0.prev_rank(0), std::invalid_argument);

  const StageManager rank3(4, 3, 2);
  EXPECT_TRUE(rank3.is_last_stage());
  EXPECT_TRUE(rank3.is_last_stage(1));
  EXPECT_FALSE(rank3.is_last_stage(0));
  EXPECT_EQ(rank3.next_rank(3), 0);  // chunk 0's output goes to rank 0's chunk 1
  EXPECT_THROW(rank3.next_rank(7), std::invalid_argument);

  for (int stage = 0; stage < 8; ++stage) {
    EXPECT_EQ(rank1.rank_of(stage), stage % 4);
    EXPECT_EQ(rank1.chunk_of(stage), stage / 4);
  }
  EXPECT_THROW(rank1.rank_of(8), std::invalid_argument);
  EXPECT_THROW(rank1.chunk_of(-1), std::invalid_argument);
  EXPECT_THROW(rank1.stage(2), std::invalid_argument);
}

TEST(PipelineStageManager, OneChunkPerRank) {
  const StageManager only(1, 0);
  EXPECT_TRUE(only.is_first_stage());
  EXPECT_TRUE(only.is_last_stage());
  EXPECT_EQ(only.stages(), (std::vector<int>{0}));
  EXPECT_THROW(only.next_rank(0), std::invalid_argument);

  const StageManager middle(3, 1);
  EXPECT_FALSE(middle.is_first_stage());
  EXPECT_FALSE(middle.is_last_stage());
  EXPECT_EQ(middle.prev_rank(1), 0);
  EXPECT_EQ(middle.next_rank(1), 2);
}

TEST(PipelineStageManager, RejectsBadSizes) {
  EXPECT_NE(error_of<std::invalid_argument>([] { StageManager(0, 0); }).find("pp_size must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_of<std::invalid_argument>([] { StageManager(4, 4); }).find("pp_rank 4 is outside [0, 4)"),
            std::string::npos);
  EXPECT_THROW(StageManager(4, -1), std::invalid_argument);
  EXPECT_THROW(StageManager(4, 0, 0), std::invalid_argument);
  EXPECT_NE(error_of<std::invalid_argument>([] { StageManager(1, 0, 2); }).find("chunks=2 needs pp_size >= 2"),
            std::string::npos);
}

}  // namespace
}  // namespace colo::pipeline
