// The summaries a memory plan is made from: summarize_vision_transformer and summarize_resnet
// describe, from the configuration alone, exactly what summarize() reads from the built model
// (names, shapes, order, footprints, heads), so that a plan made without building the model is
// the plan of the model that runs.
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/resnet.h>
#include <colo/nn/vision_transformer.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace {

using colo::nn::ModelSummary;

void expect_same_summary(const ModelSummary& got, const ModelSummary& want, const std::string& what) {
  ASSERT_EQ(got.layers.size(), want.layers.size()) << what;
  for (std::size_t l = 0; l < want.layers.size(); ++l) {
    const auto& g = got.layers[l];
    const auto& w = want.layers[l];
    SCOPED_TRACE(what + ", layer " + w.name);
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.attention_heads, w.attention_heads);
    EXPECT_EQ(g.activations.kept, w.activations.kept);
    EXPECT_EQ(g.activations.kept_tensor_parallel, w.activations.kept_tensor_parallel);
    EXPECT_EQ(g.activations.output, w.activations.output);
    ASSERT_EQ(g.parameters.size(), w.parameters.size());
    for (std::size_t p = 0; p < w.parameters.size(); ++p) {
      EXPECT_EQ(g.parameters[p].name, w.parameters[p].name);
      EXPECT_EQ(g.parameters[p].shape, w.parameters[p].shape) << w.parameters[p].name;
      EXPECT_EQ(g.parameters[p].numel, w.parameters[p].numel) << w.parameters[p].name;
      EXPECT_EQ(g.parameters[p].trainable, w.parameters[p].trainable) << w.parameters[p].name;
    }
  }
  EXPECT_EQ(got.num_parameters(), want.num_parameters()) << what;
}

TEST(ModelSummary, TheVitSummaryFromItsConfigurationIsTheBuiltModels) {
  using colo::nn::ViTConfig;
  const std::vector<std::pair<std::string, ViTConfig>> configs = {
      {"tiny, 3 blocks", ViTConfig().image_size(32).patch_size(8).embed_dim(24).depth(3).num_heads(3).num_classes(7)},
      {"no qkv bias, one channel, MLP ratio 2.5",
       ViTConfig().image_size(28).patch_size(7).in_channels(1).embed_dim(20).depth(2).num_heads(4).mlp_ratio(2.5).qkv_bias(
           false)},
      {"one block, 2 classes", ViTConfig().image_size(16).patch_size(16).embed_dim(8).depth(1).num_heads(1).num_classes(2)},
  };
  for (const auto& [what, config] : configs) {
    expect_same_summary(colo::nn::summarize_vision_transformer(config),
                        colo::nn::summarize(*colo::nn::make_vision_transformer(config)), what);
  }
}

TEST(ModelSummary, TheResNetSummaryFromItsConfigurationIsTheBuiltModels) {
  using colo::nn::ResNetConfig;
  for (const auto& name : ResNetConfig::preset_names()) {
    // Narrower than the presets (the same structure and names): built in milliseconds.
    const auto config = ResNetConfig::preset(name).width(4).num_classes(5).in_channels(1);
    expect_same_summary(colo::nn::summarize_resnet(config), colo::nn::summarize(*colo::nn::make_resnet(config)), name);
  }
  const auto odd = ResNetConfig().blocks({1, 3}).width(6).num_classes(3);
  expect_same_summary(colo::nn::summarize_resnet(odd), colo::nn::summarize(*colo::nn::make_resnet(odd)), "two stages");
}

// What a summary made from a configuration allocates, whatever the model's size: nothing (the
// 6.45B-parameter ViT's summary once built one 200M-parameter block, 0.8 GB).
TEST(ModelSummary, ASummaryFromAConfigurationAllocatesNoTensor) {
  const auto config = colo::nn::ViTConfig().embed_dim(4096).depth(32).num_heads(64).mlp_ratio(4).num_classes(1000);
  const auto summary = colo::nn::summarize_vision_transformer(config);
  EXPECT_EQ(summary.layers.size(), 34u);
  EXPECT_NEAR(static_cast<double>(summary.num_parameters()), 6.45e9, 0.01e9);
  EXPECT_EQ(summary.layers[5].attention_heads, 64);
  // 2^17 wide: one block of this ViT would need 800 GB; its summary is a few vectors.
  const auto huge = colo::nn::ViTConfig().embed_dim(int64_t{1} << 17).depth(2).num_heads(1024);
  EXPECT_EQ(colo::nn::summarize_vision_transformer(huge).layers[1].numel(),
            12 * (int64_t{1} << 34) + 13 * (int64_t{1} << 17));
}

}  // namespace
