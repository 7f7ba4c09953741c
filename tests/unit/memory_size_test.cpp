// Memory sizes given in MiB or GiB are range-checked at 1 PiB (colo::kMaxMemoryBytes) in the
// option's own words: no size overflows to negative bytes. Each plugin's size options, as the
// plugin reads them, and the API's options.
#include <colo/booster/booster.h>
#include <colo/booster/checkpoint_io.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/booster/memory_plan.h>
#include <colo/engine/memory_size.h>
#include <colo/booster/plugin_options.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vit_config.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

using colo::kGibibytes;
using colo::kMebibytes;
using colo::memory_size_problem;

constexpr double kMaxMib = 1073741824.0;  // 2^30 MiB = 1 PiB
constexpr double kMaxGib = 1048576.0;     // 2^20 GiB

TEST(MemorySize, TheLimitIsOnePebibyteInEveryUnit) {
  EXPECT_EQ(memory_size_problem(kMaxMib - 1, kMebibytes, false), "");
  EXPECT_EQ(memory_size_problem(kMaxMib, kMebibytes, false), "");
  EXPECT_EQ(memory_size_problem(kMaxMib + 1, kMebibytes, false),
            "must be a size in MiB above 0 and at most 1073741824 (1 PiB)");
  EXPECT_EQ(memory_size_problem(kMaxGib, kGibibytes, true), "");
  EXPECT_EQ(memory_size_problem(kMaxGib + 1, kGibibytes, true), "must be a size in GiB from 0 to 1048576 (1 PiB)");
  EXPECT_EQ(colo::memory_size_bytes(kMaxMib, kMebibytes), colo::kMaxMemoryBytes);
  EXPECT_EQ(colo::memory_size_bytes(kMaxGib, kGibibytes), colo::kMaxMemoryBytes);
  EXPECT_EQ(colo::memory_size_bytes(1.5, kMebibytes), 1572864);
  EXPECT_THROW(colo::memory_size_bytes(kMaxGib + 1, kGibibytes), std::invalid_argument);
  // Zero where it means "not set", and nothing below it.
  EXPECT_EQ(memory_size_problem(0, kMebibytes, true), "");
  EXPECT_NE(memory_size_problem(0, kMebibytes, false), "");
  EXPECT_NE(memory_size_problem(-1e-9, kMebibytes, true), "");
  EXPECT_NE(memory_size_problem(NAN, kMebibytes, true), "");
  EXPECT_NE(memory_size_problem(INFINITY, kMebibytes, true), "");
}

// The message a memory plan under `plugin` with `options` fails with ("" when it does not).
std::string plan_error(const std::string& plugin, const colo::PluginOptions& options,
                       std::optional<int64_t> device_bytes = std::nullopt) {
  colo::MemoryPlanInputs inputs;
  inputs.model = colo::nn::summarize_vision_transformer(
      colo::nn::ViTConfig().image_size(16).patch_size(8).embed_dim(16).depth(2).num_heads(2).num_classes(10));
  inputs.world_size(1).global_batch_size(4).device_memory_bytes(device_bytes);
  try {
    colo::Booster::plan_memory(plugin, options, inputs);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(MemorySize, EveryPluginsSizeOptionIsRangeCheckedInItsOwnName) {
  const std::string over_mib = "1073741825";
  const std::string range = "must be a size in MiB above 0 and at most 1073741824 (1 PiB)";
  const std::string range_zero = "must be a size in MiB from 0 to 1073741824 (1 PiB)";
  struct Option {
    const char* plugin;
    const char* key;
    const std::string& words;
  };
  for (const auto& o : {Option{"torch_ddp", "bucket_cap_mb", range}, Option{"hybrid_parallel", "bucket_cap_mb", range},
                        Option{"low_level_zero", "reduce_bucket_size_mb", range},
                        Option{"gemini", "chunk_size_mb", range_zero}, Option{"gemini", "device_memory_mb", range_zero}}) {
    SCOPED_TRACE(std::string(o.plugin) + " " + o.key);
    colo::PluginOptions options{{o.key, over_mib}};
    if (std::string(o.plugin) == "low_level_zero") options["stage"] = "1";
    EXPECT_NE(plan_error(o.plugin, options).find("option " + std::string(o.key) + "='" + over_mib + "' " + o.words),
              std::string::npos)
        << plan_error(o.plugin, options);
    options[o.key] = "1073741824";  // the limit itself
    EXPECT_EQ(plan_error(o.plugin, options), "");
    options[o.key] = "1e14";
    EXPECT_NE(plan_error(o.plugin, options), "");
  }
  EXPECT_NE(plan_error("torch_ddp", {}, colo::kMaxMemoryBytes + 1).find("device_memory_bytes 1125899906842625 must be"),
            std::string::npos);
  EXPECT_EQ(plan_error("torch_ddp", {}, colo::kMaxMemoryBytes), "");
}

// CheckpointIO::max_shard_bytes is the plugins' (protected): reached through a subclass.
struct ShardBytes : colo::CheckpointIO {
  using colo::CheckpointIO::max_shard_bytes;
};

TEST(MemorySize, TheApisSizeOptionsAreRangeCheckedToo) {
  EXPECT_TRUE(colo::ZeroOptimizerOptions().bucket_cap_mb(kMaxMib).violations().empty());
  const auto zero = colo::ZeroOptimizerOptions().bucket_cap_mb(kMaxMib + 1).violations();
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_NE(zero.front().find("bucket_cap_mb (reduce_bucket_size_mb) 1073741825 must be a size in MiB"),
            std::string::npos)
      << zero.front();
  EXPECT_TRUE(colo::GeminiChunkOptions().chunk_size_mb(kMaxMib).device_memory_bytes(colo::kMaxMemoryBytes)
                  .violations()
                  .empty());
  EXPECT_EQ(colo::GeminiChunkOptions().chunk_size_mb(kMaxMib + 1).violations().size(), 1u);
  EXPECT_EQ(colo::GeminiChunkOptions().device_memory_bytes(colo::kMaxMemoryBytes + 1).violations().size(), 1u);
  EXPECT_EQ(ShardBytes::max_shard_bytes(colo::SaveOptions().shard(true).max_shard_mb(kMaxMib)),
            colo::kMaxMemoryBytes);
  EXPECT_THROW(ShardBytes::max_shard_bytes(colo::SaveOptions().shard(true).max_shard_mb(1e14)),
               std::invalid_argument);
}

}  // namespace
