// Pretrained weights for fine-tuning (nn::read_pretrained, nn::load_pretrained with
// FineTuneOptions): a head of another class count is re-initialised, position embeddings of
// another grid equal timm's own loading at that image size (tests/oracle/export_finetune_vit.py,
// fixture oracle_finetune_vit), sharded directories and their preprocessing configs are read,
// and a checkpoint of another architecture is a short error.
#include <colo/checkpoint/safetensors.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/files/files.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/vision_transformer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>

#include "temporary_directory.h"

namespace {

const std::string kOracle = COLO_BINARY_DIR "/oracle/finetune_vit_tiny";

std::map<std::string, torch::Tensor> by_name(const colo::nn::NamedTensors& tensors) {
  return {tensors.begin(), tensors.end()};
}

std::map<std::string, torch::Tensor> model_state(colo::nn::LayerStack& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.canonical_named_parameters()) out[item.key()] = item.value().detach().clone();
  for (const auto& item : model.canonical_named_buffers()) out[item.key()] = item.value().detach().clone();
  return out;
}

class FineTuneLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!colo::files::exists(kOracle + ".safetensors")) {
      FAIL() << kOracle << ".safetensors is missing: run python3 " COLO_SOURCE_DIR
             << "/tests/oracle/export_finetune_vit.py --out " COLO_BINARY_DIR "/oracle (fixture oracle_finetune_vit)";
    }
  }
};

TEST_F(FineTuneLoad, ReplacesTheHeadAndResamplesPositionsAsTimmDoes) {
  const auto weights = colo::nn::read_pretrained(kOracle + ".safetensors");
  EXPECT_FALSE(weights.hugging_face);
  const auto checkpoint = by_name(weights.state);
  const auto reference = by_name(colo::checkpoint::read_safetensors(kOracle + ".reference.safetensors").tensors);
  for (const int64_t size : {112, 384}) {
    torch::manual_seed(1);
    auto model = colo::nn::make_vision_transformer(colo::nn::ViTConfig::preset("tiny").image_size(size).num_classes(5));
    const auto before = model_state(*model);
    const auto report = colo::nn::load_pretrained(*model, weights);
    EXPECT_TRUE(report.head_replaced);
    EXPECT_TRUE(report.pos_embed_resampled);
    ASSERT_EQ(report.notes.size(), 2U);
    EXPECT_EQ(report.notes[0], "head: 1000 classes in the checkpoint, 5 in the model: re-initialised");
    const auto after = model_state(*model);
    // timm's pretrained loading at this size: the same position embeddings.
    EXPECT_LT((after.at("pos_embed") - reference.at("pos_embed_" + std::to_string(size))).abs().max().item<double>(),
              1e-6)
        << size;
    // The head is the model's own; everything else is the checkpoint's.
    EXPECT_TRUE(torch::equal(after.at("head.weight"), before.at("head.weight")));
    EXPECT_TRUE(torch::equal(after.at("head.bias"), before.at("head.bias")));
    for (const auto& [name, tensor] : after) {
      if (name == "pos_embed" || name.rfind("head.", 0) == 0) continue;
      EXPECT_TRUE(torch::equal(tensor, checkpoint.at(name))) << name;
    }
  }
  // Without the options, the same differences are errors.
  auto model = colo::nn::make_vision_transformer(colo::nn::ViTConfig::preset("tiny").image_size(112).num_classes(5));
  EXPECT_THROW(colo::nn::load_pretrained(*model, weights,
                                         colo::nn::FineTuneOptions().replace_head(false).resample_pos_embed(false)),
               std::invalid_argument);
}

TEST_F(FineTuneLoad, ReadsShardedDirectoriesAndTheirNormalisation) {
  colo::testing::TemporaryDirectory dir;
  const auto state = colo::checkpoint::read_safetensors(kOracle + ".safetensors").tensors;
  colo::checkpoint::save_safetensors_set(dir.path(), "model", state, /*max_shard_bytes=*/4 << 20);
  ASSERT_TRUE(colo::files::exists(dir / "model.safetensors.index.json"));
  std::ofstream(dir / "preprocessor_config.json") << R"({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})";
  const auto weights = colo::nn::read_pretrained(dir.path());
  EXPECT_EQ(weights.state.size(), state.size());
  EXPECT_EQ(weights.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(weights.std, (std::vector<double>{0.5, 0.5, 0.5}));
  auto model = colo::nn::make_vision_transformer(colo::nn::ViTConfig::preset("tiny"));
  const auto report = colo::nn::load_pretrained(*model, weights);
  EXPECT_TRUE(report.notes.empty());
  EXPECT_TRUE(torch::equal(model_state(*model).at("head.weight"), by_name(state).at("head.weight")));
  colo::testing::TemporaryDirectory empty;
  try {
    colo::nn::read_pretrained(empty.path());
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("neither model.safetensors nor"), std::string::npos) << e.what();
  }
}

TEST_F(FineTuneLoad, AnotherArchitectureIsAShortErrorThatSaysWhatTheCheckpointHolds) {
  const auto weights = colo::nn::read_pretrained(kOracle + ".safetensors");
  auto small = colo::nn::make_vision_transformer(colo::nn::ViTConfig::preset("small").num_classes(5).in_channels(1));
  try {
    colo::nn::load_pretrained(*small, weights);
    ADD_FAILURE() << "a tiny checkpoint loaded into a small ViT";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    const auto lines = std::count(message.begin(), message.end(), '\n');
    EXPECT_LE(lines, 12) << message;  // not one line per tensor (150 of them)
    for (const char* part : {"shape mismatch (", "blocks.{0..11}.attn.qkv.weight (12 blocks): checkpoint [576, 192] vs "
                                                 "model [1152, 384]",
                             "... and", "the checkpoint holds a ViT of patch 16, width 192, depth 12",
                             "the model is a ViT of patch 16, width 384, depth 12",
                             // The file's own head and channels, not the model's head that replaced it.
                             "224x224 images), 3 input channels, 1000 classes\n", "1 input channel, 5 classes"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << " not in:\n" << message;
    }
  }
}

// A checkpoint whose head the model replaces (same width, other classes) and whose position
// embeddings it resamples, failing on another patch size and channel count: the error describes
// the file as it is (1000 classes, 197 tokens, 3 channels), where it described the replaced head's
// classes and the resampled grid.
TEST_F(FineTuneLoad, AMismatchDescribesTheFilesOwnHeadTokensAndChannels) {
  const auto weights = colo::nn::read_pretrained(kOracle + ".safetensors");
  auto model = colo::nn::make_vision_transformer(
      colo::nn::ViTConfig::preset("tiny").patch_size(8).num_classes(5).in_channels(1));
  try {
    colo::nn::load_pretrained(*model, weights);
    ADD_FAILURE() << "a patch-16 RGB checkpoint loaded into a patch-8 grayscale ViT";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const char* part : {"the checkpoint holds a ViT of patch 16, width 192, depth 12, MLP 768, 197 tokens (14x14 "
                             "patches: 224x224 images), 3 input channels, 1000 classes\n",
                             "the model is a ViT of patch 8, width 192, depth 12, MLP 768, 785 tokens (28x28 patches: "
                             "224x224 images), 1 input channel, 5 classes"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << " not in:\n" << message;
    }
  }
}

}  // namespace
