// The normalisation published beside pretrained weights (nn::read_pretrained,
// nn::read_pretrained_normalization): every malformed preprocessor_config.json or timm config.json
// is an error naming the file and what is wrong, never a silent fall back to ImageNet's statistics.
#include <colo/checkpoint/safetensors.h>
#include <colo/nn/pretrained.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "temporary_directory.h"

namespace {

using colo::testing::error_of;

// A directory of "weights" (one random tensor: read_pretrained does not check the architecture)
// and `file` holding `contents` beside them.
class PretrainedNormalization : public ::testing::Test {
 protected:
  void write(const std::string& file, const std::string& contents) {
    colo::checkpoint::write_safetensors(dir_ / "model.safetensors", {{"cls_token", torch::randn({1, 1, 4})}});
    std::ofstream(dir_ / file) << contents;
  }
  // read_pretrained's error for the directory.
  std::string error() {
    return error_of<std::invalid_argument>([&] { colo::nn::read_pretrained(dir_.path()); });
  }
  colo::testing::TemporaryDirectory dir_;
};

TEST_F(PretrainedNormalization, MalformedPreprocessorConfigsAreErrorsNamingTheFileAndTheFault) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})", "image_mean is [0.5,0.5]: expected 3 numbers"},
      {R"({"image_mean": [0.5, 0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})", "image_mean is [0.5,0.5,0.5,0.5]"},
      {R"({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.0, 0.5]})",
       "image_std[1] is 0: a standard deviation must be positive"},
      {R"({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, -0.1]})", "image_std[2] is -0.1"},
      {R"({"image_mean": [0.5, "a", 0.5], "image_std": [0.5, 0.5, 0.5]})", "image_mean[1] is \"a\" (string), not a number"},
      {R"({"image_mean": "0.5", "image_std": [0.5, 0.5, 0.5]})", "image_mean is \"0.5\": expected 3 numbers"},
      {R"({"image_mean": [0.5, 0.5, 0.5]})", "has image_mean but no image_std"},
      {R"({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5)", "not valid JSON"},
      {R"([0.5, 0.5, 0.5])", "not a JSON object"},
      {R"({"do_normalize": "yes", "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})",
       "do_normalize is \"yes\", not true or false"},
  };
  for (const auto& [contents, fault] : cases) {
    write("preprocessor_config.json", contents);
    const std::string message = error();
    EXPECT_NE(message.find(dir_ / "preprocessor_config.json"), std::string::npos) << contents << "\n" << message;
    EXPECT_NE(message.find(fault), std::string::npos) << contents << "\n" << message;
    EXPECT_NE(message.find("fix the file"), std::string::npos) << message;
  }
}

TEST_F(PretrainedNormalization, MalformedTimmConfigsAreErrorsToo) {
  write("config.json", R"({"pretrained_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0, 0.5]}})");
  std::string message = error();
  EXPECT_NE(message.find(dir_ / "config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("std[1] is 0"), std::string::npos) << message;
  write("config.json", R"({"pretrained_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5])");
  EXPECT_NE(error().find("not valid JSON"), std::string::npos);
}

TEST_F(PretrainedNormalization, WellFormedFilesGiveTheirValues) {
  write("preprocessor_config.json", R"({"image_mean": [0.1, 0.2, 0.3], "image_std": [0.4, 0.5, 0.6]})");
  auto weights = colo::nn::read_pretrained(dir_.path());
  EXPECT_EQ(weights.mean, (std::vector<double>{0.1, 0.2, 0.3}));
  EXPECT_EQ(weights.std, (std::vector<double>{0.4, 0.5, 0.6}));
  // One number stands for the three channels (Hugging Face's processors allow it).
  write("preprocessor_config.json", R"({"image_mean": 0.25, "image_std": 0.75})");
  weights = colo::nn::read_pretrained(dir_.path());
  EXPECT_EQ(weights.mean, (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_EQ(weights.std, (std::vector<double>{0.75, 0.75, 0.75}));
  // No normalisation at all: the model saw the [0, 1] pixels.
  write("preprocessor_config.json", R"({"do_normalize": false, "image_mean": [0.5, 0.5, 0.5]})");
  weights = colo::nn::read_pretrained(dir_.path());
  EXPECT_EQ(weights.mean, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(weights.std, (std::vector<double>{1, 1, 1}));
  // A file without the keys says nothing: timm's config.json, then nothing (ImageNet's, the caller's choice).
  write("preprocessor_config.json", R"({"size": 224})");
  write("config.json", R"({"pretrained_cfg": {"mean": [0.3, 0.3, 0.3], "std": [0.2, 0.2, 0.2]}})");
  EXPECT_EQ(colo::nn::read_pretrained(dir_.path()).mean, (std::vector<double>{0.3, 0.3, 0.3}));
  write("config.json", R"({"architectures": ["ViTForImageClassification"]})");
  EXPECT_TRUE(colo::nn::read_pretrained(dir_.path()).mean.empty());
}

}  // namespace
