#pragma once

#include <memory>

#include <colo/nn/layer_stack.h>
#include <colo/nn/vit_config.h>

namespace colo::nn {

// Builds a Vision Transformer as a LayerStack of depth + 2 layers: PatchEmbedding, `depth`
// EncoderBlocks, ClassifierHead. Parameter names, shapes and order are timm's
// (VisionTransformer with class token, global_pool='token'), so timm checkpoints load as they
// are. Initialised like timm's default init (see each layer); deterministic given
// torch::manual_seed. Throws std::invalid_argument (from config.validate()) for a bad config.
std::shared_ptr<LayerStack> make_vision_transformer(const ViTConfig& config);

}  // namespace colo::nn
