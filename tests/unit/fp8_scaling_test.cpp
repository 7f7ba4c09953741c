// Delayed float8 scaling on the CPU (issue 39): amp::AmaxHistory over many operands, a model's
// nn::Fp8DelayedScaling (its layers' slots are views it keeps current, its state round-trips and a
// refused state changes nothing), the update run after every optimizer step, the plugins' fp8_*
// options at their bounds, and the refusal on CPUs. The float8 casts that fill the slots run on
// GPUs only: tests/gpu/fp8_linear_test.cpp.
#include <colo/amp/amax_history.h>
#include <colo/booster/plugin_options.h>
#include <colo/engine/mixed_precision_optimizer.h>
#include <colo/engine/parallelize.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/nn/linear.h>
#include <colo/plugins/hybrid_parallel_options.h>
#include <colo/plugins/torch_ddp_options.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tiny_layer_stack.h"

namespace {

using colo::amp::AmaxHistory;
using colo::amp::AmaxReduction;
using colo::amp::DelayedScalingOptions;
using colo::nn::Fp8DelayedScaling;

// Operand i's steps: 2^e with e uniform in [-4, 8), a fresh draw per operand and step.
std::vector<std::vector<float>> random_amaxes(int operands, int steps, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> exponent(-4.0f, 8.0f);
  std::vector<std::vector<float>> out(static_cast<size_t>(operands));
  for (auto& row : out) {
    for (int s = 0; s < steps; ++s) row.push_back(std::exp2(exponent(gen)));
  }
  return out;
}

TEST(AmaxHistory, ManyOperandsEachTakeTheirOwnHistoryThroughViewsThatStayCurrent) {
  const int operands = 5, steps = 12, length = 4;
  const auto amaxes = random_amaxes(operands, steps, 3);
  for (const auto reduction : {AmaxReduction::kMax, AmaxReduction::kMostRecent}) {
    SCOPED_TRACE(colo::amp::to_string(reduction));
    AmaxHistory h(DelayedScalingOptions().history_length(length).reduction(reduction).margin(1), 448.0, {}, operands);
    ASSERT_EQ(h.operands(), operands);
    // Views taken once, before any step, as a layer keeps them.
    std::vector<torch::Tensor> slot, scale;
    for (int i = 0; i < operands; ++i) {
      slot.push_back(h.current_amax(i));
      scale.push_back(h.scale(i));
    }
    for (int s = 0; s < steps; ++s) {
      // Two casts per operand and step (the slot keeps their max): the amax, and half of it.
      for (int i = 0; i < operands; ++i) {
        const float a = amaxes[static_cast<size_t>(i)][static_cast<size_t>(s)];
        slot[static_cast<size_t>(i)].copy_(torch::maximum(slot[static_cast<size_t>(i)], torch::tensor(a / 2)));
        slot[static_cast<size_t>(i)].copy_(torch::maximum(slot[static_cast<size_t>(i)], torch::tensor(a)));
      }
      h.update();
      for (int i = 0; i < operands; ++i) {
        const auto& row = amaxes[static_cast<size_t>(i)];
        float want_amax = row[static_cast<size_t>(s)];
        if (reduction == AmaxReduction::kMax) {
          want_amax = *std::max_element(row.begin() + std::max(0, s + 1 - length), row.begin() + s + 1);
        }
        const float want = 224.0f / want_amax;  // 448 / 2^margin
        ASSERT_NEAR(scale[static_cast<size_t>(i)].item<float>(), want, 1e-6f * want) << "operand " << i << " step " << s;
        EXPECT_EQ(slot[static_cast<size_t>(i)].item<float>(), 0.0f) << "a new step's slot opens at 0";
      }
    }
  }
}

TEST(AmaxHistory, AStateOfAnotherOperandCountIsRefusedNamingBoth) {
  AmaxHistory three(DelayedScalingOptions().history_length(2), 448.0, {}, 3);
  AmaxHistory four(DelayedScalingOptions().history_length(2), 448.0, {}, 4);
  try {
    four.load_state(three.state());
    FAIL() << "a state of 3 operands loaded into 4";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a history of 3 float8 operands, this run has 4"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(AmaxHistory(DelayedScalingOptions(), 448.0, {}, 0), std::invalid_argument);
  EXPECT_NO_THROW(AmaxHistory(DelayedScalingOptions(), 448.0, {}, 1));
}

TEST(Fp8DelayedScaling, LayerSlotsAreViewsOfOneStateItsUpdateKeepsCurrent) {
  Fp8DelayedScaling state(3, DelayedScalingOptions().history_length(2), {});
  EXPECT_FALSE(state.primed());
  std::vector<std::shared_ptr<const colo::nn::Fp8OperandScales>> layers;
  for (int i = 0; i < 3; ++i) layers.push_back(state.layer(i));
  EXPECT_THROW(state.layer(3), std::out_of_range);
  EXPECT_FALSE(*layers[0]->primed);
  for (int i = 0; i < 3; ++i) {
    const auto& l = *layers[static_cast<size_t>(i)];
    l.input_amax.fill_(1.0f + i);
    l.weight_amax.fill_(0.25f * (i + 1));
    l.grad_amax.fill_(1e-3f * (i + 1));
  }
  state.update();
  EXPECT_TRUE(state.primed());
  EXPECT_TRUE(*layers[2]->primed);
  for (int i = 0; i < 3; ++i) {
    const auto& l = *layers[static_cast<size_t>(i)];
    EXPECT_FLOAT_EQ(l.input_scale.item<float>(), 448.0f / (1.0f + i));
    EXPECT_FLOAT_EQ(l.weight_scale.item<float>(), 448.0f / (0.25f * (i + 1)));
    EXPECT_FLOAT_EQ(l.grad_scale.item<float>(), 57344.0f / (1e-3f * (i + 1)));
    EXPECT_EQ(l.input_amax.item<float>(), 0.0f);
  }
  // A non-finite output gradient: dropped, counted, that scale kept; the others move.
  layers[1]->grad_amax.fill_(std::numeric_limits<float>::infinity());
  layers[1]->input_amax.fill_(8.0f);
  state.update();
  EXPECT_EQ(state.nonfinite_amaxes(), 1);
  EXPECT_FLOAT_EQ(layers[1]->grad_scale.item<float>(), 57344.0f / 2e-3f);
  EXPECT_FLOAT_EQ(layers[1]->input_scale.item<float>(), 448.0f / 8.0f);
  EXPECT_THROW(Fp8DelayedScaling(0, DelayedScalingOptions(), {}), std::invalid_argument);
}

TEST(Fp8DelayedScaling, StateRoundTripsAndARefusedStateChangesNothing) {
  const auto amaxes = random_amaxes(6, 10, 17);
  const auto options = DelayedScalingOptions().history_length(3);
  Fp8DelayedScaling run(2, options, {}), resumed(2, options, {});
  const auto record = [&amaxes](Fp8DelayedScaling& s, int step) {
    for (int i = 0; i < 2; ++i) {
      const auto& l = *s.layer(i);
      l.input_amax.fill_(amaxes[static_cast<size_t>(3 * i)][static_cast<size_t>(step)]);
      l.weight_amax.fill_(amaxes[static_cast<size_t>(3 * i + 1)][static_cast<size_t>(step)]);
      l.grad_amax.fill_(amaxes[static_cast<size_t>(3 * i + 2)][static_cast<size_t>(step)] * 1e-4f);
    }
    s.update();
  };
  for (int step = 0; step < 5; ++step) record(run, step);
  resumed.load_state(run.state());
  EXPECT_TRUE(resumed.primed());
  for (int step = 5; step < 10; ++step) {
    record(run, step);
    record(resumed, step);
    ASSERT_TRUE(torch::equal(run.forward().scale(), resumed.forward().scale())) << "step " << step;
    ASSERT_TRUE(torch::equal(run.backward().history(), resumed.backward().history())) << "step " << step;
  }
  // A state of another model (3 layers): refused, naming the counts, and this state unchanged.
  Fp8DelayedScaling other(3, options, {});
  const auto before = resumed.state();
  try {
    resumed.load_state(other.state());
    FAIL() << "a 3-layer state loaded into a 2-layer model";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("6 float8 operands, this run has 4"), std::string::npos) << e.what();
  }
  // A state whose forward part fits and whose backward part does not (another history length):
  // refused before the forward part is taken.
  auto half_fitting = Fp8DelayedScaling(2, options, {}).state();  // its forward part differs from this one's
  half_fitting["backward.history"] = torch::zeros({5, 2});
  EXPECT_THROW(resumed.load_state(half_fitting), std::invalid_argument);
  for (const auto& item : before) {
    EXPECT_TRUE(torch::equal(item.value(), resumed.state()[item.key()])) << item.key() << " changed";
  }
  // Unprimed states load as unprimed.
  Fp8DelayedScaling fresh(2, options, {});
  resumed.load_state(fresh.state());
  EXPECT_FALSE(resumed.primed());
}

TEST(Fp8DelayedScaling, EveryOptimizerStepEndsWithTheUpdate) {
  auto model = colo::test::tiny_layer_stack(5);
  auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  colo::MixedPrecisionOptimizer optimizer(adam, model);
  auto scaling = std::make_shared<Fp8DelayedScaling>(2, DelayedScalingOptions(), torch::TensorOptions());
  colo::attach_fp8_scaling(optimizer, scaling, {});
  colo::attach_fp8_scaling(optimizer, nullptr, {});  // nothing to update: no work added
  for (int step = 1; step <= 2; ++step) {
    scaling->layer(0)->input_amax.fill_(2.0f * step);
    auto loss = model->forward(torch::randn({3, 4})).sum();
    optimizer.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    EXPECT_TRUE(scaling->primed());
    EXPECT_FLOAT_EQ(scaling->layer(0)->input_scale.item<float>(), 448.0f / (2.0f * step)) << "step " << step;
  }
}

// A state after a few steps of random amaxes, one of them non-finite.
void record_random_steps(Fp8DelayedScaling& scaling, unsigned seed) {
  const auto amaxes = random_amaxes(static_cast<int>(3 * scaling.layers()), 3, seed);
  for (int step = 0; step < 3; ++step) {
    for (int64_t i = 0; i < scaling.layers(); ++i) {
      const auto slot = scaling.layer(i);
      slot->input_amax.fill_(amaxes[3 * i][step]);
      slot->weight_amax.fill_(amaxes[3 * i + 1][step]);
      slot->grad_amax.fill_(step == 1 && i == 0 ? std::numeric_limits<float>::infinity() : amaxes[3 * i + 2][step]);
    }
    scaling.update();
  }
}

std::map<std::string, torch::Tensor> entries_of(const Fp8DelayedScaling& scaling) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, tensor] : scaling.layer_entries()) out[name] = tensor;
  return out;
}

