// finetune: pretrained ViT weights, a new head for your classes, a few epochs on your images.
//
//   finetune WEIGHTS DATA_DIR [--model base] [--image-size 224] [--epochs 3] [--batch-size 32] [--lr 1e-4]
//
// WEIGHTS: a timm or Hugging Face ViTForImageClassification safetensors file, or a directory with
// model.safetensors (or a sharded set). DATA_DIR: train/<class>/*.jpg and val/<class>/*.jpg.
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/data/data_loader.h>
#include <colo/data/image_folder.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/vision_transformer.h>
#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/plugins/torch_ddp_options.h>
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string model_name = "base";
  int64_t image_size = 224, epochs = 3, batch_size = 32;
  double lr = 1e-4;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--model" && has_value) model_name = args[++i];
    else if (args[i] == "--image-size" && has_value) image_size = std::stoll(args[++i]);
    else if (args[i] == "--epochs" && has_value) epochs = std::stoll(args[++i]);
    else if (args[i] == "--batch-size" && has_value) batch_size = std::stoll(args[++i]);
    else if (args[i] == "--lr" && has_value) lr = std::stod(args[++i]);
    else positional.push_back(args[i]);
  }
  if (positional.size() != 2) {
    std::fputs("usage: finetune WEIGHTS DATA_DIR [--model base] [--image-size 224] [--epochs 3] [--batch-size 32] "
               "[--lr 1e-4]\n",
               stderr);
    return 2;
  }
  try {
    // The weights, with the normalisation they were trained with where their directory says it.
    const auto weights = colo::nn::read_pretrained(positional[0]);
    auto folder_options = colo::data::ImageFolderOptions(image_size);
    if (weights.mean.size() == 3) folder_options.normalization({weights.mean, weights.std});
    auto train = std::make_shared<colo::data::ImageFolder>(positional[1] + "/train", folder_options);
    auto val = std::make_shared<colo::data::ImageFolder>(positional[1] + "/val", folder_options);
    for (const auto& folder : {train, val}) {
      for (const auto& note : folder->scan_notes()) fmt::print("data: {}\n", note);  // what the scan left out
    }

    // The model for these classes; load_pretrained keeps its new head and resamples the position
    // embeddings when the image size differs from the checkpoint's.
    auto config = colo::nn::ViTConfig::preset(model_name).image_size(image_size).num_classes(train->num_classes());
    if (weights.hugging_face) config.norm_eps(1e-12);
    auto model = colo::nn::make_vision_transformer(config);
    for (const auto& note : colo::nn::load_pretrained(*model, weights).notes) fmt::print("init: {}\n", note);

    const int64_t workers = std::max(1U, std::thread::hardware_concurrency() - 1);
    auto loader = std::make_shared<colo::data::DataLoader>(
        train, colo::data::DataLoaderOptions(batch_size).shuffle(true).drop_last(true).augment(true).num_workers(workers));
    auto optimizer = std::make_shared<colo::optim::HybridAdam>(model->parameters(),
                                                               colo::optim::HybridAdamOptions(lr).weight_decay(0.05));
    colo::Criterion criterion = [](const torch::Tensor& out, const torch::Tensor& y) {
      return torch::nn::functional::cross_entropy(out.to(torch::kFloat), y);
    };
    colo::Booster booster(
        colo::PluginRegistry::global().create(colo::TorchDdpOptions().precision(colo::amp::Precision::kBf16)));
    auto b = booster.boost(model, optimizer, criterion, loader);
    const int64_t steps = epochs * b.dataloader->num_batches();
    b.lr_scheduler = std::make_shared<colo::optim::CosineAnnealingWarmupLR>(b.optimizer->optimizer(), steps, steps / 10);
    colo::data::DataLoader val_loader(val, colo::data::DataLoaderOptions(batch_size)
                                               .num_workers(workers)
                                               .num_replicas(b.dataloader->options().num_replicas())
                                               .rank(b.dataloader->options().rank())
                                               .device(b.dataloader->options().device()));

    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      b.dataloader->set_epoch(epoch);
      b.model->train();
      for (auto& batch : *b.dataloader) {
        auto loss = b.criterion(b.model->forward(batch.images), batch.labels);
        booster.backward(loss, *b.optimizer);
        b.optimizer->step();
        b.optimizer->zero_grad();
        b.lr_scheduler->step();
      }
      // Validation top-1 of this rank's shard (one process: the whole split).
      b.model->eval();
      torch::NoGradGuard no_grad;
      int64_t correct = 0, seen = 0;
      val_loader.set_epoch(0);
      for (auto& batch : val_loader) {
        correct += b.model->forward(batch.images).argmax(1).eq(batch.labels).sum().item<int64_t>();
        seen += batch.size();
      }
      fmt::print("epoch {}/{}: val top-1 {:.2f}% ({} images)\n", epoch + 1, epochs,
                 100.0 * static_cast<double>(correct) / static_cast<double>(seen), seen);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finetune: error: %s\n", e.what());
    return 1;
  }
}
