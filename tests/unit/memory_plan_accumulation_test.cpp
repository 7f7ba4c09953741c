// Gradient accumulation in the sharding plugins' memory plans: under no_sync a rank keeps whole
// gradients between passes (gemini, ZeRO-2), and it keeps none when every pass synchronises
// (MemoryPlanInputs::sync_every_pass). On two H200s the 6.45B ViT under gemini planned 70.6 GiB for
// a run that synchronised every micro-batch and peaked at 58.5 (2026-11-27): the plan counted the
// 12 GiB of whole bf16 gradients that only no_sync keeps.
#include <colo/booster/booster.h>
#include <colo/booster/memory_plan.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vit_config.h>
#include <gtest/gtest.h>

#include <string>

namespace {

constexpr const char* kKeptWhole = "gradients kept whole for accumulation";

colo::nn::ModelSummary small_vit() {
  return colo::nn::summarize_vision_transformer(
      colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(3).num_heads(4).num_classes(10));
}

// The bytes one rank of `plugin` plans for whole gradients, with `passes` passes per step.
int64_t kept_whole(const std::string& plugin, const colo::PluginOptions& options, int64_t passes, bool sync_every_pass) {
  colo::MemoryPlanInputs inputs;
  inputs.model = small_vit();
  inputs.world_size(2).global_batch_size(2 * 4 * passes).accumulation_steps(passes).sync_every_pass(sync_every_pass);
  return colo::Booster::plan_memory(plugin, options, inputs).ranks.at(0).bytes_of(kKeptWhole);
}

TEST(MemoryPlanAccumulation, NoSyncKeepsWholeGradientsAndSynchronisedPassesKeepNone) {
  const colo::PluginOptions bf16 = {{"precision", "bf16"}};
  const int64_t whole_bf16 = 2 * small_vit().num_trainable();
  colo::PluginOptions zero2 = bf16;
  zero2["stage"] = "2";
  for (const auto& [plugin, options] : {std::pair{std::string("gemini"), bf16}, std::pair{std::string("low_level_zero"), zero2}}) {
    SCOPED_TRACE(plugin);
    EXPECT_EQ(kept_whole(plugin, options, 1, false), 0);  // one pass: nothing to keep between passes
    EXPECT_EQ(kept_whole(plugin, options, 2, false), whole_bf16);
    EXPECT_EQ(kept_whole(plugin, options, 2, true), 0);
    EXPECT_EQ(kept_whole(plugin, options, 16, true), 0);
  }
}

}  // namespace
