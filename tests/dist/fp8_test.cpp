// precision=fp8 under every plugin that has `precision`. Where this rank's device has float8
// products (an H100/H200 under NCCL) the boosted ViT's linear layers multiply in float8 (all but
// the 10-class head) and training follows the bf16 run closely; everywhere else (every CPU, the
// CI) boost refuses before training, saying why and which precision to use.
#include <colo/booster/booster.h>
#include <colo/booster/training_state.h>
#include <colo/nn/fp8_linear.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

const char* const kPrecisionPlugins[] = {"torch_ddp", "low_level_zero", "gemini", "hybrid_parallel"};

Trajectory train_with(const std::string& plugin_name, const std::string& precision, const GlobalBatches& data,
                      nn::Fp8Coverage* coverage, const std::string& fp8_scaling = "") {
  auto model = make_vit();
  PluginOptions options{{"precision", precision}};
  if (!fp8_scaling.empty()) options["fp8_scaling"] = fp8_scaling;
  auto plugin = make_plugin(plugin_name, options);
  auto b = plugin->boost({model, conditioned_adamw(*model), cross_entropy, nullptr, nullptr});
  if (coverage != nullptr) *coverage = nn::fp8_coverage(*model);
  return train_boosted(*plugin, b, data);
}

TEST(Fp8Precision, EveryPluginRefusesWithoutFloat8ProductsOrTrainsNearBf16) {
  const auto reason = nn::fp8_unavailable_reason(device());
  const auto data = make_batches(3, kPerRankBatch * world()->size());
  for (const std::string name : kPrecisionPlugins) {
    SCOPED_TRACE(name);
    if (!reason.empty()) {
      try {
        train_with(name, "fp8", data, nullptr, "delayed");
        ADD_FAILURE() << "precision=fp8 fp8_scaling=delayed trained on " << device().str();
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
      }
      try {
        train_with(name, "fp8", data, nullptr);
        ADD_FAILURE() << "precision=fp8 trained on " << device().str();
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("precision=fp8"), std::string::npos) << what;
        EXPECT_NE(what.find(reason), std::string::npos) << what;
        EXPECT_NE(what.find("precision=bf16"), std::string::npos) << what;
      }
      continue;
    }
    nn::Fp8Coverage coverage;
    const auto fp8 = train_with(name, "fp8", data, &coverage);
    const auto bf16 = train_with(name, "bf16", data, nullptr);
    // tiny_vit: 2 blocks of qkv, proj, fc1, fc2 (widths 32, 96, 128); the head's 10 classes stay bf16.
    EXPECT_EQ(coverage.converted.size(), 8u) << coverage.summary();
    ASSERT_EQ(coverage.kept.size(), 1u) << coverage.summary();
    EXPECT_NE(coverage.kept[0].find("head"), std::string::npos) << coverage.summary();
    // e4m3 keeps 3 mantissa bits: a few per cent per product, far less on the loss.
    expect_losses_near(fp8, bf16, 0.02);
    // Delayed scaling (its first step scaled as current scaling, the next from the amaxes every
    // rank agreed on): as near.
    const auto delayed = train_with(name, "fp8", data, nullptr, "delayed");
    expect_losses_near(delayed, bf16, 0.02);
  }
}

// Delayed scaling's histories are training state: a run saved after two steps and resumed takes
// the same next two steps, bit for bit, as the run that went on (every plugin; the checkpoints'
// path across layouts is fp8_scaling_checkpoint_test.cpp's, on every machine).
TEST(Fp8Precision, DelayedScalingResumesExactlyUnderEveryPlugin) {
  if (const auto reason = nn::fp8_unavailable_reason(device()); !reason.empty()) {
    GTEST_SKIP() << "float8 products: " << reason;
  }
  const auto data = make_batches(4, kPerRankBatch * world()->size(), 31);
  const GlobalBatches first{{data.images[0], data.images[1]}, {data.labels[0], data.labels[1]}};
  const GlobalBatches next{{data.images[2], data.images[3]}, {data.labels[2], data.labels[3]}};
  const PluginOptions options{{"precision", "fp8"}, {"fp8_scaling", "delayed"}, {"fp8_amax_history_len", "4"}};
  for (const std::string name : kPrecisionPlugins) {
    SCOPED_TRACE(name);
    const auto dir = shared_directory("fp8_delayed_resume_" + name);
    Trajectory want, got;
    {
      auto plugin = make_plugin(name, options);
      Booster booster(plugin);
      auto model = make_vit();
      auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
      train_boosted(*plugin, b, first);
      booster.save_state(b, TrainingProgress{}, dir);
      want = train_boosted(*plugin, b, next);
    }
    {
      auto plugin = make_plugin(name, options);
      Booster booster(plugin);
      auto model = make_vit(tiny_vit(), /*seed=*/77);
      auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
      booster.load_state(b, dir);
      got = train_boosted(*plugin, b, next);
    }
    EXPECT_EQ(got.losses, want.losses) << "the resumed run's losses";
    remove_shared_directory(dir);
  }
}

}  // namespace
}  // namespace colo::test
