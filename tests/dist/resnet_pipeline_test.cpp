// A second model through the pipeline: a small ResNet (BatchNorm, convolutions, no tokens) under
// hybrid_parallel with pp=2 trains as one process does when that process runs the same
// microbatches one after another and accumulates their gradients (BatchNorm normalises each
// microbatch with its own statistics in both). In larger worlds the pipeline's replicas
// (dp = world / 2) each take their share of every batch. Tolerance 1e-5: BatchNorm over few
// values is ill-conditioned (with 16x16 images, width 4 and momentum, reversing the order in which
// the reference adds two replicas' gradients moved its own weights 1e-3 in 3 steps), so the model
// keeps 2x2 maps in its last stage and plain SGD.
//
// Running statistics: each data-parallel replica keeps its own (nn/resnet.h: no SyncBatchNorm, no
// broadcast of buffers), moved by its own microbatches only. The reference keeps one set per
// replica and swaps it in while it runs that replica's microbatches (running statistics do not
// change a train-mode forward, so the weights' trajectory is the same), and every rank's buffers
// must equal its replica's set: for dp > 1 the sets differ, so a plugin that averaged, broadcast or
// shared them would fail.
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/resnet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo {
namespace {

using namespace test;
using dist::MeshAxis;

constexpr int64_t kMicrobatches = 2, kReplicaBatch = 8, kResnetSteps = 3;

std::shared_ptr<nn::LayerStack> small_resnet() {
  torch::manual_seed(5);
  // Stem, 4 basic blocks, head: 6 layers; 64x64 images end at 2x2 in the last stage.
  auto model = nn::make_resnet(nn::ResNetConfig().blocks({1, 1, 1, 1}).width(8).num_classes(10));
  model->to(device());
  return model;
}

std::shared_ptr<torch::optim::Optimizer> sgd(nn::LayerStack& model) {
  return std::make_shared<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(0.01));
}

torch::Tensor ce(const torch::Tensor& out, const torch::Tensor& y) { return torch::nn::functional::cross_entropy(out, y); }

TEST(ResNetPipeline, TwoStagesTrainAsOneProcessRunningTheMicrobatchesInTurn) {
  const int world_size = world()->size();
  if (world_size % 2 != 0) GTEST_SKIP() << "pp=2 needs an even world";
  const int dp = world_size / 2;
  const int64_t batch = kReplicaBatch * dp;
  torch::manual_seed(11);
  std::vector<torch::Tensor> images, labels;
  for (int s = 0; s < kResnetSteps; ++s) {
    images.push_back(torch::randn({batch, 3, 64, 64}).to(device()));
    labels.push_back(torch::randint(0, 10, {batch}, torch::kLong).to(device()));
  }

  // One process: each replica's shard in microbatches, in turn; gradients averaged over all; each
  // replica's running statistics kept apart.
  auto reference = small_resnet();
  auto reference_optimizer = sgd(*reference);
  auto buffers = reference->canonical_named_buffers();
  std::vector<std::map<std::string, torch::Tensor>> replica_buffers(static_cast<std::size_t>(dp));
  for (auto& set : replica_buffers) {
    for (const auto& item : buffers) set[item.key()] = item.value().detach().clone();
  }
  const auto swap_in = [&](int replica) {
    torch::NoGradGuard no_grad;
    for (auto& item : buffers) item.value().copy_(replica_buffers[replica].at(item.key()));
  };
  const auto keep = [&](int replica) {
    for (const auto& item : buffers) replica_buffers[replica][item.key()] = item.value().detach().clone();
  };
  std::vector<double> want;
  for (int s = 0; s < kResnetSteps; ++s) {
    reference_optimizer->zero_grad();
    double loss = 0;
    for (int d = 0; d < dp; ++d) {
      swap_in(d);
      const auto x = shard(images[s], d, dp).chunk(kMicrobatches), y = shard(labels[s], d, dp).chunk(kMicrobatches);
      for (int64_t m = 0; m < kMicrobatches; ++m) {
        auto l = ce(reference->forward(x[m]), y[m]) / static_cast<double>(kMicrobatches * dp);
        l.backward();
        loss += l.item<double>();
      }
      keep(d);
    }
    reference_optimizer->step();
    want.push_back(loss);
  }
  if (dp > 1) {  // else the check below could not tell per-replica statistics from shared ones
    const auto& first = replica_buffers[0].at("bn1.running_mean");
    ASSERT_FALSE(torch::equal(first, replica_buffers[1].at("bn1.running_mean")));
  }

  auto plugin = PluginRegistry::global().create(
      "hybrid_parallel", {{"pp_size", "2"}, {"num_microbatches", std::to_string(kMicrobatches)}},
      PluginContext{world(), device()});
  Booster booster(plugin);
  auto model = small_resnet();
  auto b = booster.boost(model, sgd(*model), ce);
  const int d = b.mesh->coordinate(MeshAxis::kDp);
  for (int s = 0; s < kResnetSteps; ++s) {
    b.optimizer->zero_grad();
    const double loss =
        booster.execute_pipeline(shard(images[s], d, dp), shard(labels[s], d, dp), *b.model, b.criterion, *b.optimizer)
            .loss.item<double>();
    b.optimizer->step();
    EXPECT_NEAR(global_mean(loss), want[s], 1e-5 * want[s]) << "step " << s;
  }
  // Parameters: the reference's. Running statistics: this replica's, moved by its microbatches in
  // the same order (the pipeline's shape probe, an eval-mode forward, moved nothing).
  const auto reference_params = reference->canonical_named_parameters();
  const auto& mine = replica_buffers[static_cast<std::size_t>(d)];
  int buffers_compared = 0;
  for (const auto& [name, tensor] : b.model->full_state()) {
    if (const auto* p = reference_params.find(name)) {
      EXPECT_LE(relative_error(tensor, *p), 1e-5) << name;
      continue;
    }
    const auto want_buffer = mine.find(name);
    ASSERT_NE(want_buffer, mine.end()) << name;
    ++buffers_compared;
    if (tensor.is_floating_point()) {
      EXPECT_LE(relative_error(tensor, want_buffer->second), 1e-5) << name << " (replica " << d << ")";
    } else {
      EXPECT_TRUE(torch::equal(tensor.cpu(), want_buffer->second.cpu())) << name << " (replica " << d << ")";
    }
  }
  EXPECT_GT(buffers_compared, 0) << "this stage holds no BatchNorm";
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo
