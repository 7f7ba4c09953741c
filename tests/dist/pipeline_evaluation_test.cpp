// Evaluation through a pipeline runs every stage in eval mode, as evaluation under the other
// plugins does: on the same weights a two-stage hybrid_parallel model evaluates what torch_ddp's
// evaluates (BatchNorm on its running statistics, which evaluation leaves alone; no drop-path,
// so no random numbers drawn), an evaluation microbatch of one image works, and train() brings
// training mode back to every layer. Each pair of consecutive ranks is a job of its own.
#include <colo/booster/booster.h>
#include <colo/dist/process_group.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/resnet.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

// A small ResNet whose BatchNorm state is randomised: a fresh one (weight 1, bias 0, mean 0,
// variance 1) would hide which statistics normalise. 32x32 images end at 1x1 maps in the last
// blocks, where BatchNorm in training mode refuses a batch of one.
std::shared_ptr<nn::LayerStack> randomised_eval_resnet() {
  torch::manual_seed(21);
  auto model = nn::make_resnet(nn::ResNetConfig().blocks({1, 1, 1, 1}).width(8).num_classes(10));
  torch::NoGradGuard no_grad;
  for (const auto& item : model->named_parameters()) {
    if (item.value().dim() == 1) item.value().add_(0.2 * torch::randn_like(item.value()));
  }
  for (const auto& item : model->named_buffers()) {
    auto buffer = item.value();
    const auto& name = item.key();
    if (name.size() >= 12 && name.compare(name.size() - 12, 12, "running_mean") == 0) buffer.normal_(0.0, 0.3);
    if (name.size() >= 11 && name.compare(name.size() - 11, 11, "running_var") == 0) buffer.uniform_(0.5, 2.0);
    if (!buffer.is_floating_point()) buffer.fill_(7);  // num_batches_tracked
  }
  model->to(device());
  return model;
}

std::shared_ptr<torch::optim::Optimizer> eval_test_sgd(nn::LayerStack& model) {
  return std::make_shared<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(0.01));
}

// torch_ddp's evaluation of `model` on `images`: the reference.
torch::Tensor torch_ddp_logits(std::shared_ptr<nn::LayerStack> model, const std::shared_ptr<dist::ProcessGroup>& group,
                               const torch::Tensor& images) {
  Booster booster(make_plugin("torch_ddp", {}, group));
  auto optimizer = eval_test_sgd(*model);
  auto b = booster.boost(model, optimizer, cross_entropy);
  b.model->eval();
  torch::NoGradGuard no_grad;
  return b.model->forward(images).detach();
}

PipelineResult evaluate_through_pipeline(Booster& booster, Boosted& b, const torch::Tensor& images,
                                         const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  return booster.execute_pipeline(images, labels, *b.model, b.criterion, *b.optimizer,
                                  PipelineOptions().forward_only(true).return_outputs(true));
}

std::map<std::string, torch::Tensor> cloned_state(const ModelWrapper& model) {
  std::map<std::string, torch::Tensor> state;
  for (const auto& [name, tensor] : model.full_state()) state.emplace(name, tensor.clone());
  return state;
}

bool every_module_training(nn::LayerStack& stack, bool training) {
  for (const auto& module : stack.modules()) {
    if (module->is_training() != training) return false;
  }
  return true;
}

TEST(PipelineEvaluation, ResNetEvaluatesAsUnderTorchDdpLeavingItsRunningStatisticsAlone) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "a pipeline of two stages needs an even world";
  auto group = consecutive_group(2, "pipeline_eval_resnet");
  torch::manual_seed(23);
  const auto images = torch::randn({6, 3, 32, 32}).to(device());
  const auto labels = torch::randint(0, 10, {6}, torch::kLong).to(device());
  const auto want = torch_ddp_logits(randomised_eval_resnet(), group, images);

  Booster booster(make_plugin("hybrid_parallel", {{"pp_size", "2"}, {"num_microbatches", "2"}}, group));
  auto model = randomised_eval_resnet();
  auto b = booster.boost(model, eval_test_sgd(*model), cross_entropy);
  const auto before = cloned_state(*b.model);
  b.model->eval();
  const auto result = evaluate_through_pipeline(booster, b, images, labels);
  const double want_loss = cross_entropy(want, labels).item<double>();
  EXPECT_NEAR(result.loss.item<double>(), want_loss, 1e-5 * want_loss);
  if (result.outputs.defined()) {
    EXPECT_LE(relative_error(result.outputs, want), 1e-5);
  }

  // Evaluation moved no running statistic and counted no batch.
  for (const auto& [name, tensor] : b.model->full_state()) {
    EXPECT_TRUE(torch::equal(tensor.cpu(), before.at(name).cpu())) << name << " changed on rank " << world()->rank();
  }

  // A microbatch of one image: BatchNorm in training mode would refuse the 1x1 maps of the last blocks.
  const auto one = evaluate_through_pipeline(booster, b, images.narrow(0, 0, 1), labels.narrow(0, 0, 1));
  const double want_one = cross_entropy(want.narrow(0, 0, 1), labels.narrow(0, 0, 1)).item<double>();
  EXPECT_NEAR(one.loss.item<double>(), want_one, 1e-5 * want_one);
  EXPECT_TRUE(every_module_training(b.model->module(), false));

  b.model->train();
  EXPECT_TRUE(b.model->is_training());
  EXPECT_TRUE(every_module_training(b.model->module(), true));
  group->barrier().wait();
}

TEST(PipelineEvaluation, AViTWithDropPathEvaluatesAsUnderTorchDdpDrawingNoRandomNumbers) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "a pipeline of two stages needs an even world";
  auto group = consecutive_group(2, "pipeline_eval_vit");
  const auto config = tiny_vit().drop_path_rate(0.5);
  const auto data = make_batches(1, 6, 31);
  const auto want = torch_ddp_logits(make_vit(config, 7), group, data.images[0]);

  Booster booster(make_plugin("hybrid_parallel", {{"pp_size", "2"}, {"num_microbatches", "3"}}, group));
  auto model = make_vit(config, 7);
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  b.model->eval();
  torch::manual_seed(99);
  const auto result = evaluate_through_pipeline(booster, b, data.images[0], data.labels[0]);
  const auto drawn_after = torch::rand({8}, torch::TensorOptions().device(device()));
  torch::manual_seed(99);
  EXPECT_TRUE(torch::equal(drawn_after, torch::rand({8}, torch::TensorOptions().device(device()))))
      << "the evaluation drew random numbers";
  const double want_loss = cross_entropy(want, data.labels[0]).item<double>();
  EXPECT_NEAR(result.loss.item<double>(), want_loss, 1e-5 * want_loss);
  if (result.outputs.defined()) {
    EXPECT_LE(relative_error(result.outputs, want), 1e-5);
  }
  group->barrier().wait();
}

}  // namespace
}  // namespace colo::test
