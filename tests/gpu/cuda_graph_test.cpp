// cuda_graphs (issue 44) on a GPU: a CUDA-graphed layer stack trains exactly as the eager one
// (the same kernels on the same data: losses and gradients bit for bit, dropout and drop-path
// included, with gradient accumulation), through nn::CudaGraphedStack and through the plugins
// that offer it (torch_ddp, hybrid_parallel at one stage with microbatches); and what it refuses.
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/files/files.h>
#include <colo/nn/cuda_graphed_stack.h>
#include <colo/nn/vision_transformer.h>
#include <colo/optim/hybrid_adam.h>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

class CudaGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

const torch::Device kGpu(torch::kCUDA, 0);

// A small ViT with every tensor random (a fresh one has zero biases and unit LayerNorm weights,
// which would hide a wrongly applied affine or bias gradient).
std::shared_ptr<colo::nn::LayerStack> random_vit(torch::ScalarType dtype, double drop_path) {
  torch::manual_seed(11);
  auto model = colo::nn::make_vision_transformer(colo::nn::ViTConfig::preset("tiny")
                                                     .image_size(32)
                                                     .patch_size(4)
                                                     .depth(3)
                                                     .num_classes(10)
                                                     .drop_rate(drop_path > 0 ? 0.1 : 0.0)
                                                     .drop_path_rate(drop_path));
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.05 + (p.dim() == 1 ? 0.3 : 0.0));
  model->to(kGpu, dtype);
  model->train();
  return model;
}

struct Trace {
  std::vector<torch::Tensor> losses;
  std::vector<std::vector<torch::Tensor>> grads;  // per step, every parameter
};

// `steps` steps of `micro` microbatches each (gradients accumulated, then an SGD update and the
// gradients dropped, as MixedPrecisionOptimizer::zero_grad does), through `forward`.
template <typename Forward>
Trace train(colo::nn::LayerStack& model, Forward&& forward, int steps, int micro) {
  torch::manual_seed(5);
  const auto images = torch::randn({steps, micro, 8, 3, 32, 32}).to(kGpu);
  const auto labels = torch::randint(0, 10, {steps, micro, 8}).to(kGpu);
  torch::manual_seed(7);  // the same random draws (dropout, drop-path) in both runs
  Trace trace;
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < micro; ++m) {
      const auto x = images[s][m].to(model.parameters().front().scalar_type());
      auto loss = torch::nn::functional::cross_entropy(forward(x).to(torch::kFloat), labels[s][m]);
      loss.backward();
      trace.losses.push_back(loss.detach().clone());
    }
    std::vector<torch::Tensor> grads;
    torch::NoGradGuard no_grad;
    for (auto& p : model.parameters()) {
      grads.push_back(p.grad().clone());
      p.sub_(p.grad() * 1e-2);
      p.mutable_grad() = torch::Tensor();
    }
    trace.grads.push_back(std::move(grads));
  }
  return trace;
}

void expect_identical(const Trace& eager, const Trace& graphed) {
  ASSERT_EQ(eager.losses.size(), graphed.losses.size());
  for (std::size_t i = 0; i < eager.losses.size(); ++i) {
    EXPECT_TRUE(torch::equal(eager.losses[i], graphed.losses[i]))
        << "loss " << i << ": eager " << eager.losses[i].item<double>() << ", graphed " << graphed.losses[i].item<double>();
  }
  for (std::size_t s = 0; s < eager.grads.size(); ++s) {
    for (std::size_t k = 0; k < eager.grads[s].size(); ++k) {
      EXPECT_TRUE(torch::equal(eager.grads[s][k], graphed.grads[s][k]))
          << "step " << s << " parameter " << k << ": max difference "
          << (eager.grads[s][k].to(torch::kDouble) - graphed.grads[s][k].to(torch::kDouble)).abs().max().item<double>();
    }
  }
}

