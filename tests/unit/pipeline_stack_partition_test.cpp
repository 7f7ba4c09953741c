// How colo's pipelines cut a ViT's stack [patch embedding, blocks..., head]: uniformly by blocks,
// the patch embedding with the first and the head with the last (pipeline::stack_partition_options,
// which hybrid_parallel, its memory plan and the planner share). Counting the patch embedding as a
// layer had given ViT-B's two stages 5 and 7 blocks, ViT-L's four 5, 6, 7 and 6: the stage with the
// most blocks sets a pipeline's pace.
#include <colo/booster/booster.h>
#include <colo/booster/memory_plan.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vit_config.h>
#include <colo/pipeline/partition.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"

namespace {

using colo::pipeline::LayerRange;
using colo::pipeline::PartitionMethod;
using colo::pipeline::PartitionOptions;
using colo::pipeline::partition_layers;
using colo::pipeline::stack_partition_options;
using colo::testing::error_of;

std::vector<LayerRange> uniform(int layers, int stages) {
  return partition_layers(layers, stages, stack_partition_options(PartitionMethod::kUniform, layers, stages));
}

TEST(PipelineStackPartition, UniformCutsGiveEveryStageAsManyBlocks) {
  // ViT-B: 14 layers, 12 blocks. Two stages: the embedding and 6 blocks | 6 blocks and the head.
  EXPECT_EQ(uniform(14, 2), (std::vector<LayerRange>{{0, 7}, {7, 14}}));
  // ViT-L: 26 layers, 24 blocks; 2 and 4 stages: 12 and 6 blocks each.
  EXPECT_EQ(uniform(26, 2), (std::vector<LayerRange>{{0, 13}, {13, 26}}));
  EXPECT_EQ(uniform(26, 4), (std::vector<LayerRange>{{0, 7}, {7, 13}, {13, 19}, {19, 26}}));
  // Blocks that do not divide: the remainder on the middle stages, as before (12 blocks over 5:
  // 2, 3, 3, 2, 2).
  EXPECT_EQ(uniform(14, 5), (std::vector<LayerRange>{{0, 3}, {3, 6}, {6, 9}, {9, 11}, {11, 14}}));
  // As many stages as blocks: one block each; one more stage and the embedding is counted again.
  EXPECT_EQ(uniform(14, 12).front(), (LayerRange{0, 2}));
  EXPECT_EQ(uniform(14, 12).back(), (LayerRange{12, 14}));
  EXPECT_EQ(stack_partition_options(PartitionMethod::kUniform, 14, 12).glue_first(), 1);
  EXPECT_EQ(stack_partition_options(PartitionMethod::kUniform, 14, 13).glue_first(), 0);
  EXPECT_EQ(uniform(14, 13).front(), (LayerRange{0, 1}));
  // Explicit counts and balanced costs keep the embedding as a layer of its own (documented counts).
  EXPECT_EQ(stack_partition_options(PartitionMethod::kExplicit, 14, 2).glue_first(), 0);
  EXPECT_EQ(stack_partition_options(PartitionMethod::kBalanced, 14, 2).glue_first(), 0);
  EXPECT_EQ(stack_partition_options(PartitionMethod::kExplicit, 14, 2).glue_last(), 1);
}

TEST(PipelineStackPartition, GlueFirstJoinsTheFirstLayersInEveryMethod) {
  // Balanced: the glued layers' costs count with the unit they join: units [0-1] (5), then 1 each.
  const std::vector<double> costs = {4, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(partition_layers(7, 2, PartitionOptions().method(PartitionMethod::kBalanced).layer_costs(costs).glue_first(1)),
            (std::vector<LayerRange>{{0, 2}, {2, 7}}));  // 5 | 5
  // Explicit counts are of units: 5 layers with glue_first 1 are 4 units.
  EXPECT_EQ(partition_layers(5, 2, PartitionOptions().method(PartitionMethod::kExplicit).layers_per_stage({1, 3}).glue_first(1)),
            (std::vector<LayerRange>{{0, 2}, {2, 5}}));
  const auto sum = error_of<std::invalid_argument>([] {
    partition_layers(5, 2, PartitionOptions().method(PartitionMethod::kExplicit).layers_per_stage({2, 3}).glue_first(1));
  });
  EXPECT_NE(sum.find("layers_per_stage sums to 5, but the 5 layers count as 4 (the first 2 stay on one stage)"),
            std::string::npos)
      << sum;
  // At the bounds: glue_first may leave one unit, not none.
  EXPECT_EQ(partition_layers(4, 1, PartitionOptions().glue_first(2).glue_last(1)), (std::vector<LayerRange>{{0, 4}}));
  const auto none = error_of<std::invalid_argument>([] { partition_layers(4, 1, PartitionOptions().glue_first(3).glue_last(1)); });
  EXPECT_NE(none.find("glue_first must be in [0, 3)"), std::string::npos) << none;
  const auto negative = error_of<std::invalid_argument>([] { partition_layers(4, 1, PartitionOptions().glue_first(-1)); });
  EXPECT_NE(negative.find("glue_first must be in [0, 4)"), std::string::npos) << negative;
  const auto short_stack = error_of<std::invalid_argument>([] { partition_layers(4, 3, PartitionOptions().glue_first(1).glue_last(1)); });
  EXPECT_NE(short_stack.find("the 4 layers fill at most 2 stages (the first 2 stay on one stage, the last 2 stay on one stage)"),
            std::string::npos)
      << short_stack;
}

// The plugin's plan holds each stage's parameters: under pp 2 a 12-block ViT's stages hold the
// embedding and 6 blocks, and 6 blocks and the head.
TEST(PipelineStackPartition, HybridParallelPlansSixBlocksOnEachOfTwoStages) {
  colo::MemoryPlanInputs inputs;
  inputs.model = colo::nn::summarize_vision_transformer(
      colo::nn::ViTConfig().image_size(16).patch_size(8).embed_dim(16).depth(12).num_heads(2).num_classes(10));
  ASSERT_EQ(inputs.model.layers.size(), 14u);
  inputs.world_size(2).global_batch_size(8).device_is_gpu(false);
  const auto plan =
      colo::Booster::plan_memory("hybrid_parallel", {{"pp_size", "2"}, {"num_microbatches", "2"}}, inputs);
  ASSERT_EQ(plan.ranks.size(), 2u);
  const auto numel = [&](int begin, int end) {
    int64_t n = 0;
    for (int i = begin; i < end; ++i) n += inputs.model.layers[static_cast<std::size_t>(i)].numel();
    return 4 * n;  // fp32
  };
  EXPECT_EQ(plan.ranks[0].bytes_of("parameters ("), numel(0, 7));
  EXPECT_EQ(plan.ranks[1].bytes_of("parameters ("), numel(7, 14));
}

}  // namespace
