#include "plugin_equivalence.h"

#include <colo/amp/grad_clip.h>
#include <colo/booster/plugin_registry.h>
#include <colo/files/files.h>
#include <colo/dist/process_group.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/tp_mappings.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "dist_test_env.h"

namespace colo::test {

nn::ViTConfig tiny_vit() {
  return nn::ViTConfig().image_size(16).patch_size(8).in_channels(3).num_classes(10).embed_dim(32).depth(2).num_heads(
      2);
}

std::shared_ptr<nn::LayerStack> make_vit(uint64_t seed) { return make_vit(tiny_vit(), seed); }

std::shared_ptr<nn::LayerStack> make_vit(const nn::ViTConfig& config, uint64_t seed) {
  torch::manual_seed(seed);
  auto model = nn::make_vision_transformer(config);
  model->to(device());
  return model;
}

nn::ViTConfig grid_test_vit() {
  return nn::ViTConfig()
      .image_size(16)
      .patch_size(8)
      .in_channels(3)
      .num_classes(10)
      .embed_dim(16)
      .depth(2)
      .num_heads(4)
      .mlp_ratio(2.0)
      .drop_rate(0.0)
      .attn_drop_rate(0.0)
      .drop_path_rate(0.0);
}

std::shared_ptr<nn::LayerStack> randomised_vit(const nn::ViTConfig& config, uint64_t seed) {
  torch::manual_seed(seed);
  auto model = nn::make_vision_transformer(config);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(torch::randn(p.sizes()) * 0.5);
  model->to(device());
  return model;
}

std::vector<torch::Tensor> pieces_over(const torch::Tensor& local, dist::ProcessGroup& group) {
  // Through the tensor-parallel mappings' gather: CUDA tensors over Gloo travel through the host.
  const auto all = shardformer::all_gather_along(local.unsqueeze(0).contiguous(), 0, group);
  std::vector<torch::Tensor> pieces;
  for (const auto& piece : all.chunk(group.size(), 0)) pieces.push_back(piece.squeeze(0));
  return pieces;
}

torch::Tensor whole_from_pieces(const torch::Tensor& local, const std::vector<nn::ShardSpec>& cuts,
                                dist::ProcessGroup& tp) {
  auto pieces = pieces_over(local, tp);
  pieces.resize(static_cast<std::size_t>(nn::pieces_of(cuts)));
  return nn::unshard(pieces, cuts);
}

void expect_odd_mlp_refused_and_left_whole(const std::function<void(nn::LayerStack&)>& shard, const std::string& says) {
  torch::manual_seed(1);
  auto model = nn::make_vision_transformer(grid_test_vit().mlp_ratio(2.0625));
  const auto before = model->layer(1)->named_parameters()["mlp.fc1.weight"].sizes().vec();
  try {
    shard(*model);
    ADD_FAILURE() << "33 hidden units were sharded over q=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), says);
  }
  EXPECT_EQ(model->layer(1)->named_parameters()["mlp.fc1.weight"].sizes().vec(), before) << "left whole";
  EXPECT_TRUE(model->layer(1)->shard_cuts().empty());
}

void expect_sharded_vit_equals_one_process(nn::LayerStack& sharded, nn::LayerStack& reference,
                                           std::shared_ptr<dist::ProcessGroup> tp, const torch::Tensor& images,
                                           const torch::Tensor& labels, const ShardedVitCheck& check) {
  const auto want_logits = reference.forward(images);
  const auto want_loss = cross_entropy(want_logits, labels);
  want_loss.backward();
  const auto logits = sharded.forward(images);
  const auto loss = cross_entropy(logits, labels);
  loss.backward();
  ASSERT_EQ(logits.sizes(), want_logits.sizes());
  EXPECT_LE(relative_error(logits, want_logits), check.logits_tolerance) << "logits";
  EXPECT_NEAR(loss.item<double>(), want_loss.item<double>(), 1e-6) << "loss";

  int replaced = 0, blocks = 0;
  std::vector<torch::Tensor> grads;
  std::vector<int64_t> pieces;
  double want_sq = 0;
  for (std::size_t k = 0; k < sharded.size(); ++k) {
    const auto& layer = *sharded.layer(k);
    if (!layer.shard_cuts().empty()) ++blocks;
    const auto want = reference.layer(k)->named_parameters(/*recurse=*/true);
    for (const auto& item : layer.named_parameters(/*recurse=*/true)) {
      const auto name = layer.canonical_prefix() + item.key();
      ASSERT_TRUE(item.value().grad().defined()) << name;
      const auto& want_grad = want[item.key()].grad();
      want_sq += want_grad.to(torch::kDouble).square().sum().item<double>();
      auto grad = item.value().grad();
      grads.push_back(grad);
      pieces.push_back(1);
      const auto cuts = layer.shard_cuts().find(item.key());
      if (cuts != layer.shard_cuts().end()) {
        ++replaced;
        pieces.back() = nn::pieces_of(cuts->second);
        if (check.each_cut) check.each_cut(grad, want_grad, cuts->second, name);
        grad = whole_from_pieces(grad, cuts->second, *tp);
      }
      ASSERT_EQ(grad.sizes(), want_grad.sizes()) << name;
      EXPECT_LE(relative_error(grad, want_grad), 1e-5) << name << " gradient";
    }
  }
  // Per block: norm1, qkv, proj, norm2, fc1, fc2, each a weight and a bias.
  EXPECT_GT(blocks, 0);
  EXPECT_EQ(replaced, blocks * 12) << "every replaced parameter records its cuts";
  amp::GradNormPlan plan;
  plan.tp = std::move(tp);
  EXPECT_NEAR(amp::global_grad_norm(grads, plan, 1.0, pieces), std::sqrt(want_sq), 1e-5 * std::sqrt(want_sq));
}

std::shared_ptr<torch::optim::Optimizer> conditioned_adamw(nn::LayerStack& model, double weight_decay) {
  return std::make_shared<torch::optim::AdamW>(model.parameters(),
                                               torch::optim::AdamWOptions(kLr).eps(kAdamEps).weight_decay(weight_decay));
}

std::shared_ptr<Plugin> make_plugin(const std::string& name, const PluginOptions& options,
                                    std::shared_ptr<dist::ProcessGroup> group) {
  return PluginRegistry::global().create(name, options, PluginContext{group ? std::move(group) : world(), device()});
}

torch::Tensor cross_entropy(const torch::Tensor& output, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

GlobalBatches make_batches(int n, int64_t global_batch, uint64_t seed) {
  torch::manual_seed(seed);
  GlobalBatches b;
  for (int i = 0; i < n; ++i) {
    b.images.push_back(torch::randn({global_batch, 3, 16, 16}).to(device()));
    b.labels.push_back(torch::randint(0, 10, {global_batch}).to(device()));
  }
  return b;
}

torch::Tensor shard(const torch::Tensor& global, int rank, int size) {
  const int64_t per_rank = global.size(0) / size;
  return global.narrow(0, rank * per_rank, per_rank);
}

torch::Tensor shard(const torch::Tensor& global) { return shard(global, world()->rank(), world()->size()); }

std::shared_ptr<dist::ProcessGroup> consecutive_group(int size, const std::string& name) {
  const int first = world()->rank() / size * size;
  std::vector<int> ranks;
  for (int r = first; r < first + size; ++r) ranks.push_back(r);
  return world()->new_subgroup(ranks, name);
}

double global_mean(double local, dist::ProcessGroup& group) {
  auto t = torch::tensor({local}, torch::kFloat64).to(device());
  group.all_reduce(t, dist::ReduceOp::kAvg).wait();
  return t.item<double>();
}

double global_mean(double local) { return global_mean(local, *world()); }

std::string shared_directory(const std::string& key) {
  // Every rank calls this in the same order, so a call count makes each call's store key its own:
  // the store keeps a key's first value, and a key used again (a test's loop) would hand the other
  // ranks the directory of an earlier call.
  static int calls = 0;
  const std::string unique_key = fmt::format("{}#{}", key, calls++);
  std::string path;
  if (world()->rank() == 0) {
    path = files::make_temp_directory("colo_dist_test_");
    world()->store_set(unique_key, path);
  } else {
    path = world()->store_get(unique_key);
  }
  return path;
}

void remove_shared_directory(const std::string& path) {
  world()->barrier().wait();
  if (world()->rank() == 0) files::remove_all(path);
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const auto a = got.detach().to(torch::kCPU, torch::kFloat64);
  const auto b = want.detach().to(torch::kCPU, torch::kFloat64);
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a - b).abs().max().item<double>() / scale;
}

std::map<std::string, torch::Tensor> named_state(const NamedTensors& state) { return {state.begin(), state.end()}; }

double expect_weights_near(const ModelWrapper& model, const nn::LayerStack& reference, double tolerance) {
  const auto got = named_state(model.full_state());
  double worst = 0.0;
  for (const auto& item : reference.canonical_named_parameters()) {
    auto it = got.find(item.key());
    EXPECT_NE(it, got.end()) << item.key();
    if (it == got.end()) continue;
    const double error = relative_error(it->second, item.value());
    worst = std::max(worst, error);
    EXPECT_LE(error, tolerance) << item.key() << " on rank " << world()->rank();
  }
  return worst;
}

Trajectory train_boosted(Plugin& plugin, Boosted& b, const GlobalBatches& data) {
  Trajectory t;
  for (std::size_t i = 0; i < data.images.size(); ++i) {
    b.optimizer->zero_grad();
    auto loss = b.criterion(b.model->forward(shard(data.images[i])), shard(data.labels[i]));
    plugin.backward(loss, *b.optimizer);
    EXPECT_TRUE(b.optimizer->step());
    t.grad_norms.push_back(b.optimizer->last_grad_norm());
    t.losses.push_back(global_mean(loss.item<double>()));
  }
  return t;
}

double expect_losses_near(const Trajectory& got, const Trajectory& want, double tolerance) {
  EXPECT_EQ(got.losses.size(), want.losses.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < std::min(got.losses.size(), want.losses.size()); ++i) {
    const double error = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
    worst = std::max(worst, error);
    EXPECT_LE(error, tolerance) << "step " << i << ": " << got.losses[i] << " vs " << want.losses[i];
  }
  return worst;
}

}  // namespace colo::test
