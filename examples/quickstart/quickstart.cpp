// The README's "A training step in C++", built with the examples so that the README's code
// always compiles against the current API: tests/unit/readme_test.cpp checks that the README's
// first C++ block is exactly the lines between the README markers below (each section without
// its marker's indentation). Running it trains on Fashion-MNIST for 5 epochs.
// README begin
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/data/data_loader.h>
#include <colo/data/fashion_mnist.h>
#include <colo/nn/vision_transformer.h>
#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <colo/optim/hybrid_adam.h>
// README end

int main() {
  // README begin
  // Your data: a colo::data::Dataset (Fashion-MNIST, CIFAR-10, synthetic, or a class of your own).
  auto dataset = std::make_shared<colo::data::FashionMnist>(colo::data::Split::kTrain,
                                                             colo::data::FashionMnist::default_directory());
  auto loader = std::make_shared<colo::data::DataLoader>(
      dataset, colo::data::DataLoaderOptions(64).shuffle(true).drop_last(true).channels(3).image_size(32));

  auto model = colo::nn::make_vision_transformer(
      colo::nn::ViTConfig::preset("tiny").image_size(32).patch_size(4).num_classes(10));
  auto optimizer = std::make_shared<colo::optim::HybridAdam>(model->parameters(),
                                                             colo::optim::HybridAdamOptions(1e-3));
  colo::Criterion criterion = [](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(out, y);
  };

  auto plugin = colo::PluginRegistry::global().create("torch_ddp", {{"precision", "bf16"}});
  colo::Booster booster(plugin);
  auto b = booster.boost(model, optimizer, criterion, loader);  // loader now holds this rank's shard
  // The schedule drives the optimizer the plugin steps (fp32 masters under bf16), so build it after boost.
  const int64_t epochs = 5, steps = epochs * b.dataloader->num_batches();
  b.lr_scheduler = std::make_shared<colo::optim::CosineAnnealingWarmupLR>(b.optimizer->optimizer(), steps, steps / 20);

  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    b.dataloader->set_epoch(epoch);  // reshuffles
    for (auto& batch : *b.dataloader) {
      auto loss = b.criterion(b.model->forward(batch.images), batch.labels);
      booster.backward(loss, *b.optimizer);
      b.optimizer->step();
      b.optimizer->zero_grad();
      b.lr_scheduler->step();
    }
  }
  booster.save_model(*b.model, "checkpoints/final", colo::SaveOptions().shard(true));
  // README end
  return 0;
}
