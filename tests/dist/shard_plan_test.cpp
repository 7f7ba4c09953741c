// Policies as tables (shardformer/include/colo/shardformer/shard_plan.h): what a memory plan reads
// from a policy's table is what ShardFormer's execution of the same table holds, parameter by
// parameter; a row naming a sub-module a layer lacks is refused before anything changes; and a
// policy of the user's, written as a table, trains like one process.
#include <colo/dist/process_group.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/shard_plan.h>
#include <colo/shardformer/tp_mappings.h>
#include <colo/shardformer/vit_policy.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::shardformer::plan_test {

using namespace colo::test;

// The tensor-parallel sizes this world can run (each a group of consecutive ranks).
std::vector<int> plan_tp_sizes() {
  std::vector<int> sizes;
  for (int tp : {2, 4}) {
    if (world()->size() % tp == 0) sizes.push_back(tp);
  }
  return sizes;
}

// Every tensor away from its initial value (a fresh model has biases 0 and LayerNorm weights 1).
void perturb(nn::LayerStack& model, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.add_(0.1 * torch::randn_like(p));
}

// x + down(gelu(up(x))): a layer type of the user's own, whose two linears a table splits.
class TwoLinears : public nn::Layer {
 public:
  TwoLinears(int index, int64_t dim, int64_t hidden) : prefix_("mlps." + std::to_string(index) + ".") {
    up_ = torch::nn::AnyModule(register_module("up", torch::nn::Linear(dim, hidden)));
    down_ = torch::nn::AnyModule(register_module("down", torch::nn::Linear(hidden, dim)));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return x + down_.forward(torch::gelu(up_.forward(x))); }
  std::string canonical_prefix() const override { return prefix_; }
  std::vector<std::string> replaceable_submodules() const override { return {"up", "down"}; }
  void replace_submodule(const std::string& path, torch::nn::AnyModule module) override {
    if (path != "up" && path != "down") return nn::Layer::replace_submodule(path, std::move(module));
    replace_module(path, module.ptr());
    (path == "up" ? up_ : down_) = std::move(module);
  }

 private:
  std::string prefix_;
  torch::nn::AnyModule up_, down_;
};

// A whole (replicated) classifier after the split layers.
class WholeHead : public nn::Layer {
 public:
  WholeHead(int64_t dim, int64_t classes) : fc_(register_module("fc", torch::nn::Linear(dim, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return fc_(x); }
  std::string canonical_prefix() const override { return "head."; }

 private:
  torch::nn::Linear fc_;
};

// The user's policy: nothing but a table.
class TwoLinearsPolicy : public Policy {
 public:
  std::string name() const override { return "two_linears"; }
  ShardPlan plan() const override {
    return {layer_plan<TwoLinears>("TwoLinears", {{"up", Split::kColumn}, {"down", Split::kRow}})};
  }
};

constexpr int64_t kDim = 8, kClasses = 5;

std::shared_ptr<nn::LayerStack> make_two_linears(int64_t hidden, int depth, uint64_t seed) {
  torch::manual_seed(seed);
  auto model = std::make_shared<nn::LayerStack>();
  for (int i = 0; i < depth; ++i) model->push_back(std::make_shared<TwoLinears>(i, kDim, hidden));
  model->push_back(std::make_shared<WholeHead>(kDim, kClasses));
  perturb(*model, seed + 1);
  model->to(device());
  return model;
}

// Each parameter of the sharded `model` holds as many elements as `policy`'s table predicted from
// `summary` (the whole model's), and the parameters that got a ShardSpec are exactly those the
// prediction splits.
void expect_holds_what_the_table_says(const Policy& policy, const nn::ModelSummary& summary,
                                      const nn::LayerStack& model, int tp) {
  const auto predicted = policy.rank_numels(summary, tp);
  const auto specs = model.canonical_shard_specs();
  std::size_t count = 0;
  for (const auto& item : model.canonical_named_parameters()) {
    ++count;
    const auto it = predicted.find(item.key());
    ASSERT_NE(it, predicted.end()) << item.key() << " is not in the table's prediction";
    EXPECT_EQ(item.value().numel(), it->second) << item.key();
    int64_t whole = 0;
    for (const auto& layer : summary.layers) {
      for (const auto& p : layer.parameters) whole = p.name == item.key() ? p.numel : whole;
    }
    EXPECT_EQ(specs.count(item.key()) == 1, it->second < whole) << item.key() << ": ShardSpec vs prediction";
  }
  EXPECT_EQ(count, predicted.size());
}

TEST(ShardFormerTable, RankNumelsAgreeWithWhatShardHolds) {
  std::mt19937 draw(20240611);  // the same configurations on every rank
  for (int tp : plan_tp_sizes()) {
    const auto group = consecutive_group(tp, "plan_numel");
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t heads = tp * (1 + static_cast<int64_t>(draw() % 2));
      const int64_t head_dim = 4 * (1 + static_cast<int64_t>(draw() % 2));
      const auto config = tiny_vit()
                              .num_heads(heads)
                              .embed_dim(heads * head_dim)
                              .depth(1 + static_cast<int64_t>(draw() % 3))
                              .mlp_ratio(draw() % 2 ? 2.0 : 4.0)
                              .qkv_bias(draw() % 2 == 0);
      const bool sequence = draw() % 2 == 0;
      SCOPED_TRACE(fmt::format("tp {} heads {} width {} depth {} mlp_ratio {} qkv_bias {} sequence parallel {}", tp,
                               heads, config.embed_dim(), config.depth(), config.mlp_ratio(), config.qkv_bias(),
                               sequence));
      auto model = make_vit(config, 100 + trial);
      perturb(*model, 200 + trial);
      const auto summary = nn::summarize(*model);
      ShardFormer(group, ShardFormerOptions().sequence_parallel(sequence)).shard(*model);
      const VitPolicy vit;
      expect_holds_what_the_table_says(vit, summary, *model, tp);
      // What train_vit --dry-run plans from: the configuration alone.
      expect_holds_what_the_table_says(vit, nn::summarize_vision_transformer(config), *model, tp);
    }
    // A user's table, over a stack that is not a ViT.
    const auto policy = std::make_shared<TwoLinearsPolicy>();
    auto model = make_two_linears(/*hidden=*/4 * tp, /*depth=*/2, 5);
    const auto summary = nn::summarize(*model);
    ShardFormer former(group);
    former.add_policy(policy);
    former.shard(*model);
    expect_holds_what_the_table_says(*policy, summary, *model, tp);
  }
  world()->barrier().wait();
}

// A ViT policy whose table has one row that the layer type cannot take.
class MistypedVitPolicy : public VitPolicy {
 public:
  explicit MistypedVitPolicy(std::string bad_row) : bad_row_(std::move(bad_row)) {}
  std::string name() const override { return "mistyped_vit"; }
  ShardPlan plan() const override {
    return {layer_plan<nn::EncoderBlock>(
        "EncoderBlock", {{"attn.qkv", Split::kFusedQkv}, {bad_row_, Split::kRow}, {"mlp.fc1", Split::kColumn}})};
  }

