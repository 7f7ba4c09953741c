#include <colo/nn/vision_transformer.h>

#include <colo/nn/classifier_head.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/patch_embedding.h>

namespace colo::nn {

std::shared_ptr<LayerStack> make_vision_transformer(const ViTConfig& config) {
  config.validate();
  auto model = std::make_shared<LayerStack>();
  model->push_back(std::make_shared<PatchEmbedding>(config));
  for (int64_t i = 0; i < config.depth(); ++i) model->push_back(std::make_shared<EncoderBlock>(config, i));
  model->push_back(std::make_shared<ClassifierHead>(config));
  return model;
}

}  // namespace colo::nn
