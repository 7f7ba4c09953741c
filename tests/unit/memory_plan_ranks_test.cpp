// A memory plan names the ranks that hold alike as ranges with their count ("0-3,16-19 (8
// ranks)"), where it printed "0,1,2,...,19 (8 ranks)" for {0-3, 16-19}: a list that reads as 20.
#include <colo/booster/booster.h>
#include <colo/booster/memory_plan.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vit_config.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

// The rank lists of hybrid_parallel's plan with `options` on `world` ranks, one per pipeline stage.
std::vector<std::string> planned_ranks(const colo::PluginOptions& options, int world) {
  colo::MemoryPlanInputs inputs;
  inputs.model = colo::nn::summarize_vision_transformer(
      colo::nn::ViTConfig().image_size(16).patch_size(8).embed_dim(16).depth(6).num_heads(8).num_classes(10));
  inputs.world_size(world).global_batch_size(world * 4).device_is_gpu(false);
  std::vector<std::string> ranks;
  for (const auto& rank : colo::Booster::plan_memory("hybrid_parallel", options, inputs).ranks) ranks.push_back(rank.ranks);
  return ranks;
}

TEST(MemoryPlanRanks, RanksThatHoldAlikeArePrintedAsRangesWithTheirCount) {
  // tp 4 x pp 4 on 32 ranks: stage 0 is dp 0's ranks 0-3 and dp 1's 16-19 (tp innermost).
  EXPECT_EQ(planned_ranks({{"tp_size", "4"}, {"pp_size", "4"}, {"num_microbatches", "4"}}, 32),
            (std::vector<std::string>{"0-3,16-19 (8 ranks)", "4-7,20-23 (8 ranks)", "8-11,24-27 (8 ranks)",
                                      "12-15,28-31 (8 ranks)"}));
  // One run; two ranks a pair; one rank alone.
  EXPECT_EQ(planned_ranks({{"tp_size", "8"}}, 8), (std::vector<std::string>{"0-7 (8 ranks)"}));
  EXPECT_EQ(planned_ranks({{"pp_size", "2"}, {"num_microbatches", "2"}}, 4),
            (std::vector<std::string>{"0,2 (2 ranks)", "1,3 (2 ranks)"}));
  EXPECT_EQ(planned_ranks({{"pp_size", "2"}, {"num_microbatches", "2"}}, 2), (std::vector<std::string>{"0", "1"}));
  // Six runs are all shown; seven elide the middle ones.
  EXPECT_EQ(planned_ranks({{"pp_size", "2"}, {"num_microbatches", "2"}}, 12).front(), "0,2,4,6,8,10 (6 ranks)");
  EXPECT_EQ(planned_ranks({{"pp_size", "2"}, {"num_microbatches", "2"}}, 14).front(), "0,2,4,...,12 (7 ranks)");
}

}  // namespace