 private:
  std::string bad_row_;
};

TEST(ShardFormerTable, ARowNamingAMissingSubModuleIsRefusedBeforeAnythingChanges) {
  const auto group = consecutive_group(2, "plan_refuse");
  struct Case {
    std::string row, says;
    bool lists_rows = true;  // the message names the sub-modules the layer lets be replaced
  };
  // norm1 may be replaced (2D tensor parallelism's LayerNorm2D), so its refusal is only that it
  // is not a linear layer.
  for (const auto& c : std::vector<Case>{{"attn.projection", "has no such sub-module"},
                                         {"attn", "does not let it be replaced"},
                                         {"norm1", "not a linear layer", false}}) {
    SCOPED_TRACE(c.row);
    auto model = make_vit(tiny_vit(), 3);
    perturb(*model, 4);
    std::map<std::string, torch::Tensor> before;
    for (const auto& item : model->canonical_named_parameters()) before[item.key()] = item.value().clone();
    ShardFormer former(group);
    former.add_policy(std::make_shared<MistypedVitPolicy>(c.row));
    try {
      former.shard(*model);
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + c.row + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("layer blocks.0 (EncoderBlock)"), std::string::npos) << what;
      EXPECT_NE(what.find("'mistyped_vit' policy"), std::string::npos) << what;
      EXPECT_NE(what.find(c.says), std::string::npos) << what;
      if (c.lists_rows) {
        EXPECT_NE(what.find("attn.qkv, attn.proj, mlp.fc1, mlp.fc2, norm1, norm2"), std::string::npos)
            << "the valid rows: " << what;
      }
    }
    // Nothing was split, not even the rows before the bad one.
    EXPECT_TRUE(model->canonical_shard_specs().empty());
    for (const auto& item : model->canonical_named_parameters()) {
      EXPECT_TRUE(torch::equal(item.value(), before.at(item.key()))) << item.key();
    }
  }
  world()->barrier().wait();
}

