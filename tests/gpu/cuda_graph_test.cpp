// cuda_graphs (issue 44) on a GPU: a CUDA-graphed layer stack trains exactly as the eager one
// (the same kernels on the same data: losses and gradients bit for bit, dropout and drop-path
// included, with gradient accumulation), through nn::CudaGraphedStack (one forward in flight, or
// several in capture slots of their own, as pipeline stages hold them) and through the plugins
// that offer it on one GPU; and what it refuses. Several ranks: tests/dist/cuda_graphs_test.cpp.
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

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
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
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("max_in_flight is 1"), std::string::npos) << e.what();
  }
  out.sum().backward();
  EXPECT_NO_THROW(graphed.forward(x).sum().backward());
  // A fifth training shape is refused (four are captured by default).
  for (int64_t batch : {5, 6, 7}) graphed.forward(torch::randn({batch, 3, 32, 32}, kGpu)).sum().backward();
  EXPECT_EQ(graphed.captured_shapes(), 4);
  EXPECT_THROW(graphed.forward(torch::randn({9, 3, 32, 32}, kGpu)), std::invalid_argument);
}

// What one pipeline stage sees of a run: its outputs, its inputs' gradients and, at the end, its
// parameters' accumulated gradients.
struct StageTrace {
  std::vector<torch::Tensor> outputs, input_grads, param_grads;
};

// `pattern`'s actions on one stage, in order: F forwards the next input, B runs the backward of
// the oldest microbatch still held from a given output gradient (as a pipeline's
// backward_by_grad does). The inputs need a gradient where the stage is not the first.
template <typename Forward>
StageTrace run_stage_pattern(colo::nn::LayerStack& stage, Forward&& forward, const std::string& pattern,
                             const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& grad_outputs,
                             bool input_grad) {
  torch::manual_seed(7);  // the same random draws (dropout, drop-path) in both runs
  StageTrace trace;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> held;  // (input, output), oldest first
  std::size_t forwards = 0, backwards = 0;
  for (const char action : pattern) {
    if (action == 'F') {
      auto x = inputs.at(forwards++).clone().requires_grad_(input_grad);
      auto y = forward(x);
      trace.outputs.push_back(y.detach().clone());
      held.emplace_back(x, y);
    } else {
      auto [x, y] = held.front();
      held.erase(held.begin());
      torch::autograd::backward({y}, {grad_outputs.at(backwards++)});
      if (input_grad) trace.input_grads.push_back(x.grad().clone());
    }
  }
  for (auto& p : stage.parameters()) trace.param_grads.push_back(p.grad().clone());
  return trace;
}

void expect_same_tensors(const std::vector<torch::Tensor>& eager, const std::vector<torch::Tensor>& graphed,
                         const std::string& what) {
  ASSERT_EQ(eager.size(), graphed.size()) << what;
  for (std::size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(torch::equal(eager[i], graphed[i]))
        << what << " " << i << ": max difference "
        << (eager[i].to(torch::kDouble) - graphed[i].to(torch::kDouble)).abs().max().item<double>();
  }
}

// A stage holding several microbatches (a pipeline's 1F1B or GPipe) takes a capture slot per
// forward in flight; each backward replays its own forward's slot. Outputs, input gradients and
// parameter gradients are the eager stage's, bit for bit, for the first stage (images in) and a
// middle one (tokens in, their gradient out), random draws included: the slots captured between
// forwards must not move the random state.
TEST_F(CudaGraphs, CaptureSlotsHoldSeveralForwardsInFlightBitForBit) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const bool first_stage : {true, false}) {
      for (const auto& [pattern, slots] : std::vector<std::pair<std::string, int>>{
               {"FFBB", 2}, {"FFBFBB", 2}, {"FFFBFBBB", 3}}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + (first_stage ? " first stage " : " middle stage ") + pattern);
        auto eager_model = random_vit(dtype, 0.2);
        auto graphed_model = random_vit(dtype, 0.2);
        // The middle stage: every layer after the patch embedding, on the embedding's tokens.
        const std::size_t begin = first_stage ? 0 : 1;
        auto eager_stage = eager_model->slice(begin, eager_model->size());
        auto graphed_stage = graphed_model->slice(begin, graphed_model->size());
        const auto microbatches = static_cast<int64_t>(std::count(pattern.begin(), pattern.end(), 'F'));
        torch::manual_seed(3);
        std::vector<torch::Tensor> inputs, grad_outputs;
        for (int64_t m = 0; m < microbatches; ++m) {
          auto images = torch::randn({4, 3, 32, 32}, kGpu).to(dtype);
          torch::NoGradGuard no_grad;
          inputs.push_back(first_stage ? images : eager_model->slice(0, 1)->forward(images));
          grad_outputs.push_back(torch::randn({4, 10}, kGpu).to(dtype));
        }
        const auto eager = run_stage_pattern(
            *eager_stage, [&](const torch::Tensor& x) { return eager_stage->forward(x); }, pattern, inputs, grad_outputs,
            !first_stage);
        colo::nn::CudaGraphedStack graphed(graphed_stage, colo::nn::CudaGraphOptions().max_in_flight(slots));
        const auto replayed = run_stage_pattern(
            *graphed_stage, [&](const torch::Tensor& x) { return graphed.forward(x); }, pattern, inputs, grad_outputs,
            !first_stage);
        expect_same_tensors(eager.outputs, replayed.outputs, "output");
        expect_same_tensors(eager.input_grads, replayed.input_grads, "input gradient");
        expect_same_tensors(eager.param_grads, replayed.param_grads, "parameter gradient");
        EXPECT_EQ(graphed.captured_shapes(), 1);
        EXPECT_EQ(graphed.captured_graphs(), slots);  // a slot per forward in flight at the peak
        EXPECT_EQ(graphed.forward_replays(), microbatches);
        EXPECT_EQ(graphed.in_flight(), 0);
      }
    }
  }
}

