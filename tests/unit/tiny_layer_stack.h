#pragma once

// A two-layer model for plugin tests that train and compare against plain LibTorch:
// tanh(x W0^T + b0) W1^T + b1, with canonical names l0.fc.* and l1.fc.*.
#include <colo/booster/plugin.h>
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>

namespace colo::test {

// y = tanh(x W^T + b), or x W^T + b for the last layer.
class TinyLinear : public nn::Layer {
 public:
  TinyLinear(int64_t in, int64_t out, std::string prefix, bool activation)
      : prefix_(std::move(prefix)), activation_(activation) {
    fc_ = register_module("fc", torch::nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto y = fc_->forward(x);
    return activation_ ? torch::tanh(y) : y;
  }
  std::string canonical_prefix() const override { return prefix_; }

 private:
  torch::nn::Linear fc_{nullptr};
  std::string prefix_;
  bool activation_;
};

// 4 → 8 → 3, initialised from `seed` (the same model every call with the same seed).
inline std::shared_ptr<nn::LayerStack> tiny_layer_stack(uint64_t seed) {
  torch::manual_seed(seed);
  auto model = std::make_shared<nn::LayerStack>();
  model->push_back(std::make_shared<TinyLinear>(4, 8, "l0.", true));
  model->push_back(std::make_shared<TinyLinear>(8, 3, "l1.", false));
  return model;
}

// A fixed batch for it: 16 inputs of 4 features, labels in [0, 3).
inline std::pair<torch::Tensor, torch::Tensor> tiny_batch() {
  torch::manual_seed(11);
  auto x = torch::randn({16, 4});
  auto y = torch::randint(0, 3, {16}, torch::kLong);
  return {x, y};
}

inline Criterion cross_entropy_criterion() {
  return [](const torch::Tensor& out, const torch::Tensor& y) { return torch::nn::functional::cross_entropy(out, y); };
}

// One training step of a boosted model through its plugin; returns the loss. Fails the test if
// the optimizer skipped the step.
inline torch::Tensor boosted_step(Plugin& plugin, Boosted& b, const torch::Tensor& x, const torch::Tensor& y) {
  auto loss = b.criterion(b.model->forward(x), y);
  plugin.backward(loss, *b.optimizer);
  EXPECT_TRUE(b.optimizer->step());
  b.optimizer->zero_grad();
  return loss;
}

}  // namespace colo::test