// Checkpoints name each layer's state by the layer: a state saved by a whole model loads into a
// part of it (a pipeline stage) whose layers come in another order, each layer its own values.
TEST(Fp8DelayedScaling, LayerEntriesLoadByNameIntoAPartInAnotherOrder) {
  const auto options = DelayedScalingOptions().history_length(4);
  Fp8DelayedScaling whole(3, options, {});
  whole.set_layer_names({"blocks.0.attn.qkv", "blocks.0.mlp.fc1", "head"});
  record_random_steps(whole, 5);
  const auto saved = whole.layer_entries();
  ASSERT_EQ(saved.size(), 3u * 3u * 3u);
  EXPECT_EQ(saved.front().first, "blocks.0.attn.qkv.input.amax_history");
  EXPECT_EQ(saved.front().second.sizes(), torch::IntArrayRef({4}));

  Fp8DelayedScaling part(2, options, {});
  part.set_layer_names({"head", "blocks.0.attn.qkv"});
  const auto before = entries_of(part);
  auto load = part.prepare_load(saved, /*primed=*/true);
  EXPECT_FALSE(part.primed()) << "prepare_load changes nothing";
  for (const auto& [name, tensor] : entries_of(part)) EXPECT_TRUE(torch::equal(tensor, before.at(name))) << name;
  load();
  EXPECT_TRUE(part.primed());
  const auto want = entries_of(whole);
  for (const auto& [name, tensor] : entries_of(part)) {
    EXPECT_TRUE(torch::equal(tensor, want.at(name))) << name;
  }
  // The slots the layers cast with are views of the loaded state.
  EXPECT_FLOAT_EQ(part.layer(0)->input_scale.item<float>(), want.at("head.input.scale").item<float>());
  EXPECT_FLOAT_EQ(part.layer(1)->grad_scale.item<float>(), want.at("blocks.0.attn.qkv.grad.scale").item<float>());
  EXPECT_EQ(part.nonfinite_amaxes(), 1);
}

