// A model of one's own under tensor parallelism (docs/adding_a_model_policy.md walks through this
// file). Usage, e.g. on 2 ranks:
//   colo-run --nproc-per-node 2 model_policy 2    # tp_size=2; prints one loss per step
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/dist/process_group.h>
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/plugins/hybrid_parallel_options.h>
#include <colo/shardformer/policy.h>
#include <colo/shardformer/policy_registry.h>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

// Step 1: the model, written for one device. A residual feed-forward layer, x + down(gelu(up(x))),
// whose two linears are held as AnyModules so that a policy can swap in parallel ones.
class ResidualFeedForward : public colo::nn::Layer {
 public:
  ResidualFeedForward(int64_t index, int64_t dim, int64_t hidden) : index_(index) {
    up_ = torch::nn::AnyModule(register_module("up", torch::nn::Linear(dim, hidden)));
    down_ = torch::nn::AnyModule(register_module("down", torch::nn::Linear(hidden, dim)));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return x + down_.forward(torch::gelu(up_.forward(x))); }
  // Canonical names, what checkpoints hold: "blocks.3.up.weight" whatever the layer's place.
  std::string canonical_prefix() const override { return "blocks." + std::to_string(index_) + "."; }

  // nn::Layer's interface for a policy: which sub-modules may be swapped, and the swap (under the
  // same name, so "up.weight" stays "up.weight"; forward then calls the new module).
  std::vector<std::string> replaceable_submodules() const override { return {"up", "down"}; }
  void replace_submodule(const std::string& path, torch::nn::AnyModule module) override {
    // Any other path: nn::Layer's refusal, which names the valid ones.
    if (path != "up" && path != "down") return colo::nn::Layer::replace_submodule(path, std::move(module));
    replace_module(path, module.ptr());
    (path == "up" ? up_ : down_) = std::move(module);
  }

 private:
  int64_t index_;
  torch::nn::AnyModule up_, down_;
};

// The input and output layers stay whole (replicated on every tensor-parallel rank).
class Head : public colo::nn::Layer {
 public:
  Head(int64_t dim, int64_t classes) : fc_(register_module("fc", torch::nn::Linear(dim, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return fc_(x); }
  std::string canonical_prefix() const override { return "head."; }

 private:
  torch::nn::Linear fc_;
};

std::shared_ptr<colo::nn::LayerStack> make_model(int64_t dim, int64_t hidden, int64_t depth, int64_t classes) {
  auto model = std::make_shared<colo::nn::LayerStack>();
  for (int64_t i = 0; i < depth; ++i) model->push_back(std::make_shared<ResidualFeedForward>(i, dim, hidden));
  model->push_back(std::make_shared<Head>(dim, classes));
  return model;
}

// Step 2: the policy, a table. Megatron's MLP split: `up` column-parallel (each rank computes its
// share of the hidden units), `down` row-parallel (each rank multiplies its share; the partial
// products are summed over the tp ranks). No other communication is needed, and the gelu between
// them works on each rank's share alone. The shardformer executes the rows and records what they
// split (up.weight, up.bias, down.weight; down.bias is whole: added after the sum); memory plans
// read the same rows.
class FeedForwardPolicy : public colo::shardformer::Policy {
 public:
  std::string name() const override { return "residual_feed_forward"; }
  colo::shardformer::ShardPlan plan() const override {
    using colo::shardformer::Split;
    return {colo::shardformer::layer_plan<ResidualFeedForward>("ResidualFeedForward",
                                                               {{"up", Split::kColumn}, {"down", Split::kRow}})};
  }
  // Optional: say what cannot be split in the model's own words (the table's checks would refuse
  // it too, in terms of rows and features). From the summary, so that memory plans say it too.
  std::vector<std::string> summary_problems(const colo::nn::ModelSummary& model, int64_t tp_size,
                                            bool /*sequence_parallel*/) const override {
    for (const auto& layer : model.layers) {
      for (const auto& p : layer.parameters) {
        if (p.name != layer.name + ".up.weight" || p.shape[0] % tp_size == 0) continue;
        return {"residual_feed_forward: the hidden width " + std::to_string(p.shape[0]) +
                " does not divide over tp_size=" + std::to_string(tp_size)};
      }
    }
    return {};
  }
};

}  // namespace

int main(int argc, char** argv) try {
  const int tp_size = argc > 1 ? std::stoi(argv[1]) : 1;
  // Step 3: register the policy before boosting; the plugin's shardformer finds it.
  colo::shardformer::PolicyRegistry::global().add(std::make_shared<FeedForwardPolicy>());

  torch::manual_seed(0);  // the same starting weights on every rank
  auto model = make_model(/*dim=*/16, /*hidden=*/64, /*depth=*/3, /*classes=*/4);
  auto optimizer = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-2));
  colo::Criterion criterion = [](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(out, y);
  };
  auto plugin = colo::PluginRegistry::global().create(colo::HybridParallelOptions().tp_size(tp_size));
  colo::Booster booster(plugin);
  auto b = booster.boost(model, optimizer, criterion);

  // A fixed random teacher: the labels are a function of the inputs, so the loss falls.
  const auto teacher = torch::randn({16, 4});
  for (int step = 0; step < 8; ++step) {
    const auto x = torch::randn({32, 16});
    const auto y = x.mm(teacher).argmax(1);
    b.optimizer->zero_grad();
    const auto loss = b.criterion(b.model->forward(x), y);
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    if (plugin->context().world->rank() == 0) std::printf("step %d loss %.8f\n", step, loss.item<double>());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