// A split that does not divide over tp is refused before anything changes, by the table's own
// checks (the user's policy says nothing of shapes), in the same words by a memory plan; so is
// sequence parallelism, which the user's policy does not support.
TEST(ShardFormerTable, WhatATableCannotSplitIsRefusedAsAMemoryPlanRefusesIt) {
  const auto group = consecutive_group(2, "plan_shapes");
  const auto policy = std::make_shared<TwoLinearsPolicy>();
  for (int64_t hidden : {3, 4, 5}) {  // around the boundary: 4 divides over 2 ranks
    SCOPED_TRACE(fmt::format("hidden {}", hidden));
    auto model = make_two_linears(hidden, /*depth=*/2, 13);
    const auto planned = policy->plan_problems(nn::summarize(*model), 2, false);
    ShardFormer former(group);
    former.add_policy(policy);
    const auto found = former.problems(*model);
    EXPECT_EQ(found, planned) << "boost and a memory plan refuse alike";
    if (hidden % 2 == 0) {
      EXPECT_TRUE(found.empty()) << fmt::format("{}", fmt::join(found, "; "));
      continue;
    }
    ASSERT_EQ(found.size(), 2u) << "the first layer's two rows: " << fmt::format("{}", fmt::join(found, "; "));
    EXPECT_EQ(found[0], fmt::format("mlps.0's up (Column split) has {} output features, which do not divide over "
                                    "tp_size=2: use a tp_size that divides {}",
                                    hidden, hidden));
    EXPECT_EQ(found[1], fmt::format("mlps.0's down (Row split) has {} input features, which do not divide over "
                                    "tp_size=2: use a tp_size that divides {}",
                                    hidden, hidden));
    EXPECT_THROW(former.shard(*model), std::invalid_argument);
    EXPECT_TRUE(model->canonical_shard_specs().empty());
  }
  auto model = make_two_linears(4, /*depth=*/1, 14);
  ShardFormer former(group, ShardFormerOptions().sequence_parallel(true));
  former.add_policy(policy);
  try {
    former.shard(*model);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the 'two_linears' policy does not support sequence parallelism"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(model->canonical_shard_specs().empty());
  world()->barrier().wait();
}

// The sharded model's whole parameters, each gathered over tp where it is split.
std::map<std::string, torch::Tensor> gathered_parameters(const nn::LayerStack& model, dist::ProcessGroup& group) {
  const auto specs = model.canonical_shard_specs();
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.canonical_named_parameters()) {
    const auto it = specs.find(item.key());
    if (it == specs.end()) {
      out[item.key()] = item.value().detach();
      continue;
    }
    const auto dim = it->second.dim;
    const auto pieces = all_gather_along(item.value().detach(), dim, group).chunk(group.size(), dim);
    out[item.key()] = nn::unshard(pieces, it->second);
  }
  return out;
}

TEST(ShardFormerTable, AUserTableTrainsLikeOneProcess) {
  constexpr int kTableSteps = 6;
  for (int tp : plan_tp_sizes()) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    const auto group = consecutive_group(tp, "plan_train");
    const int64_t hidden = 4 * tp;
    torch::manual_seed(9);  // the same data on every rank
    const auto teacher = torch::randn({kDim, kClasses}).to(device());
    std::vector<torch::Tensor> xs, ys;
    for (int s = 0; s < kTableSteps; ++s) {
      xs.push_back(torch::randn({16, kDim}).to(device()));
      ys.push_back(xs.back().mm(teacher).argmax(1));
    }
    auto train = [&](nn::LayerStack& model) {
      torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(1e-2).eps(test::kAdamEps));
      std::vector<double> losses;
      for (int s = 0; s < kTableSteps; ++s) {
        optimizer.zero_grad();
        const auto loss = cross_entropy(model.forward(xs[s]), ys[s]);
        loss.backward();
        optimizer.step();
        losses.push_back(loss.item<double>());
      }
      return losses;
    };
    auto reference = make_two_linears(hidden, /*depth=*/2, 21);
    const auto want = train(*reference);

    auto model = make_two_linears(hidden, /*depth=*/2, 21);
    ShardFormer former(group);
    former.add_policy(std::make_shared<TwoLinearsPolicy>());
    former.shard(*model);
    // The table was executed: up's rows and down's columns are split, down's bias whole.
    const auto specs = model->canonical_shard_specs();
    EXPECT_EQ(specs.size(), 2u * 3u) << "up.weight, up.bias and down.weight of each layer";
    EXPECT_EQ(model->layer(0)->named_parameters()["up.weight"].size(0), hidden / tp);
    EXPECT_EQ(model->layer(0)->named_parameters()["down.weight"].size(1), hidden / tp);
    EXPECT_EQ(model->layer(0)->named_parameters()["down.bias"].numel(), kDim);
    const auto got = train(*model);

    ASSERT_EQ(got.size(), want.size());
    for (std::size_t s = 0; s < want.size(); ++s) {
      EXPECT_NEAR(got[s], want[s], test::kFp32Tolerance * std::abs(want[s])) << "step " << s;
    }
    EXPECT_LT(want.back(), want.front()) << "the reference must learn";
    const auto weights = gathered_parameters(*model, *group);
    for (const auto& item : reference->canonical_named_parameters()) {
      EXPECT_LE(relative_error(weights.at(item.key()), item.value().detach()), test::kFp32Tolerance) << item.key();
    }
  }
  world()->barrier().wait();
}

}  // namespace colo::shardformer::plan_test
