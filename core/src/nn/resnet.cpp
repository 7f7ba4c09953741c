#include <colo/nn/resnet.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include <colo/nn/layer.h>
#include <colo/nn/model_summary.h>

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

// A convolution (no bias) and the BatchNorm after it, as a residual block registers them.
struct ConvNorm {
  const char* conv;
  const char* norm;
  int64_t in, out, kernel, stride;
};

// The convolutions of one residual block: basic (two 3x3 convolutions) or bottleneck (1x1 down to
// `planes`, 3x3 with the stride, 1x1 up to 4 x planes). The block and its summary both read them.
std::vector<ConvNorm> block_convolutions(int64_t in, int64_t planes, int64_t stride, bool bottleneck) {
  if (bottleneck) {
    return {{"conv1", "bn1", in, planes, 1, 1}, {"conv2", "bn2", planes, planes, 3, stride},
            {"conv3", "bn3", planes, planes * 4, 1, 1}};
  }
  return {{"conv1", "bn1", in, planes, 3, stride}, {"conv2", "bn2", planes, planes, 3, 1}};
}

// One residual block, "layer<stage>.<index>": block_convolutions(); a 1x1 convolution and
// BatchNorm ("downsample.0", "downsample.1") bring the input to the output's shape where they differ.
class ResidualBlock : public Layer {
 public:
  ResidualBlock(std::string prefix, int64_t in, int64_t planes, int64_t stride, bool bottleneck)
      : prefix_(std::move(prefix)) {
    const int64_t out = bottleneck ? planes * 4 : planes;
    for (const auto& c : block_convolutions(in, planes, stride, bottleneck)) {
      convs_.push_back(register_module(c.conv, conv(c.in, c.out, c.kernel, c.stride)));
      norms_.push_back(register_module(c.norm, torch::nn::BatchNorm2d(c.out)));
      init_conv(convs_.back());
      init_norm(norms_.back());
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

namespace {

// The residual blocks in order: "layer<stage>.<index>." with their input channels, planes and
// stride; make_resnet builds them and summarize_resnet describes them.
struct BlockPlace {
  std::string prefix;
  int64_t in, planes, stride;
};

std::vector<BlockPlace> residual_blocks(const ResNetConfig& config) {
  std::vector<BlockPlace> blocks;
  int64_t in = config.width();
  const int64_t expansion = config.bottleneck() ? 4 : 1;
  for (std::size_t stage = 0; stage < config.blocks().size(); ++stage) {
    const int64_t planes = config.width() << stage;
    for (int64_t i = 0; i < config.blocks()[stage]; ++i) {
      const int64_t stride = stage > 0 && i == 0 ? 2 : 1;
      blocks.push_back({fmt::format("layer{}.{}.", stage + 1, i), in, planes, stride});
      in = planes * expansion;
    }
  }
  return blocks;
}

int64_t head_features(const ResNetConfig& config) {
  return (config.width() << (config.blocks().size() - 1)) * (config.bottleneck() ? 4 : 1);
}

void add_resnet_parameter(LayerSummary& layer, std::string name, std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  layer.parameters.push_back({std::move(name), std::move(shape), numel, true});
}

void add_conv_norm(LayerSummary& layer, const std::string& prefix, const std::string& conv, const std::string& norm,
                   int64_t in, int64_t out, int64_t kernel) {
  add_resnet_parameter(layer, prefix + conv + ".weight", {out, in, kernel, kernel});
  add_resnet_parameter(layer, prefix + norm + ".weight", {out});
  add_resnet_parameter(layer, prefix + norm + ".bias", {out});
}

}  // namespace

std::shared_ptr<LayerStack> make_resnet(const ResNetConfig& config) {
  config.validate();
  auto model = std::make_shared<LayerStack>();
  model->push_back(std::make_shared<ResNetStem>(config.in_channels(), config.width()));
  for (const auto& b : residual_blocks(config)) {
    model->push_back(std::make_shared<ResidualBlock>(b.prefix, b.in, b.planes, b.stride, config.bottleneck()));
  }
  model->push_back(std::make_shared<ResNetHead>(head_features(config), config.num_classes()));
  return model;
}

ModelSummary summarize_resnet(const ResNetConfig& config) {
  config.validate();
  ModelSummary s;
  LayerSummary stem;
  stem.name = "layer 0";
  add_conv_norm(stem, "", "conv1", "bn1", config.in_channels(), config.width(), 7);
  s.layers.push_back(std::move(stem));
  for (const auto& b : residual_blocks(config)) {
    LayerSummary block;
    block.name = b.prefix.substr(0, b.prefix.size() - 1);
    for (const auto& c : block_convolutions(b.in, b.planes, b.stride, config.bottleneck())) {
      add_conv_norm(block, b.prefix, c.conv, c.norm, c.in, c.out, c.kernel);
    }
    const int64_t out = b.planes * (config.bottleneck() ? 4 : 1);
    if (b.stride != 1 || b.in != out) {
      add_conv_norm(block, b.prefix, "downsample.0", "downsample.1", b.in, out, 1);
    }
    s.layers.push_back(std::move(block));
  }
  LayerSummary head;
  head.name = fmt::format("layer {}", s.layers.size());
  add_resnet_parameter(head, "fc.weight", {config.num_classes(), head_features(config)});
  add_resnet_parameter(head, "fc.bias", {config.num_classes()});
  s.layers.push_back(std::move(head));
  return s;
}

}  // namespace colo::nn