// One forward more than the slots is an error naming the option, and what was in flight stays
// intact; a forward dropped without its backward frees its slot; a second backward through one
// forward is refused.
TEST_F(CudaGraphs, OneForwardMoreThanTheSlotsIsRefusedAndNothingIsOverwritten) {
  const auto x = torch::randn({4, 3, 32, 32}, kGpu);
  const auto x2 = torch::randn({4, 3, 32, 32}, kGpu);
  std::vector<torch::Tensor> expected;  // the gradients of x's forward alone, eagerly
  {
    // The output gradient as the graphed backward receives it (its static buffer is contiguous;
    // sum()'s own gradient is an expanded view, which a matmul's backward reads another way).
    auto eager = random_vit(torch::kFloat, 0.0);
    const auto out = eager->forward(x);
    out.backward(torch::ones_like(out));
    for (auto& p : eager->parameters()) expected.push_back(p.grad().clone());
  }
  auto model = random_vit(torch::kFloat, 0.0);
  colo::nn::CudaGraphedStack graphed(model, colo::nn::CudaGraphOptions().max_in_flight(2));
  auto a = graphed.forward(x);
  auto b = graphed.forward(x2);
  EXPECT_EQ(graphed.in_flight(), 2);
  try {
    graphed.forward(x);
    ADD_FAILURE() << "a third forward in flight was accepted with two slots";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("max_in_flight is 2"), std::string::npos) << what;
    EXPECT_NE(what.find("CudaGraphOptions::max_in_flight"), std::string::npos) << what;
  }
  // x's activations survived x2's forward and the refused one: its backward is the eager one's.
  a.sum().backward();
  std::vector<torch::Tensor> got;
  for (auto& p : model->parameters()) got.push_back(p.grad().clone());
  expect_same_tensors(expected, got, "parameter gradient");
  EXPECT_EQ(graphed.in_flight(), 1);
  auto c = graphed.forward(x);
  c = torch::Tensor();  // dropped unrun: its slot is free again
  EXPECT_EQ(graphed.in_flight(), 1);
  auto d = graphed.forward(x);
  b.sum().backward();
  d.sum().backward();
  EXPECT_EQ(graphed.in_flight(), 0);
  EXPECT_EQ(graphed.captured_graphs(), 2);
  // A second backward through one forward would replay a slot whose activations are spent.
  auto loss = graphed.forward(x).sum();
  loss.backward({}, /*retain_graph=*/true);
  try {
    loss.backward();
    ADD_FAILURE() << "a second backward through one graphed forward was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a second backward through one graphed forward"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(graphed.set_max_in_flight(0), std::invalid_argument);
}

