// colo::nn::ResNet against timm's resnet18 (torchvision's names and structure): reference tensors
// from tests/oracle/export_resnet.py (the CTest fixture oracle_timm_resnet18).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <colo/checkpoint/safetensors.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/resnet.h>

namespace {

using colo::nn::ResNetConfig;

double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kDouble), e = expected.to(torch::kDouble);
  return ((a - e).norm() / e.norm().clamp_min(1e-30)).item<double>();
}

struct Reference {
  std::string weights;
  colo::checkpoint::SafetensorsFile tensors;
};

Reference read_reference() {
  const std::string dir = COLO_BINARY_DIR "/oracle/";
  Reference r{dir + "resnet18.safetensors", {}};
  const std::string reference = dir + "resnet18.reference.safetensors";
  for (const auto& file : {r.weights, reference}) {
    if (::access(file.c_str(), F_OK) != 0) {
      throw std::runtime_error(file + " is missing: run `python3 " COLO_SOURCE_DIR "/tests/oracle/export_resnet.py --out " +
                               dir + "` (CTest fixture oracle_timm_resnet18)");
    }
  }
  r.tensors = colo::checkpoint::read_safetensors(reference);
  return r;
}

std::shared_ptr<colo::nn::LayerStack> resnet18_for_reference() {
  return colo::nn::make_resnet(ResNetConfig::preset("resnet18").num_classes(10));
}

TEST(ResNet, NamesShapesAndOrderAreTorchvisions) {
  const auto r = read_reference();
  const auto weights = colo::checkpoint::read_safetensors(r.weights);
  std::vector<std::string> timm_keys;
  std::istringstream keys(weights.metadata.at("state_dict_keys"));
  for (std::string key; std::getline(keys, key);) timm_keys.push_back(key);
  const auto model = resnet18_for_reference();
  // Parameters in state_dict order; buffers (running statistics) by name.
  std::vector<std::string> timm_params;
  std::set<std::string> timm_buffers;
  for (const auto& key : timm_keys) {
    const bool buffer = key.find("running_") != std::string::npos || key.find("num_batches_tracked") != std::string::npos;
    if (buffer) {
      timm_buffers.insert(key);
    } else {
      timm_params.push_back(key);
    }
  }
  EXPECT_EQ(model->canonical_parameter_names(), timm_params);
  std::set<std::string> colo_buffers;
  for (const auto& item : model->canonical_named_buffers()) colo_buffers.insert(item.key());
  EXPECT_EQ(colo_buffers, timm_buffers);
  for (const auto& item : model->canonical_named_parameters()) {
    EXPECT_EQ(item.value().sizes(), weights.at(item.key()).sizes()) << item.key();
  }
  // Stem, 8 blocks, head: a pipeline can cut between any two blocks.
  EXPECT_EQ(model->size(), 10u);
}

TEST(ResNet, TrainStepMatchesTimm) {
  const auto r = read_reference();
  const auto model = resnet18_for_reference();
  colo::nn::load_pretrained(*model, r.weights);
  model->train();
  const auto logits = model->forward(r.tensors.at("input"));
  EXPECT_LT(relative_error(logits.detach(), r.tensors.at("train_logits")), 1e-5) << "train-mode logits";
  const auto loss = torch::nn::functional::cross_entropy(logits, r.tensors.at("labels"));
  EXPECT_LT(relative_error(loss.detach(), r.tensors.at("loss")), 1e-5);
  loss.backward();
  double worst = 0.0;
  for (const auto& item : model->canonical_named_parameters()) {
    const double error = relative_error(item.value().grad(), r.tensors.at("grad." + item.key()));
    EXPECT_LT(error, 1e-4) << item.key();
    worst = std::max(worst, error);
  }
  std::cout << "resnet18 gradients: worst ||colo - timm|| / ||timm|| = " << worst << "\n";
  // BatchNorm's running statistics moved once, as timm's did.
  for (const auto& item : model->canonical_named_buffers()) {
    const auto& want = r.tensors.at("after." + item.key());
    if (item.value().is_floating_point()) {
      EXPECT_LT(relative_error(item.value(), want), 1e-5) << item.key();
    } else {
      EXPECT_TRUE(torch::equal(item.value(), want)) << item.key();
    }
  }
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_LT(relative_error(model->forward(r.tensors.at("input")), r.tensors.at("eval_logits")), 1e-5)
      << "eval-mode logits (running statistics)";
}

TEST(ResNet, PresetsAndBadConfigs) {
  torch::manual_seed(0);
  const auto resnet50 = colo::nn::make_resnet(ResNetConfig::preset("resnet50"));
  int64_t count = 0;
  for (const auto& p : resnet50->parameters()) count += p.numel();
  EXPECT_EQ(count, 25557032) << "torchvision's resnet50 has 25,557,032 parameters";
  EXPECT_EQ(resnet50->size(), 18u);  // stem, 3 + 4 + 6 + 3 blocks, head
  EXPECT_EQ(resnet50->forward(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 1000}));
  try {
    ResNetConfig::preset("resnet7");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("resnet18, resnet34, resnet50, resnet101"), std::string::npos) << e.what();
  }
  EXPECT_THROW(colo::nn::make_resnet(ResNetConfig().blocks({2, 0}).width(0)), std::invalid_argument);
}

}  // namespace
