// ViT parity with timm on CUDA, fp32: logits and one cross-entropy backward of
// vit_base_patch16_224 against tests/oracle/export_timm_vit.py run with --grads --device cuda
// (the CTest fixture oracle_timm_vit_base_cuda). TF32 is off on both sides, so the tolerances are
// those of true fp32: logits within 1e-5 and every gradient within 1e-4, relative (L2).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include <colo/checkpoint/safetensors.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/vision_transformer.h>

namespace {

const std::string kModel = "vit_base_patch16_224";

std::string oracle_dir() {
  const char* dir = std::getenv("COLO_ORACLE_DIR");
  return dir != nullptr ? std::string(dir) : std::string(COLO_BINARY_DIR "/oracle");
}

double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.detach().to(torch::kCPU, torch::kFloat64);
  const auto e = expected.to(torch::kFloat64);
  return ((a - e).norm() / e.norm()).item<double>();
}

class VitBaseCudaParity : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(torch::cuda::is_available()) << "this test needs a CUDA device";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    weights_ = oracle_dir() + "/" + kModel + ".safetensors";
    const std::string reference = oracle_dir() + "/" + kModel + ".reference.safetensors";
    for (const auto& file : {weights_, reference}) {
      ASSERT_TRUE(::access(file.c_str(), F_OK) == 0)
          << file << " is missing: run `python3 " COLO_SOURCE_DIR "/tests/oracle/export_timm_vit.py --model " << kModel
          << " --out " << oracle_dir() << " --grads --device cuda` (CTest fixture oracle_timm_vit_base_cuda)";
    }
    reference_ = colo::checkpoint::read_safetensors(reference);
    ASSERT_TRUE(reference_.contains("labels")) << "rerun the oracle with --grads";
    model_ = colo::nn::make_vision_transformer(colo::nn::ViTConfig::preset("base"));
    colo::nn::load_pretrained(*model_, weights_);
    model_->to(torch::kCUDA);
    model_->eval();
  }

  std::string weights_;
  colo::checkpoint::SafetensorsFile reference_;
  std::shared_ptr<colo::nn::LayerStack> model_;
};

TEST_F(VitBaseCudaParity, LogitsAndGradients) {
  const auto images = reference_.at("input").to(torch::kCUDA);
  const auto logits = model_->forward(images);
  const double logits_error = relative_error(logits, reference_.at("logits"));
  std::cout << kModel << " (CUDA, fp32) logits: ||colo - timm|| / ||timm|| = " << logits_error << "\n";
  EXPECT_LT(logits_error, 1e-5);

  const auto loss = torch::nn::functional::cross_entropy(logits, reference_.at("labels").to(torch::kCUDA));
  std::cout << "loss: colo " << loss.item<double>() << ", timm " << reference_.at("loss").item<double>() << "\n";
  loss.backward();
  double worst = 0.0;
  std::string worst_name;
  for (const auto& item : model_->canonical_named_parameters()) {
    const double error = relative_error(item.value().grad(), reference_.at("grad." + item.key()));
    EXPECT_LT(error, 1e-4) << item.key();
    if (error >= worst) {
      worst = error;
      worst_name = item.key();
    }
  }
  std::cout << "gradients: worst ||colo - timm|| / ||timm|| = " << worst << " (" << worst_name << ")\n";
}

}  // namespace