// on_backward_end (a data-parallel reduction's place under graphs) runs once per autograd pass
// that replayed a backward graph, after the pass's last gradient; eager passes and evaluation do
// not call it.
TEST_F(CudaGraphs, OnBackwardEndRunsOncePerPassAfterItsGradients) {
  auto model = random_vit(torch::kFloat, 0.0);
  colo::nn::CudaGraphedStack graphed(model, colo::nn::CudaGraphOptions().max_in_flight(2));
  auto param = model->parameters().front();
  int calls = 0;
  torch::Tensor seen;
  graphed.on_backward_end([&] {
    ++calls;
    seen = param.grad().clone();
  });
  const auto x = torch::randn({4, 3, 32, 32}, kGpu);
  graphed.forward(x).sum().backward();
  EXPECT_EQ(calls, 1);
  auto a = graphed.forward(x);
  auto b = graphed.forward(x);
  (a.sum() + b.sum()).backward();  // one pass, two backward replays
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(torch::equal(seen, param.grad()));
  {
    torch::NoGradGuard no_grad;
    graphed.forward(x);
  }
  model->forward(x).sum().backward();
  EXPECT_EQ(calls, 2);
}

// Each microbatch's loss, and every parameter's gradient after the step.
struct PipelineTrace {
  std::vector<torch::Tensor> losses;
  std::vector<torch::Tensor> grads;
};

// A step of a two-rank 1F1B pipeline of four microbatches over `model` cut in two, its stages'
// actions merged in time into one process (activations and gradients pass as copies).
PipelineTrace run_two_stage_1f1b(colo::nn::LayerStack& model,
                                 const std::function<torch::Tensor(const torch::Tensor&)>& stage0,
                                 const std::function<torch::Tensor(const torch::Tensor&)>& stage1) {
  torch::manual_seed(5);
  const auto dtype = model.parameters().front().scalar_type();
  const auto images = torch::randn({4, 4, 3, 32, 32}).to(kGpu).to(dtype);
  const auto labels = torch::randint(0, 10, {4, 4}).to(kGpu);
  torch::manual_seed(7);
  // Rank 0's 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3 and rank 1's 1F0 1B0 1F1 1B1 ... merged in time.
  const std::vector<std::string> order = {"0F0", "0F1", "1F0", "1B0", "0B0", "0F2", "1F1", "1B1",
                                          "0B1", "0F3", "1F2", "1B2", "0B2", "1F3", "1B3", "0B3"};
  std::map<int, torch::Tensor> sent, received, losses, grads;
  PipelineTrace trace;
  trace.losses.resize(4);
  for (const auto& action : order) {
    const int stage = action[0] - '0', mb = action[2] - '0';
    if (action[1] == 'F' && stage == 0) {
      sent[mb] = stage0(images[mb]);
    } else if (action[1] == 'F') {
      auto x = sent.at(mb).detach().clone().requires_grad_(true);  // as received over the wire
      received[mb] = x;
      losses[mb] = torch::nn::functional::cross_entropy(stage1(x).to(torch::kFloat), labels[mb]);
      trace.losses[mb] = losses[mb].detach().clone();
    } else if (stage == 1) {
      losses.at(mb).backward();
      grads[mb] = received.at(mb).grad().clone();
      losses.erase(mb);
      received.erase(mb);
    } else {
      torch::autograd::backward({sent.at(mb)}, {grads.at(mb)});
      sent.erase(mb);
      grads.erase(mb);
    }
  }
  for (auto& p : model.parameters()) trace.grads.push_back(p.grad().clone());
  return trace;
}

// Stage 0 holds two microbatches at once (two capture slots), stage 1 one: losses and gradients
// equal the eager stages' run in the same order, bit for bit.
TEST_F(CudaGraphs, TwoPipelineStagesInOneProcessTrainAsTheEagerOnes) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto eager_model = random_vit(dtype, 0.2);
    const std::size_t cut = eager_model->size() / 2;
    auto eager0 = eager_model->slice(0, cut), eager1 = eager_model->slice(cut, eager_model->size());
    const auto eager = run_two_stage_1f1b(
        *eager_model, [&](const torch::Tensor& x) { return eager0->forward(x); },
        [&](const torch::Tensor& x) { return eager1->forward(x); });

    auto graphed_model = random_vit(dtype, 0.2);
    colo::nn::CudaGraphedStack graphed0(graphed_model->slice(0, cut), colo::nn::CudaGraphOptions().max_in_flight(2));
    colo::nn::CudaGraphedStack graphed1(graphed_model->slice(cut, graphed_model->size()));
    const auto replayed = run_two_stage_1f1b(
        *graphed_model, [&](const torch::Tensor& x) { return graphed0.forward(x); },
        [&](const torch::Tensor& x) { return graphed1.forward(x); });
    expect_same_tensors(eager.losses, replayed.losses, "loss of microbatch");
    expect_same_tensors(eager.grads, replayed.grads, "parameter gradient");
    EXPECT_EQ(graphed0.captured_graphs(), 2);
    EXPECT_EQ(graphed1.captured_graphs(), 1);
  }
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
