// The README's "A training step in C++", built with the examples so that the README's code
// always compiles against the current API: tests/unit/readme_test.cpp checks that the README's
// first C++ block is exactly the lines between the README markers below (each section without
// its marker's indentation). Running it trains on Fashion-MNIST for 5 epochs, printing each
// epoch's mean loss; `quickstart N` stops after N steps.
#include <fmt/core.h>

#include <string>

// README begin
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/data/data_loader.h>
#include <colo/data/fashion_mnist.h>
#include <colo/nn/vision_transformer.h>
#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/plugins/torch_ddp_options.h>
// README end

int main(int argc, char** argv) {
  const int64_t max_steps = argc > 1 ? std::stoll(argv[1]) : 0;  // 0: no cap
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

  // bf16 on a GPU; fp32 on a CPU, where LibTorch's bf16 kernels are many times slower. Typed options
  // (<colo/plugins/*_options.h>) or the string map --plugin-opt gives: create("torch_ddp", {{"precision", "bf16"}}).
  const auto precision = torch::cuda::is_available() ? colo::amp::Precision::kBf16 : colo::amp::Precision::kFp32;
  auto plugin = colo::PluginRegistry::global().create(colo::TorchDdpOptions().precision(precision));
  colo::Booster booster(plugin);
  auto b = booster.boost(model, optimizer, criterion, loader);  // loader now holds this rank's shard
  // Built after boost because its length counts this rank's batches (boost shards the loader). One built before
  // boost and passed to it works too: every plugin steps the optimizer you built (its masters put in its groups).
  const int64_t epochs = 5, steps = epochs * b.dataloader->num_batches();
  b.lr_scheduler = std::make_shared<colo::optim::CosineAnnealingWarmupLR>(b.optimizer->optimizer(), steps, steps / 20);

  int64_t step = 0;
  for (int64_t epoch = 0; epoch < epochs && step != max_steps; ++epoch) {
    b.dataloader->set_epoch(epoch);  // reshuffles
    double loss_sum = 0;
    int64_t batches = 0;
    for (auto& batch : *b.dataloader) {
      auto loss = b.criterion(b.model->forward(batch.images), batch.labels);
      booster.backward(loss, *b.optimizer);
      b.optimizer->step();
      b.optimizer->zero_grad();
      b.lr_scheduler->step();
      loss_sum += loss.item<double>();
      ++batches;
      if (++step == max_steps) break;  // max_steps: quickstart's optional argument (0: every epoch)
    }
    fmt::print("epoch {}/{}: {} steps, mean loss {:.4f}\n", epoch + 1, epochs, batches, loss_sum / batches);
  }
  booster.save_model(*b.model, "checkpoints/final", colo::SaveOptions().shard(true));
  // README end
  return 0;
}