TEST_F(CudaGraphs, AGraphedStackTrainsBitForBitAsTheEagerOne) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const double drop_path : {0.0, 0.2}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " drop_path " + std::to_string(drop_path));
      auto eager_model = random_vit(dtype, drop_path);
      const auto eager = train(*eager_model, [&](const torch::Tensor& x) { return eager_model->forward(x); }, 3, 2);
      auto graphed_model = random_vit(dtype, drop_path);
      colo::nn::CudaGraphedStack graphed(graphed_model);
      const auto replayed = train(*graphed_model, [&](const torch::Tensor& x) { return graphed.forward(x); }, 3, 2);
      EXPECT_EQ(graphed.captured_shapes(), 1);
      EXPECT_EQ(graphed.forward_replays(), 6);
      expect_identical(eager, replayed);
    }
  }
}

TEST_F(CudaGraphs, EvaluationRunsEagerlyAndASecondForwardBeforeBackwardIsRefused) {
  auto model = random_vit(torch::kFloat, 0.0);
  colo::nn::CudaGraphedStack graphed(model);
  const auto x = torch::randn({4, 3, 32, 32}, kGpu);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(graphed.forward(x), model->forward(x)));
  }
  EXPECT_EQ(graphed.forward_replays(), 0);
  auto out = graphed.forward(x);
  try {
    graphed.forward(x);
    ADD_FAILURE() << "a second forward before the first's backward was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("before the previous one's backward"), std::string::npos) << e.what();
  }
  out.sum().backward();
  EXPECT_NO_THROW(graphed.forward(x).sum().backward());
  // A fifth training shape is refused (four are captured by default).
  for (int64_t batch : {5, 6, 7}) graphed.forward(torch::randn({batch, 3, 32, 32}, kGpu)).sum().backward();
  EXPECT_EQ(graphed.captured_shapes(), 4);
  EXPECT_THROW(graphed.forward(torch::randn({9, 3, 32, 32}, kGpu)), std::invalid_argument);
}

std::shared_ptr<colo::dist::ProcessGroup> gpu_world_of_one() {
  const auto path = colo::files::join(colo::files::temp_directory(),
                                      "colo_graph_store_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  colo::dist::Environment env;
  env.rdzv_file = path;
  colo::dist::ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(30);
  return colo::dist::init_world(env, options);
}

// Three bf16 steps through a plugin: the losses, one after the other.
std::vector<double> plugin_losses(const std::string& plugin_name, colo::PluginOptions options) {
  static auto world = gpu_world_of_one();
  options["precision"] = "bf16";
  auto plugin = colo::PluginRegistry::global().create(plugin_name, options, {world, kGpu});
  colo::Booster booster(plugin);
  auto model = random_vit(torch::kFloat, 0.1);
  model->to(torch::kCPU);
  auto optimizer = std::make_shared<colo::optim::HybridAdam>(model->parameters(), colo::optim::HybridAdamOptions(1e-3));
  colo::Criterion criterion = [](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(out, y);
  };
  auto b = booster.boost(model, optimizer, criterion);
  torch::manual_seed(5);
  const auto images = torch::randn({3, 16, 3, 32, 32}).to(kGpu);
  const auto labels = torch::randint(0, 10, {3, 16}).to(kGpu);
  torch::manual_seed(7);
  std::vector<double> losses;
  for (int s = 0; s < 3; ++s) {
    torch::Tensor loss;
    if (plugin->supports_pipeline()) {
      loss = booster.execute_pipeline(images[s], labels[s], *b.model, b.criterion, *b.optimizer, {}).loss;
    } else {
      loss = b.criterion(b.model->forward(images[s]), labels[s]);
      booster.backward(loss, *b.optimizer);
    }
    b.optimizer->step();
    b.optimizer->zero_grad();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

TEST_F(CudaGraphs, PluginsTrainAsTheirEagerRunsDo) {
  for (const auto& [name, extra] : std::vector<std::pair<std::string, colo::PluginOptions>>{
           {"torch_ddp", {}}, {"hybrid_parallel", {{"num_microbatches", "4"}}}}) {
    SCOPED_TRACE(name);
    auto eager_options = extra, graphed_options = extra;
    graphed_options["cuda_graphs"] = "true";
    const auto eager = plugin_losses(name, eager_options);
    const auto graphed = plugin_losses(name, graphed_options);
    ASSERT_EQ(eager.size(), graphed.size());
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], graphed[i]) << "step " << i;
  }
}

}  // namespace
