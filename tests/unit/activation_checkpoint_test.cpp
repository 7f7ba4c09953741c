// Activation checkpointing (colo::nn::checkpointed_forward, Layer::run,
// LayerStack::set_activation_checkpointing): the same numbers as the plain pass, exactly in fp32,
// also with dropout and stochastic depth drawing random numbers (the replay draws the same), with
// region streams (tensor parallelism's), and with end-of-backward callbacks waiting for the
// program's own pass.
#include <colo/compat/backward_callbacks.h>
#include <colo/nn/activation_checkpoint.h>
#include <colo/nn/attention.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/mlp.h>
#include <colo/nn/region_rng.h>
#include <colo/nn/vision_transformer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <memory>
#include <vector>

namespace colo::nn {
namespace {

ViTConfig dropout_config() {
  return ViTConfig()
      .image_size(16)
      .patch_size(4)
      .embed_dim(32)
      .depth(3)
      .num_heads(4)
      .num_classes(5)
      .drop_rate(0.2)
      .attn_drop_rate(0.1)
      .drop_path_rate(0.3);
}

struct Pass {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;
  torch::Tensor rng_after;  // the default generator's state once the pass is over
};

Pass train_pass(LayerStack& model, const torch::Tensor& images, const torch::Tensor& labels) {
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  torch::manual_seed(1234);
  auto loss = torch::nn::functional::cross_entropy(model.forward(images), labels);
  loss.backward();
  Pass pass{loss.detach(), {}, at::detail::getDefaultCPUGenerator().get_state()};
  for (const auto& p : model.parameters()) pass.grads.push_back(p.grad().clone());
  return pass;
}

TEST(ActivationCheckpoint, EqualsThePlainPassExactlyWithDropoutAndDropPath) {
  torch::manual_seed(3);
  auto model = make_vision_transformer(dropout_config());
  model->train();
  const auto images = torch::randn({6, 3, 16, 16});
  const auto labels = torch::randint(0, 5, {6});
  const auto plain = train_pass(*model, images, labels);
  model->set_activation_checkpointing(true);
  for (std::size_t k = 0; k < model->size(); ++k) EXPECT_TRUE(model->layer(k)->activation_checkpointing());
  const auto checkpointed = train_pass(*model, images, labels);
  EXPECT_TRUE(torch::equal(plain.loss, checkpointed.loss));
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (std::size_t i = 0; i < plain.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << "parameter " << i;
  }
  // The replay puts the random stream back: what is drawn after the step is what the plain run draws.
  EXPECT_TRUE(torch::equal(plain.rng_after, checkpointed.rng_after));
}

// Without restoring the random state, the replay would draw other masks: the gradients would
// differ. This is what the test above would catch.
TEST(ActivationCheckpoint, AReplayWithOtherMasksWouldGiveOtherGradients) {
  torch::manual_seed(3);
  auto model = make_vision_transformer(dropout_config());
  model->train();
  const auto images = torch::randn({6, 3, 16, 16});
  const auto labels = torch::randint(0, 5, {6});
  const auto first = train_pass(*model, images, labels);
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  torch::manual_seed(999);
  torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
  bool any_differs = false;
  std::size_t i = 0;
  for (const auto& p : model->parameters()) any_differs = any_differs || !torch::equal(p.grad(), first.grads[i++]);
  EXPECT_TRUE(any_differs);
}

// A stream of its own for the sharded regions, as tensor parallelism's RngTracker keeps one.
class SwappingRegionRng : public RegionRng {
 public:
  explicit SwappingRegionRng(uint64_t seed) : state_(at::detail::createCPUGenerator(seed).get_state()) {}
  void enter() override {
    auto cpu = at::detail::getDefaultCPUGenerator();
    saved_ = cpu.get_state();
    cpu.set_state(state_);
  }
  void exit() override {
    auto cpu = at::detail::getDefaultCPUGenerator();
    state_ = cpu.get_state();
    cpu.set_state(saved_);
  }
  std::vector<torch::Tensor> save_state() const override { return {state_.clone()}; }
  void restore_state(const std::vector<torch::Tensor>& state) override { state_ = state.at(0).clone(); }
  const torch::Tensor& state() const { return state_; }

