#pragma once

// A two-layer model for plugin tests that train and compare against plain LibTorch:
// tanh(x W0^T + b0) W1^T + b1, with canonical names l0.fc.* and l1.fc.*.
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <torch/torch.h>

#include <memory>
#include <string>

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

}  // namespace colo::test
