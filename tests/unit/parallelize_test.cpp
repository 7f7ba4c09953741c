// booster/parallelize.h: the boost steps every plugin composes. restrict_optimizer is what a
// pipeline stage does to the optimizer the user built over the whole model.
#include <colo/engine/parallelize.h>
#include <colo/nn/layer_stack.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/optim/lamb.h>
#include <colo/optim/optimizer_state.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "tiny_layer_stack.h"

namespace colo {
namespace {

// Four layers, so that a "stage" [1, 3) leaves parameters on both sides.
std::shared_ptr<nn::LayerStack> four_layers(uint64_t seed) {
  torch::manual_seed(seed);
  auto model = std::make_shared<nn::LayerStack>();
  model->push_back(std::make_shared<test::TinyLinear>(4, 6, "l0.", true));
  model->push_back(std::make_shared<test::TinyLinear>(6, 6, "l1.", true));
  model->push_back(std::make_shared<test::TinyLinear>(6, 6, "l2.", true));
  model->push_back(std::make_shared<test::TinyLinear>(6, 3, "l3.", false));
  return model;
}

using OptimizerFactory =
    std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

// Two parameter groups with different learning rates: layers 0-1 and layers 2-3.
std::vector<torch::optim::OptimizerParamGroup> two_groups(const nn::LayerStack& model,
                                                          const std::function<std::unique_ptr<torch::optim::OptimizerOptions>(double)>& options) {
  std::vector<torch::Tensor> first, second;
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (const auto& p : model.layer(i)->parameters()) (i < 2 ? first : second).push_back(p);
  }
  return {torch::optim::OptimizerParamGroup(first, options(1e-2)),
          torch::optim::OptimizerParamGroup(second, options(3e-2))};
}

void step(nn::LayerStack& model, torch::optim::Optimizer& optimizer, uint64_t seed) {
  torch::manual_seed(seed);
  optimizer.zero_grad();
  torch::nn::functional::cross_entropy(model.forward(torch::randn({8, 4})), torch::randint(0, 3, {8})).backward();
  optimizer.step();
}

void check_restriction(const std::string& label, const std::function<std::unique_ptr<torch::optim::OptimizerOptions>(double)>& options,
                       const OptimizerFactory& make) {
  SCOPED_TRACE(label);
  auto model = four_layers(1);
  auto twin = four_layers(1);
  auto optimizer = make(two_groups(*model, options));
  auto twin_optimizer = make(two_groups(*twin, options));
  step(*model, *optimizer, 10);  // state for every parameter
  step(*twin, *twin_optimizer, 10);

  const auto stage = model->slice(1, 3);
  const auto before = optimizer->param_groups().size();
  std::vector<double> lrs;
  for (const auto& g : optimizer->param_groups()) lrs.push_back(g.options().get_lr());
  restrict_optimizer(*optimizer, *stage);

  // Groups and their options stay; each keeps only the stage's parameters; their state stays.
  ASSERT_EQ(optimizer->param_groups().size(), before);
  std::unordered_set<const void*> kept;
  for (const auto& p : stage->parameters()) kept.insert(p.unsafeGetTensorImpl());
  std::size_t held = 0;
  for (std::size_t g = 0; g < before; ++g) {
    EXPECT_EQ(optimizer->param_groups()[g].options().get_lr(), lrs[g]);
    for (const auto& p : optimizer->param_groups()[g].params()) {
      EXPECT_TRUE(kept.count(p.unsafeGetTensorImpl()));
      ++held;
    }
  }
  EXPECT_EQ(held, kept.size());
  EXPECT_EQ(optimizer->state().size(), kept.size()) << "the state of dropped parameters is dropped";

  // The kept parameters go on exactly as without the restriction; the others stay put.
  const auto outside_before = model->layer(0)->parameters()[0].clone();
  step(*model, *optimizer, 11);
  step(*twin, *twin_optimizer, 11);
  for (std::size_t i = 1; i < 3; ++i) {
    const auto got = model->layer(i)->parameters();
    const auto want = twin->layer(i)->parameters();
    for (std::size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(torch::equal(got[k], want[k])) << "layer " << i;
  }
  EXPECT_TRUE(torch::equal(model->layer(0)->parameters()[0], outside_before));
}

TEST(RestrictOptimizer, KeepsGroupsOptionsAndStateOfTheStagesParameters) {
  check_restriction(
      "HybridAdam", [](double lr) { return std::make_unique<optim::HybridAdamOptions>(optim::HybridAdamOptions(lr).weight_decay(0.1)); },
      [](auto groups) { return std::make_shared<optim::HybridAdam>(std::move(groups), optim::HybridAdamOptions()); });
  check_restriction(
      "Lamb", [](double lr) { return std::make_unique<optim::LambOptions>(optim::LambOptions(lr).weight_decay(0.1)); },
      [](auto groups) { return std::make_shared<optim::Lamb>(std::move(groups), optim::LambOptions()); });
  check_restriction(
      "Adam", [](double lr) { return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(lr)); },
      [](auto groups) { return std::make_shared<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions()); });
  check_restriction(
      "AdamW", [](double lr) { return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr)); },
      [](auto groups) { return std::make_shared<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions()); });
  check_restriction(
      "SGD", [](double lr) { return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(lr).momentum(0.9)); },
      [](auto groups) { return std::make_shared<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.1)); });
}

}  // namespace
}  // namespace colo