// What prepare_load says when `from`'s entries do not fit `into` ("(loaded)" when they do).
std::string load_error(Fp8DelayedScaling& into, const Fp8DelayedScaling& from) {
  try {
    into.prepare_load(from.layer_entries(), true);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(Fp8DelayedScaling, RefusesAMissingLayerAnotherHistoryLengthAndBadNames) {
  const auto options = DelayedScalingOptions().history_length(4);
  Fp8DelayedScaling saved(2, options, {});
  saved.set_layer_names({"a", "b"});
  record_random_steps(saved, 7);
  Fp8DelayedScaling other(2, options, {});
  other.set_layer_names({"a", "c"});
  EXPECT_NE(load_error(other, saved).find("no 'c.input.amax_history'"), std::string::npos) << load_error(other, saved);
  Fp8DelayedScaling longer(2, DelayedScalingOptions().history_length(5), {});
  longer.set_layer_names({"a", "b"});
  EXPECT_NE(load_error(longer, saved).find("fp8_amax_history_len"), std::string::npos) << load_error(longer, saved);
  EXPECT_THROW(other.set_layer_names({"a"}), std::invalid_argument);
  EXPECT_THROW(other.set_layer_names({"a", "a"}), std::invalid_argument);
  EXPECT_EQ(Fp8DelayedScaling(2, options, {}).layer_names(), (std::vector<std::string>{"layer0", "layer1"}));
}

// attach_fp8_scaling makes the state part of what the optimizer's checkpoints carry: saved beside
// the optimizer's own state, loaded back into another run's, dropped by a run without it, and not
// loaded when the optimizer's own state is refused.
TEST(Fp8DelayedScaling, TheOptimizersCheckpointStateCarriesIt) {
  auto model = colo::test::tiny_layer_stack(5);
  auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  colo::MixedPrecisionOptimizer optimizer(adam, model);
  auto scaling = std::make_shared<Fp8DelayedScaling>(2, DelayedScalingOptions().history_length(3), torch::TensorOptions());
  scaling->set_layer_names({"0.linear", "1.linear"});
  colo::attach_fp8_scaling(optimizer, scaling, {});
  for (int step = 0; step < 2; ++step) {
    scaling->layer(0)->input_amax.fill_(3.0f + step);
    scaling->layer(1)->grad_amax.fill_(0.25f);
    optimizer.backward(model->forward(torch::randn({3, 4})).sum());
    optimizer.step();
    optimizer.zero_grad();
  }
  const auto state = optimizer.checkpoint_state();
  EXPECT_EQ(state.scalars.at("fp8_scaling.primed"), 1.0);
  std::map<std::string, torch::Tensor> saved(state.tensors.begin(), state.tensors.end());
  ASSERT_TRUE(saved.count("fp8_scaling.0.linear.input.amax_history"));
  EXPECT_FLOAT_EQ(saved.at("fp8_scaling.0.linear.input.scale").item<float>(), 448.0f / 4.0f);
  EXPECT_EQ(optimizer.full_state().tensors.size() + 2 * 3 * 3, state.tensors.size());

  auto fresh_model = colo::test::tiny_layer_stack(5);
  auto fresh_adam = std::make_shared<torch::optim::Adam>(fresh_model->parameters(), torch::optim::AdamOptions(1e-2));
  colo::MixedPrecisionOptimizer resumed(fresh_adam, fresh_model);
  auto resumed_scaling =
      std::make_shared<Fp8DelayedScaling>(2, DelayedScalingOptions().history_length(3), torch::TensorOptions());
  resumed_scaling->set_layer_names({"0.linear", "1.linear"});
  colo::attach_fp8_scaling(resumed, resumed_scaling, {});

  // The optimizer's own state refused (a parameter's entries missing): the histories stay as they were.
  auto broken = state;
  broken.tensors.erase(std::remove_if(broken.tensors.begin(), broken.tensors.end(),
                                      [](const auto& e) { return e.first.rfind("fp8_scaling.", 0) != 0; }),
                       broken.tensors.end());
  broken.tensors.emplace_back("no.such.param.exp_avg", torch::zeros({1}));
  EXPECT_THROW(resumed.load_checkpoint_state(broken), std::invalid_argument);
  EXPECT_FALSE(resumed_scaling->primed());

  resumed.load_checkpoint_state(state);
  EXPECT_TRUE(resumed_scaling->primed());
  const auto want = entries_of(*scaling);
  for (const auto& [name, tensor] : entries_of(*resumed_scaling)) EXPECT_TRUE(torch::equal(tensor, want.at(name))) << name;

  // A run without delayed scaling takes the same checkpoint, the histories dropped.
  auto plain_model = colo::test::tiny_layer_stack(5);
  auto plain_adam = std::make_shared<torch::optim::Adam>(plain_model->parameters(), torch::optim::AdamOptions(1e-2));
  colo::MixedPrecisionOptimizer plain(plain_adam, plain_model);
  EXPECT_NO_THROW(plain.load_checkpoint_state(state));
  // Two companions over one prefix would split one state between them.
  EXPECT_THROW(colo::attach_fp8_scaling(resumed, resumed_scaling, {}), std::invalid_argument);
}

std::string torch_ddp_error(const colo::PluginOptions& options) {
  try {
    colo::TorchDdpOptions::parse(options);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8Options, DelayedScalingKeysAtTheirBoundsAndOnlyWhereTheyApply) {
  const auto parsed = colo::TorchDdpOptions::parse({{"precision", "fp8"},
                                                    {"fp8_scaling", "delayed"},
                                                    {"fp8_amax_history_len", "1"},
                                                    {"fp8_amax_compute_algo", "most_recent"},
                                                    {"fp8_margin", "0"}});
  EXPECT_EQ(parsed.fp8().scaling(), colo::nn::Fp8Scaling::kDelayed);
  EXPECT_EQ(parsed.fp8().delayed().history_length(), 1);
  EXPECT_EQ(parsed.fp8().delayed().reduction(), AmaxReduction::kMostRecent);
  EXPECT_EQ(parsed.fp8().delayed().margin(), 0);
  EXPECT_EQ(colo::TorchDdpOptions::parse({{"precision", "fp8"}}).fp8().scaling(), colo::nn::Fp8Scaling::kCurrent);
  // Just past the bounds.
  const auto bounds = torch_ddp_error(
      {{"precision", "fp8"}, {"fp8_scaling", "delayed"}, {"fp8_amax_history_len", "0"}, {"fp8_margin", "-1"}});
  EXPECT_NE(bounds.find("fp8_amax_history_len must be >= 1, got 0"), std::string::npos) << bounds;
  EXPECT_NE(bounds.find("fp8_margin must be >= 0, got -1"), std::string::npos) << bounds;
  const auto choice = torch_ddp_error({{"precision", "fp8"}, {"fp8_scaling", "static"}});
  EXPECT_NE(choice.find("current"), std::string::npos) << choice;
  EXPECT_NE(choice.find("delayed"), std::string::npos) << choice;
  // Given where they do nothing: said, not ignored.
  const auto bf16 = torch_ddp_error({{"precision", "bf16"}, {"fp8_scaling", "delayed"}});
  EXPECT_NE(bf16.find("fp8_scaling only applies with precision=fp8 (precision is bf16)"), std::string::npos) << bf16;
  const auto current = torch_ddp_error({{"precision", "fp8"}, {"fp8_amax_history_len", "4"}});
  EXPECT_NE(current.find("fp8_amax_history_len only applies with fp8_scaling=delayed"), std::string::npos) << current;
  // Every plugin reads them (hybrid_parallel here; the round trips cover the others).
  EXPECT_EQ(colo::HybridParallelOptions::parse({{"precision", "fp8"}, {"fp8_scaling", "delayed"}}).fp8().scaling(),
            colo::nn::Fp8Scaling::kDelayed);
}

TEST(Fp8Options, DelayedScalingOnTheCpuIsRefusedAndChangesNothing) {
  torch::manual_seed(2);
  colo::nn::Linear layer(torch::nn::LinearOptions(32, 16));
  const auto recipe = colo::nn::Fp8Recipe().scaling(colo::nn::Fp8Scaling::kDelayed);
  try {
    colo::nn::use_fp8_linears(*layer, torch::kCPU, recipe);
    FAIL() << "float8 products turned on on a CPU";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Use precision=bf16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(layer->fp8());
  EXPECT_EQ(layer->fp8_scales(), nullptr);
}

}  // namespace