 private:
  torch::Tensor state_, saved_;
};

TEST(ActivationCheckpoint, RegionStreamsAreReplayedAndLeftWhereThePlainPassLeavesThem) {
  torch::manual_seed(5);
  auto model = make_vision_transformer(dropout_config().drop_path_rate(0.0));
  model->train();
  auto rng = std::make_shared<SwappingRegionRng>(77);
  for (const auto& module : model->modules()) {
    if (auto* attention = dynamic_cast<Attention*>(module.get())) attention->set_sharded_rng(rng, false);
    if (auto* mlp = dynamic_cast<Mlp*>(module.get())) mlp->set_sharded_rng(rng, false);
  }
  const auto images = torch::randn({4, 3, 16, 16});
  const auto labels = torch::randint(0, 5, {4});
  const auto start = rng->save_state();
  const auto plain = train_pass(*model, images, labels);
  const auto region_after_plain = rng->state().clone();
  rng->restore_state(start);
  model->set_activation_checkpointing(true);
  const auto checkpointed = train_pass(*model, images, labels);
  for (std::size_t i = 0; i < plain.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << "parameter " << i;
  }
  EXPECT_TRUE(torch::equal(region_after_plain, rng->state()));
}

TEST(ActivationCheckpoint, EvaluationAndTheFirstLayerRunPlainly) {
  torch::manual_seed(3);
  auto model = make_vision_transformer(dropout_config());
  model->set_activation_checkpointing(true);
  model->eval();
  const auto images = torch::randn({2, 3, 16, 16});
  {
    torch::NoGradGuard no_grad;
    const auto out = model->forward(images);
    EXPECT_FALSE(out.requires_grad());
  }
  // The patch embedding's input (images) needs no gradient: it runs as it is, and its output is
  // an ordinary autograd node, not a recomputation.
  model->train();
  const auto tokens = model->layer(0)->run(images);
  ASSERT_TRUE(tokens.grad_fn());
  EXPECT_EQ(tokens.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << tokens.grad_fn()->name();
  const auto block = model->layer(1)->run(tokens);
  ASSERT_TRUE(block.grad_fn());
  EXPECT_NE(block.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << block.grad_fn()->name();
}

// A hook that asks for an end-of-backward callback from inside a recomputation gets it at the
// end of the program's pass, after every layer's gradients, not at the end of the nested pass.
TEST(ActivationCheckpoint, EndOfBackwardCallbacksWaitForTheProgramsPass) {
  torch::manual_seed(3);
  auto model = make_vision_transformer(dropout_config().drop_rate(0).attn_drop_rate(0).drop_path_rate(0));
  model->set_activation_checkpointing(true);
  // The last block's parameters get their gradients inside a recomputation.
  auto last_block = model->layer(model->size() - 2);
  auto first_block = model->layer(1);
  bool queued = false, ran = false, first_block_done_when_ran = false;
  auto hooked = last_block->parameters().front();
  auto watched = first_block->parameters().front();
  hooked.register_hook([&](const torch::Tensor& grad) {
    if (!queued) {
      queued = true;
      compat::queue_end_of_backward_callback([&] {
        ran = true;
        first_block_done_when_ran = watched.grad().defined();
      });
    }
    return grad;
  });
  const auto images = torch::randn({2, 3, 16, 16});
  model->forward(images).sum().backward();
  EXPECT_TRUE(queued);
  EXPECT_TRUE(ran);
  EXPECT_TRUE(first_block_done_when_ran) << "the callback ran at the end of the last block's recomputation";
}

}  // namespace
}  // namespace colo::nn
