// precision=fp8 in the memory plans (issue 39): a float8 linear layer keeps its input for backward
// as a one-byte float8 copy, not in bf16, and a float8 copy of its weight per pass. Before, fp8 was
// planned as bf16: every activation two bytes, no weight copies.
#include <colo/booster/booster.h>
#include <colo/booster/memory_plan.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vit_config.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace {

// 17 tokens, width 64, hidden 256: every block's linears fit float8 (multiples of 16); the head's
// 10 classes do not, and 32 do.
colo::nn::ViTConfig small_vit(int64_t classes) {
  return colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(3).num_heads(4).num_classes(classes);
}

// One rank's planned activations with 8 samples a pass (one data-parallel rank: `world` ranks are
// tensor-parallel).
int64_t activations(const std::string& plugin, colo::PluginOptions options, const std::string& precision,
                    int64_t classes, int world = 1) {
  options["precision"] = precision;
  colo::MemoryPlanInputs inputs;
  inputs.model = colo::nn::summarize_vision_transformer(small_vit(classes));
  inputs.world_size(world).global_batch_size(8);
  return colo::Booster::plan_memory(plugin, options, inputs).ranks.at(0).bytes_of("activations");
}

TEST(MemoryPlanFp8, Float8LinearsKeepOneByteInputsAndAWeightCopyPerPass) {
  const auto c = small_vit(10);
  const int64_t t = c.num_tokens(), d = c.embed_dim(), h = c.mlp_hidden_dim(), depth = c.depth(), samples = 8;
  // Per block: the inputs of qkv, proj, fc1 (3TD) and fc2 (TH) drop from two bytes to one; the
  // weights' float8 copies add 3D² + D² + 2DH bytes per pass.
  const int64_t saved_per_sample = depth * (3 * t * d + t * h);
  const int64_t weight_copies = depth * (4 * d * d + 2 * d * h);
  for (const std::string plugin : {"torch_ddp", "low_level_zero", "gemini"}) {
    SCOPED_TRACE(plugin);
    const int64_t bf16 = activations(plugin, {}, "bf16", 10);
    EXPECT_EQ(activations(plugin, {}, "fp8", 10), bf16 - samples * saved_per_sample + weight_copies);
  }
  // A head of 32 classes multiplies in float8 too: its input (the pooled token's norm, D per
  // sample) in one byte, and its weight's copy.
  const int64_t bf16_32 = activations("torch_ddp", {}, "bf16", 32);
  EXPECT_EQ(activations("torch_ddp", {}, "fp8", 32),
            bf16_32 - samples * (saved_per_sample + d) + weight_copies + 32 * d);
  // Tensor parallelism over 2 ranks splits proj's and fc2's inputs and every block weight; the
  // norms' outputs (qkv's and fc1's inputs) stay whole. hybrid_parallel's head is not split.
  const colo::PluginOptions tp2 = {{"tp_size", "2"}};
  const int64_t bf16_tp = activations("hybrid_parallel", tp2, "bf16", 10, 2);
  EXPECT_EQ(activations("hybrid_parallel", tp2, "fp8", 10, 2),
            bf16_tp - samples * depth * (2 * t * d + t * d / 2 + t * h / 2) + weight_copies / 2);
}

// The 2D, 2.5D and 3D tensor modes have no float8 products (only 1D's parallel linears do): fp8
// with them is refused, plan and run alike, rather than planned and run as bf16 under fp8's name.
TEST(MemoryPlanFp8, GridTensorModesRefuseFp8) {
  for (const auto& [mode, ranks] : {std::pair<std::string, int>{"2d", 4}, {"2.5d", 8}, {"3d", 8}}) {
    SCOPED_TRACE(mode);
    colo::PluginOptions grid = {{"tp_size", std::to_string(ranks)}, {"tp_mode", mode}};
    if (mode == "2.5d") grid["tp_depth"] = "2";  // two layers of a 2 x 2 grid
    EXPECT_GT(activations("hybrid_parallel", grid, "bf16", 32, ranks), 0);
    try {
      activations("hybrid_parallel", grid, "fp8", 32, ranks);
      ADD_FAILURE() << "precision=fp8 with tp_mode=" << mode << " was planned";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("precision=fp8 with tp_mode=" + mode), std::string::npos) << message;
      EXPECT_NE(message.find("use tp_mode=1d, or precision=bf16"), std::string::npos) << message;
    }
  }
  // 1D keeps its float8 products.
  EXPECT_GT(activations("hybrid_parallel", {{"tp_size", "2"}, {"tp_mode", "1d"}}, "fp8", 32, 2), 0);
}

}  // namespace
