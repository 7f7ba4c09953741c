#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <colo/nn/layer_stack.h>

namespace colo::nn {

// Hyper-parameters of a ResNet with torchvision's structure (v1.5: a bottleneck block strides in
// its 3x3 convolution). ResNetConfig::preset("resnet18").num_classes(10).in_channels(1).
struct ResNetConfig {
  // torchvision's resnet18, resnet34 (basic blocks), resnet50, resnet101 (bottlenecks). Throws
  // std::invalid_argument listing the valid names for anything else.
  static ResNetConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  // Throws std::invalid_argument listing every violated rule.
  void validate() const;

  // Blocks in each of the stages (torchvision's `layers`: resnet18 {2, 2, 2, 2}).
  TORCH_ARG(std::vector<int64_t>, blocks) = std::vector<int64_t>{2, 2, 2, 2};
  TORCH_ARG(bool, bottleneck) = false;
  TORCH_ARG(int64_t, num_classes) = 1000;
  TORCH_ARG(int64_t, in_channels) = 3;
  // Channels of the stem and of the first stage's blocks, doubling per stage (torchvision: 64).
  // Smaller widths give the same names with other shapes (tests use 8).
  TORCH_ARG(int64_t, width) = 64;
};

// Builds a ResNet as a LayerStack: the stem (conv1, bn1, relu, max-pool), one layer per residual
// block ("layer1.0" ... "layer4.1"), so that a pipeline can cut between any two blocks, and the
// head (global average pool, fc). Parameter and buffer names, shapes and order are torchvision's
// (and timm's resnet*), so their checkpoints load with nn::load_pretrained. Initialised as
// torchvision does (Kaiming-normal fan-out convolutions, BatchNorm 1 and 0, LibTorch's default
// Linear); deterministic given torch::manual_seed.
//
// BatchNorm under pipelines and data parallelism, as Colossal-AI's and torch.distributed.pipelining's
// schedules do: each microbatch's forward normalises with that microbatch's own statistics and
// updates the running statistics once (so a step of 4 microbatches moves them 4 times, as the same
// 4 micro-batches under gradient accumulation would); each data-parallel rank keeps its own running
// statistics (no SyncBatchNorm, no broadcast of buffers each step; torch_ddp's broadcast_buffers
// option copies rank 0's at each forward), and a checkpoint holds the writer's.
std::shared_ptr<LayerStack> make_resnet(const ResNetConfig& config);

}  // namespace colo::nn
