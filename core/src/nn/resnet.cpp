#include <colo/nn/resnet.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include <colo/nn/layer.h>

namespace colo::nn {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// torchvision's init: convolutions Kaiming-normal (fan-out, ReLU gain), BatchNorm weight 1 and bias 0.
void init_conv(const torch::nn::Conv2d& c) {
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
}
void init_norm(const torch::nn::BatchNorm2d& n) {
  torch::NoGradGuard no_grad;
  n->weight.fill_(1.0);
  n->bias.zero_();
}

// conv1 (7x7, stride 2), bn1, ReLU, 3x3 max-pool with stride 2.
class ResNetStem : public Layer {
 public:
  ResNetStem(int64_t in_channels, int64_t width)
      : conv1_(register_module("conv1", conv(in_channels, width, 7, 2))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(width))) {
    init_conv(conv1_);
    init_norm(bn1_);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return torch::max_pool2d(torch::relu(bn1_(conv1_(x))), 3, 2, 1);
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
};

// One residual block, "layer<stage>.<index>": basic (two 3x3 convolutions) or bottleneck (1x1
// down to `planes`, 3x3 with the stride, 1x1 up to 4 x planes); a 1x1 convolution and BatchNorm
// ("downsample.0", "downsample.1") bring the input to the output's shape where they differ.
class ResidualBlock : public Layer {
 public:
  ResidualBlock(std::string prefix, int64_t in, int64_t planes, int64_t stride, bool bottleneck)
      : prefix_(std::move(prefix)) {
    const int64_t out = bottleneck ? planes * 4 : planes;
    if (bottleneck) {
      add("conv1", "bn1", in, planes, 1, 1);
      add("conv2", "bn2", planes, planes, 3, stride);
      add("conv3", "bn3", planes, out, 1, 1);
    } else {
      add("conv1", "bn1", in, planes, 3, stride);
      add("conv2", "bn2", planes, planes, 3, 1);
    }
    if (stride != 1 || in != out) {
      auto shortcut = conv(in, out, 1, stride);
      torch::nn::BatchNorm2d shortcut_norm(out);
      init_conv(shortcut);
      init_norm(shortcut_norm);
      downsample_ = register_module("downsample", torch::nn::Sequential(shortcut, shortcut_norm));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto y = x;
    for (std::size_t i = 0; i < convs_.size(); ++i) {
      y = norms_[i](convs_[i](y));
      if (i + 1 < convs_.size()) y = torch::relu(y);
    }
    return torch::relu(y + (downsample_ ? downsample_->forward(x) : x));
  }
  std::string canonical_prefix() const override { return prefix_; }

 private:
  void add(const std::string& conv_name, const std::string& norm_name, int64_t in, int64_t out, int64_t kernel,
           int64_t stride) {
    convs_.push_back(register_module(conv_name, conv(in, out, kernel, stride)));
    norms_.push_back(register_module(norm_name, torch::nn::BatchNorm2d(out)));
    init_conv(convs_.back());
    init_norm(norms_.back());
  }

  std::string prefix_;
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> norms_;
  torch::nn::Sequential downsample_{nullptr};
};

// Global average pool, then fc (LibTorch's default Linear init: torchvision's).
class ResNetHead : public Layer {
 public:
  ResNetHead(int64_t features, int64_t classes) : fc_(register_module("fc", torch::nn::Linear(features, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return fc_(x.mean({2, 3})); }

 private:
  torch::nn::Linear fc_;
};

}  // namespace

std::vector<std::string> ResNetConfig::preset_names() { return {"resnet18", "resnet34", "resnet50", "resnet101"}; }

ResNetConfig ResNetConfig::preset(const std::string& name) {
  if (name == "resnet18") return ResNetConfig().blocks({2, 2, 2, 2});
  if (name == "resnet34") return ResNetConfig().blocks({3, 4, 6, 3});
  if (name == "resnet50") return ResNetConfig().blocks({3, 4, 6, 3}).bottleneck(true);
  if (name == "resnet101") return ResNetConfig().blocks({3, 4, 23, 3}).bottleneck(true);
  throw std::invalid_argument(
      fmt::format("unknown ResNet preset '{}'; valid presets: {}", name, fmt::join(preset_names(), ", ")));
}

void ResNetConfig::validate() const {
  std::vector<std::string> problems;
  if (blocks_.empty()) problems.push_back("blocks must list at least one stage");
  for (const auto n : blocks_) {
    if (n < 1) problems.push_back(fmt::format("every stage needs at least one block, got {}", fmt::join(blocks_, ",")));
  }
  if (num_classes_ < 1) problems.push_back(fmt::format("num_classes must be positive, got {}", num_classes_));
  if (in_channels_ < 1) problems.push_back(fmt::format("in_channels must be positive, got {}", in_channels_));
  if (width_ < 1) problems.push_back(fmt::format("width must be positive, got {}", width_));
  if (!problems.empty()) throw std::invalid_argument(fmt::format("ResNetConfig: {}", fmt::join(problems, "; ")));
}

std::shared_ptr<LayerStack> make_resnet(const ResNetConfig& config) {
  config.validate();
  auto model = std::make_shared<LayerStack>();
  model->push_back(std::make_shared<ResNetStem>(config.in_channels(), config.width()));
  int64_t in = config.width();
  const int64_t expansion = config.bottleneck() ? 4 : 1;
  for (std::size_t stage = 0; stage < config.blocks().size(); ++stage) {
    const int64_t planes = config.width() << stage;
    for (int64_t i = 0; i < config.blocks()[stage]; ++i) {
      const int64_t stride = stage > 0 && i == 0 ? 2 : 1;
      model->push_back(std::make_shared<ResidualBlock>(fmt::format("layer{}.{}.", stage + 1, i), in, planes, stride,
                                                       config.bottleneck()));
      in = planes * expansion;
    }
  }
  model->push_back(std::make_shared<ResNetHead>(in, config.num_classes()));
  return model;
}

}  // namespace colo::nn
