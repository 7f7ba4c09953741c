#include <gtest/gtest.h>
#include <torch/torch.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

#include <colo/checkpoint/checkpoint_error.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/nn/classifier_head.h>
#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/drop_path.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/gelu.h>
#include <colo/nn/init.h>
#include <colo/nn/layer_norm.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/linear.h>
#include <colo/nn/patch_embedding.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/vision_transformer.h>
#include <colo/nn/vit_config.h>

#include "temporary_directory.h"

namespace {

using colo::testing::TemporaryDirectory;

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

using colo::nn::LayerStack;
using colo::nn::NamedTensors;
using colo::nn::ViTConfig;

// image 32, patch 8 → 16 patches + class token; dim 32, 4 heads of 8; 10 classes.
ViTConfig small_config() {
  return ViTConfig().image_size(32).patch_size(8).embed_dim(32).depth(2).num_heads(4).num_classes(10);
}

// small_config()'s ViT with every tensor moved away from its initial value: a fresh ViT's biases
// are 0 and its LayerNorm weights 1 in any seed, so a load that put one of them in another's place
// would go unseen.
std::shared_ptr<LayerStack> randomised_vit(uint64_t seed, const ViTConfig& config = small_config()) {
  torch::manual_seed(seed);
  auto model = colo::nn::make_vision_transformer(config);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(0.05 * torch::randn_like(p));
  return model;
}

NamedTensors timm_state(const LayerStack& model) {
  NamedTensors state;
  for (const auto& item : model.canonical_named_parameters()) state.emplace_back(item.key(), item.value().clone());
  return state;
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  return ((actual - expected).norm() / expected.norm()).item<double>();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// ---------------------------------------------------------------------------------------------
// ViTConfig

TEST(ViTConfig, PresetsAreTimmsPatch16Models) {
  struct Expected {
    const char* name;
    int64_t dim, depth, heads;
  };
  for (const auto& e : {Expected{"tiny", 192, 12, 3}, Expected{"small", 384, 12, 6}, Expected{"base", 768, 12, 12},
                        Expected{"large", 1024, 24, 16}}) {
    for (const auto& name : {std::string(e.name), "vit_" + std::string(e.name) + "_patch16_224"}) {
      const auto c = ViTConfig::preset(name);
      EXPECT_EQ(c.embed_dim(), e.dim) << name;
      EXPECT_EQ(c.depth(), e.depth) << name;
      EXPECT_EQ(c.num_heads(), e.heads) << name;
      EXPECT_EQ(c.image_size(), 224);
      EXPECT_EQ(c.patch_size(), 16);
      EXPECT_EQ(c.num_classes(), 1000);
      EXPECT_EQ(c.mlp_hidden_dim(), 4 * e.dim);
      EXPECT_DOUBLE_EQ(c.norm_eps(), 1e-6);
      EXPECT_NO_THROW(c.validate());
    }
  }
}

TEST(ViTConfig, UnknownPresetListsTheValidNames) {
  const auto message = error_of([] { ViTConfig::preset("huge"); });
  for (const char* fragment : {"'huge'", "tiny", "small", "base", "large"}) {
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(ViTConfig, ValidationReportsEveryProblem) {
  const auto config = ViTConfig().image_size(30).patch_size(8).embed_dim(100).num_heads(3).drop_path_rate(1.5);
  const auto message = error_of([&] { config.validate(); });
  EXPECT_NE(message.find("image_size = 30 is not divisible by patch_size = 8"), std::string::npos) << message;
  EXPECT_NE(message.find("embed_dim = 100 is not divisible by num_heads = 3"), std::string::npos) << message;
  EXPECT_NE(message.find("drop_path_rate = 1.5"), std::string::npos) << message;
  EXPECT_THROW(colo::nn::make_vision_transformer(config), std::invalid_argument);
  EXPECT_THROW(colo::nn::make_vision_transformer(small_config().depth(0)), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Structure

TEST(VisionTransformer, ParameterCountsMatchTimm) {
  // sum(p.numel() for p in timm.create_model(name).parameters()), timm 1.0.31.
  const std::vector<std::pair<std::string, int64_t>> expected{{"tiny", 5'717'416},
                                                              {"small", 22'050'664},
                                                              {"base", 86'567'656},
                                                              {"large", 304'326'632}};
  for (const auto& [name, count] : expected) {
    // All blocks are alike, so a one-block model gives the whole count without allocating
    // 300M parameters in CI: embedding + head + depth × block.
    const auto full = ViTConfig::preset(name);
    const auto one_block = colo::nn::make_vision_transformer(ViTConfig(full).depth(1));
    ASSERT_EQ(one_block->size(), 3u);
    const int64_t block = parameter_count(*one_block->layer(1));
    const int64_t rest = parameter_count(*one_block) - block;
    EXPECT_EQ(rest + full.depth() * block, count) << name;
  }
  const auto tiny = colo::nn::make_vision_transformer(ViTConfig::preset("tiny"));
  EXPECT_EQ(tiny->size(), 14u);
  EXPECT_EQ(parameter_count(*tiny), 5'717'416);
}

TEST(VisionTransformer, CanonicalNamesAndShapesAreTimms) {
  const auto config = ViTConfig::preset("tiny").depth(1);
  const auto model = colo::nn::make_vision_transformer(config);
  // timm.create_model("vit_tiny_patch16_224", depth=1).state_dict(): names, order, shapes.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected{
      {"cls_token", {1, 1, 192}},
      {"pos_embed", {1, 197, 192}},
      {"patch_embed.proj.weight", {192, 3, 16, 16}},
      {"patch_embed.proj.bias", {192}},
      {"blocks.0.norm1.weight", {192}},
      {"blocks.0.norm1.bias", {192}},
      {"blocks.0.attn.qkv.weight", {576, 192}},
      {"blocks.0.attn.qkv.bias", {576}},
      {"blocks.0.attn.proj.weight", {192, 192}},
      {"blocks.0.attn.proj.bias", {192}},
      {"blocks.0.norm2.weight", {192}},
      {"blocks.0.norm2.bias", {192}},
      {"blocks.0.mlp.fc1.weight", {768, 192}},
      {"blocks.0.mlp.fc1.bias", {768}},
      {"blocks.0.mlp.fc2.weight", {192, 768}},
      {"blocks.0.mlp.fc2.bias", {192}},
      {"norm.weight", {192}},
      {"norm.bias", {192}},
      {"head.weight", {1000, 192}},
      {"head.bias", {1000}},
  };
  const auto params = model->canonical_named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].key(), expected[i].first);
    EXPECT_EQ(params[i].value().sizes().vec(), expected[i].second) << expected[i].first;
  }
  EXPECT_EQ(model->canonical_parameter_names(), params.keys());
  EXPECT_TRUE(model->canonical_named_buffers().is_empty());
  EXPECT_EQ(model->layer(1)->canonical_prefix(), "blocks.0.");
}

TEST(VisionTransformer, ForwardShapes) {
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config());
  ASSERT_EQ(model->size(), 4u);
  const auto images = torch::randn({3, 3, 32, 32});
  const auto tokens = model->layer(0)->forward(images);
  EXPECT_EQ(tokens.sizes(), (std::vector<int64_t>{3, 17, 32}));
  const auto block_out = model->layer(1)->forward(tokens);
  EXPECT_EQ(block_out.sizes(), tokens.sizes());
  EXPECT_EQ(model->forward(images).sizes(), (std::vector<int64_t>{3, 10}));

  const auto message = error_of([&] { model->forward(torch::randn({1, 3, 64, 64})); });
  EXPECT_NE(message.find("expected images [batch, 3, 32, 32], got 1, 3, 64, 64"), std::string::npos) << message;
}

TEST(VisionTransformer, InitialisationIsTimmsAndDeterministic) {
  torch::manual_seed(7);
  const auto a = colo::nn::make_vision_transformer(ViTConfig::preset("tiny").depth(2));
  torch::manual_seed(7);
  const auto b = colo::nn::make_vision_transformer(ViTConfig::preset("tiny").depth(2));
  const auto pa = a->canonical_named_parameters();
  const auto pb = b->canonical_named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].value(), pb[i].value())) << pa[i].key();

  const auto qkv = pa["blocks.1.attn.qkv.weight"];
  EXPECT_NEAR(qkv.std().item<double>(), 0.02, 0.001);  // trunc_normal(std .02): ±2 is ±100σ
  EXPECT_NEAR(qkv.mean().item<double>(), 0.0, 0.001);
  EXPECT_NEAR(pa["head.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(pa["pos_embed"].std().item<double>(), 0.02, 0.002);
  EXPECT_LT(pa["cls_token"].abs().max().item<double>(), 1e-5);
  EXPECT_GT(pa["cls_token"].abs().max().item<double>(), 0.0);
  for (const char* zero : {"blocks.0.attn.qkv.bias", "blocks.0.mlp.fc2.bias", "head.bias", "norm.bias"}) {
    EXPECT_EQ(pa[zero].abs().max().item<double>(), 0.0) << zero;
  }
  EXPECT_TRUE(torch::equal(pa["blocks.0.norm1.weight"], torch::ones({192})));
  // PyTorch's Conv2d default: kaiming_uniform(a=√5) → U(-1/√fan_in, 1/√fan_in), fan_in = 3·16·16.
  const double bound = 1.0 / std::sqrt(3.0 * 16 * 16);
  EXPECT_LE(pa["patch_embed.proj.weight"].abs().max().item<double>(), bound);
  EXPECT_GT(pa["patch_embed.proj.weight"].abs().max().item<double>(), 0.9 * bound);
}

TEST(VisionTransformer, TruncNormalStaysInsideItsBounds) {
  torch::manual_seed(1);
  auto t = colo::nn::init::trunc_normal_(torch::empty({100000}), 0.0, 1.0, -0.5, 1.0);
  EXPECT_GE(t.min().item<double>(), -0.5);
  EXPECT_LE(t.max().item<double>(), 1.0);
  // Mean of N(0,1) truncated to [-0.5, 1]: (φ(-0.5) - φ(1)) / (Φ(1) - Φ(-0.5)) = 0.1101 / 0.5328 ≈ 0.2066.
  EXPECT_NEAR(t.mean().item<double>(), 0.2066, 0.01);
}

TEST(VisionTransformer, DropoutAndDropPathAreInactiveInEval) {
  torch::manual_seed(0);
  const auto plain = colo::nn::make_vision_transformer(small_config());
  const auto noisy =
      colo::nn::make_vision_transformer(small_config().drop_rate(0.5).attn_drop_rate(0.5).drop_path_rate(0.5));
  colo::nn::load_timm_state(*noisy, timm_state(*plain));
  const auto images = torch::randn({4, 3, 32, 32});
  plain->eval();
  noisy->eval();
  const auto reference = plain->forward(images);
  EXPECT_TRUE(torch::equal(noisy->forward(images), reference));
  EXPECT_TRUE(torch::equal(noisy->forward(images), reference));

  noisy->train();  // the rates are wired: training outputs are random
  EXPECT_FALSE(torch::allclose(noisy->forward(images), noisy->forward(images)));
}

TEST(VisionTransformer, DropPathRisesLinearlyOverTheBlocks) {
  const auto model = colo::nn::make_vision_transformer(small_config().depth(5).drop_path_rate(0.2));
  for (int i = 0; i < 5; ++i) {
    const auto block = std::dynamic_pointer_cast<colo::nn::EncoderBlock>(model->layer(1 + i));
    ASSERT_TRUE(block);
    EXPECT_NEAR(block->drop_path_rate(), 0.05 * i, 1e-12) << i;  // torch.linspace(0, 0.2, 5)
  }
}

TEST(VisionTransformer, DropPathDropsWholeSamples) {
  torch::manual_seed(0);
  const auto x = torch::ones({4000, 5, 3});
  const auto y = colo::nn::drop_path(x, 0.25, /*training=*/true);
  const auto per_sample = y.reshape({4000, -1});
  const auto first = per_sample.select(1, 0).unsqueeze(1);
  EXPECT_TRUE(torch::equal(per_sample, first.expand_as(per_sample))) << "one decision per sample";
  const auto kept = (first > 0).to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(first.masked_select(first > 0), torch::full({1}, 1.0 / 0.75)));
  EXPECT_NEAR(kept.mean().item<double>(), 0.75, 0.03);
  EXPECT_TRUE(torch::equal(colo::nn::drop_path(x, 0.25, /*training=*/false), x));
}

// ---------------------------------------------------------------------------------------------
// The layer-stack contract

TEST(LayerStack, SlicesKeepCanonicalNamesAndCompose) {
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config());
  model->eval();
  const auto head = model->slice(0, 2);
  const auto tail = model->slice(2, 4);
  EXPECT_EQ(head->size(), 2u);
  EXPECT_EQ(tail->layer(0), model->layer(2)) << "slices share layers";

  auto names = head->canonical_parameter_names();
  const auto tail_names = tail->canonical_parameter_names();
  names.insert(names.end(), tail_names.begin(), tail_names.end());
  EXPECT_EQ(names, model->canonical_parameter_names());
  EXPECT_EQ(tail_names.front(), "blocks.1.norm1.weight");
  EXPECT_EQ(tail_names.back(), "head.bias");

  const auto images = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::equal(tail->forward(head->forward(images)), model->forward(images)));
  EXPECT_TRUE(model->slice(4, 4)->empty());
  EXPECT_THROW(model->slice(3, 5), std::out_of_range);
  EXPECT_THROW(model->layer(4), std::out_of_range);
}

TEST(LayerStack, DuplicateCanonicalNamesAreRejected) {
  const auto config = small_config();
  LayerStack stack({std::make_shared<colo::nn::EncoderBlock>(config, 0),
                    std::make_shared<colo::nn::EncoderBlock>(config, 0)});
  EXPECT_THROW(stack.canonical_named_parameters(), std::logic_error);
}

// A module with the Linear forward signature, standing in for a tensor-parallel linear.
struct CountingLinearImpl : torch::nn::Module {
  explicit CountingLinearImpl(colo::nn::Linear inner) : linear(register_module("linear", inner)) {}
  torch::Tensor forward(const torch::Tensor& x) {
    ++calls;
    return linear->forward(x);
  }
  colo::nn::Linear linear;
  int calls = 0;
};

TEST(LayerStack, PolicySubmodulesCanBeReplaced) {
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config());
  model->eval();
  const auto images = torch::randn({2, 3, 32, 32});
  const auto before = model->forward(images);

  auto block = std::dynamic_pointer_cast<colo::nn::EncoderBlock>(model->layer(1));
  ASSERT_TRUE(block);
  auto original = block->attn()->qkv().ptr<colo::nn::LinearImpl>();
  auto replacement = std::make_shared<CountingLinearImpl>(colo::nn::Linear(original));
  block->replace_submodule("attn.qkv", torch::nn::AnyModule(replacement));

  EXPECT_TRUE(torch::equal(model->forward(images), before));
  EXPECT_EQ(replacement->calls, 1);
  EXPECT_NE(std::find(model->canonical_parameter_names().begin(), model->canonical_parameter_names().end(),
                      "blocks.0.attn.qkv.linear.weight"),
            model->canonical_parameter_names().end())
      << "the replacement's parameters are what the block now holds";
  const auto message = error_of([&] { block->replace_submodule("attn.q", torch::nn::AnyModule(replacement)); });
  EXPECT_NE(message.find("attn.qkv, attn.proj, mlp.fc1, mlp.fc2"), std::string::npos) << message;
}

// A module with LayerNorm's forward signature, standing in for 2D tensor parallelism's LayerNorm2D.
struct CountingNormImpl : torch::nn::Module {
  explicit CountingNormImpl(torch::nn::LayerNorm inner) : norm(register_module("norm", inner)) {}
  torch::Tensor forward(const torch::Tensor& x) {
    ++calls;
    return norm->forward(x);
  }
  torch::nn::LayerNorm norm;
  int calls = 0;
};

// A replaced norm runs in the block (apart from the fused residual add and norm2), with the
// same result as the block's own LayerNorms.
TEST(LayerStack, BlockNormsCanBeReplaced) {
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config());
  model->eval();
  const auto images = torch::randn({2, 3, 32, 32});
  const auto before = model->forward(images);
  auto block = std::dynamic_pointer_cast<colo::nn::EncoderBlock>(model->layer(1));
  ASSERT_TRUE(block);
  std::vector<std::shared_ptr<CountingNormImpl>> replacements;
  for (const std::string path : {"norm1", "norm2"}) {
    auto original = std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(block->named_children()[path]);
    ASSERT_TRUE(original) << path;
    replacements.push_back(std::make_shared<CountingNormImpl>(torch::nn::LayerNorm(original)));
    block->replace_submodule(path, torch::nn::AnyModule(replacements.back()));
  }
  EXPECT_TRUE(torch::allclose(model->forward(images), before, 1e-5, 1e-6));
  EXPECT_EQ(replacements[0]->calls, 1);
  EXPECT_EQ(replacements[1]->calls, 1);
  const auto names = model->canonical_parameter_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.0.norm2.norm.weight"), names.end());
}

// ---------------------------------------------------------------------------------------------
// Loading weights

TEST(Pretrained, StrictLoadListsEveryProblemAndChangesNothing) {
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config());
  const auto before = timm_state(*model);

  NamedTensors state;
  for (const auto& [name, tensor] : before) {
    if (name == "blocks.1.norm2.bias" || name == "head.bias") continue;  // missing
    if (name == "blocks.0.mlp.fc1.weight") {
      state.emplace_back(name, torch::zeros({64, 32}));  // wrong shape (is [128, 32])
      continue;
    }
    state.emplace_back(name, torch::zeros_like(tensor));
  }
  state.emplace_back("fc_norm.weight", torch::zeros({32}));  // unexpected
  state.emplace_back("blocks.0.norm1.weight", torch::zeros({32}));  // twice

  const auto message = error_of([&] { colo::nn::load_timm_state(*model, state); });
  for (const char* fragment :
       {"missing from the checkpoint (2)", "blocks.1.norm2.bias", "head.bias", "not in the model (1)",
        "fc_norm.weight", "shape mismatch (1)", "blocks.0.mlp.fc1.weight: checkpoint [64, 32] vs model [128, 32]",
        "more than once in the checkpoint (1)", "blocks.0.norm1.weight"}) {
    EXPECT_NE(message.find(fragment), std::string::npos) << fragment << " not in:\n" << message;
  }
  const auto after = timm_state(*model);
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(before[i].second, after[i].second)) << "a failed load changed " << before[i].first;
  }
}

// HF ViTForImageClassification names for a timm-named state, written out by hand from
// transformers' modeling_vit.py (an independent statement of the mapping under test).
NamedTensors to_hf_names(const NamedTensors& timm, int64_t depth) {
  std::map<std::string, torch::Tensor> t(timm.begin(), timm.end());
  NamedTensors hf{
      {"vit.embeddings.cls_token", t.at("cls_token")},
      {"vit.embeddings.position_embeddings", t.at("pos_embed")},
      {"vit.embeddings.patch_embeddings.projection.weight", t.at("patch_embed.proj.weight")},
      {"vit.embeddings.patch_embeddings.projection.bias", t.at("patch_embed.proj.bias")},
  };
  for (int64_t i = 0; i < depth; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const std::string l = "vit.encoder.layer." + std::to_string(i) + ".";
    for (const std::string kind : {"weight", "bias"}) {
      const auto qkv = t.at(b + "attn.qkv." + kind).chunk(3, 0);
      hf.emplace_back(l + "attention.attention.query." + kind, qkv[0]);
      hf.emplace_back(l + "attention.attention.key." + kind, qkv[1]);
      hf.emplace_back(l + "attention.attention.value." + kind, qkv[2]);
      hf.emplace_back(l + "attention.output.dense." + kind, t.at(b + "attn.proj." + kind));
      hf.emplace_back(l + "intermediate.dense." + kind, t.at(b + "mlp.fc1." + kind));
      hf.emplace_back(l + "output.dense." + kind, t.at(b + "mlp.fc2." + kind));
      hf.emplace_back(l + "layernorm_before." + kind, t.at(b + "norm1." + kind));
      hf.emplace_back(l + "layernorm_after." + kind, t.at(b + "norm2." + kind));
    }
  }
  for (const std::string kind : {"weight", "bias"}) {
    hf.emplace_back("vit.layernorm." + kind, t.at("norm." + kind));
    hf.emplace_back("classifier." + kind, t.at("head." + kind));
  }
  return hf;
}

TEST(Pretrained, HuggingFaceNamesRoundTrip) {
  const auto source = randomised_vit(1);
  const auto target = randomised_vit(2);
  const auto hf = to_hf_names(timm_state(*source), 2);
  EXPECT_TRUE(colo::nn::is_hf_vit_state(hf));
  EXPECT_FALSE(colo::nn::is_hf_vit_state(timm_state(*source)));

  const auto renamed = colo::nn::hf_vit_to_timm_names(hf);
  std::set<std::string> renamed_names;
  for (const auto& [name, tensor] : renamed) renamed_names.insert(name);
  const auto canonical = source->canonical_parameter_names();
  EXPECT_EQ(renamed_names, std::set<std::string>(canonical.begin(), canonical.end()));

  colo::nn::load_hf_vit_state(*target, hf);
  const auto s = source->canonical_named_parameters();
  const auto t = target->canonical_named_parameters();
  for (const auto& item : s) EXPECT_TRUE(torch::equal(item.value(), t[item.key()])) << item.key();
  source->eval();
  target->eval();
  const auto images = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::equal(source->forward(images), target->forward(images)));

  // ViTModel checkpoints have no "vit." prefix.
  NamedTensors bare;
  for (const auto& [name, tensor] : hf) {
    bare.emplace_back(name.rfind("vit.", 0) == 0 ? name.substr(4) : name, tensor);
  }
  EXPECT_NO_THROW(colo::nn::load_hf_vit_state(*target, bare));
}

TEST(Pretrained, HuggingFaceStateWithoutAllOfQueryKeyValueIsRejected) {
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config());
  NamedTensors hf;
  for (auto& entry : to_hf_names(timm_state(*model), 2)) {
    if (entry.first != "vit.encoder.layer.1.attention.attention.key.bias") hf.push_back(entry);
  }
  const auto message = error_of([&] { colo::nn::load_hf_vit_state(*model, hf); });
  EXPECT_NE(message.find("blocks.1.attn.qkv.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("lacks key."), std::string::npos) << message;
}

TEST(Pretrained, LoadPretrainedDetectsTheNaming) {
  const TemporaryDirectory dir;
  const auto source = randomised_vit(1);
  const auto timm_file = dir.file("timm.safetensors");
  const auto hf_file = dir.file("hf.safetensors");
  colo::checkpoint::write_safetensors(timm_file, timm_state(*source));
  colo::checkpoint::write_safetensors(hf_file, to_hf_names(timm_state(*source), 2));

  for (const auto& file : {timm_file, hf_file}) {
    const auto target = randomised_vit(2);
    colo::nn::load_pretrained(*target, file);
    const auto t = target->canonical_named_parameters();
    for (const auto& item : source->canonical_named_parameters()) {
      EXPECT_TRUE(torch::equal(item.value(), t[item.key()])) << file << ": " << item.key();
    }
  }

  const auto wrong = colo::nn::make_vision_transformer(small_config().num_classes(7));
  const auto message = error_of([&] { colo::nn::load_pretrained(*wrong, hf_file); });
  EXPECT_NE(message.find(hf_file), std::string::npos) << message;
  EXPECT_NE(message.find("Hugging Face"), std::string::npos) << message;
  EXPECT_NE(message.find("head.weight: checkpoint [10, 32] vs model [7, 32]"), std::string::npos) << message;
}

// Pretrained weights with a NaN or an infinity are refused by every loader, naming the tensor
// under the caller's own names (and the file), and the model keeps its weights.
TEST(Pretrained, NonFiniteWeightsAreRefusedAndChangeNothing) {
  const TemporaryDirectory dir;
  torch::manual_seed(1);
  const auto source = colo::nn::make_vision_transformer(small_config());
  auto timm = timm_state(*source);
  for (auto& [name, tensor] : timm) {
    if (name == "blocks.1.attn.proj.weight") {
      tensor = tensor.detach().clone();
      tensor.view({-1})[3] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  const auto hf = to_hf_names(timm, 2);
  const auto timm_file = dir.file("timm.safetensors");
  const auto hf_file = dir.file("hf.safetensors");
  colo::checkpoint::write_safetensors(timm_file, timm);
  colo::checkpoint::write_safetensors(hf_file, hf);

  torch::manual_seed(2);
  const auto target = colo::nn::make_vision_transformer(small_config());
  const auto before = timm_state(*target);
  const std::vector<std::pair<std::string, std::function<void()>>> loads = {
      {timm_file + ": tensor 'blocks.1.attn.proj.weight'", [&] { colo::nn::load_pretrained(*target, timm_file); }},
      {hf_file + ": tensor 'vit.encoder.layer.1.attention.output.dense.weight'",
       [&] { colo::nn::load_pretrained(*target, hf_file); }},
      {"load_timm_state: tensor 'blocks.1.attn.proj.weight'", [&] { colo::nn::load_timm_state(*target, timm); }},
      {"load_hf_vit_state: tensor 'vit.encoder.layer.1.attention.output.dense.weight'",
       [&] { colo::nn::load_hf_vit_state(*target, hf); }},
  };
  for (const auto& [expected, load] : loads) {
    try {
      load();
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const colo::checkpoint::CheckpointError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(expected + " holds 1 non-finite value"), std::string::npos) << message;
    }
  }
  const auto after = timm_state(*target);
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(before[i].second, after[i].second)) << "a refused load changed " << before[i].first;
  }
}

// Parity with Hugging Face: transformers' ViTForImageClassification with random weights
// (tests/oracle/export_hf_vit.py, the CTest fixture oracle_hf_vit), saved by its save_pretrained
// and loaded under its own names, gives the logits transformers computed. An independent check of
// the name mapping (which tensor is which LayerNorm, the split query/key/value, the head).
TEST(HuggingFaceParity, ViTForImageClassificationLogits) {
  const std::string dir = COLO_BINARY_DIR "/oracle/hf_vit_tiny32";
  const std::string reference_file = dir + ".reference.safetensors";
  ASSERT_TRUE(file_exists(dir + "/model.safetensors") && file_exists(reference_file))
      << dir << " is missing: run `python3 " COLO_SOURCE_DIR "/tests/oracle/export_hf_vit.py --out " COLO_BINARY_DIR
         "/oracle` (CTest fixture oracle_hf_vit)";
  const auto weights = colo::nn::read_pretrained(dir);
  EXPECT_TRUE(weights.hugging_face);
  const auto reference = colo::checkpoint::read_safetensors(reference_file);
  // Hugging Face's LayerNorms use eps 1e-12 (pretrained.h).
  torch::manual_seed(0);
  const auto model = colo::nn::make_vision_transformer(small_config().norm_eps(1e-12));
  const auto report = colo::nn::load_pretrained(*model, weights);
  EXPECT_TRUE(report.notes.empty());
  model->eval();
  torch::NoGradGuard no_grad;
  const double error = relative_error(model->forward(reference.at("input")), reference.at("logits"));
  std::cout << "Hugging Face ViT logits: ||colo - transformers|| / ||transformers|| = " << error << "\n";
  EXPECT_LT(error, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Parity with timm (reference tensors from tests/oracle/export_timm_vit.py, the CTest fixture
// oracle_timm_vit_tiny).

struct TimmReference {
  std::string weights;
  colo::checkpoint::SafetensorsFile reference;
};

TimmReference read_timm_reference(const std::string& model) {
  const std::string dir = COLO_BINARY_DIR "/oracle/";
  TimmReference r{dir + model + ".safetensors", {}};
  const std::string reference = dir + model + ".reference.safetensors";
  for (const auto& file : {r.weights, reference}) {
    if (!file_exists(file)) {
      throw std::runtime_error(file + " is missing: run `python3 " COLO_SOURCE_DIR
                                      "/tests/oracle/export_timm_vit.py --model " +
                               model + " --out " + dir + " --grads` (CTest fixture oracle_timm_vit_tiny)");
    }
  }
  r.reference = colo::checkpoint::read_safetensors(reference);
  return r;
}

TEST(TimmParity, VitTinyStateDictOrder) {
  const auto r = read_timm_reference("vit_tiny_patch16_224");
  const auto weights = colo::checkpoint::read_safetensors(r.weights);
  std::vector<std::string> timm_keys;
  std::istringstream keys(weights.metadata.at("state_dict_keys"));
  for (std::string key; std::getline(keys, key);) timm_keys.push_back(key);
  const auto model = colo::nn::make_vision_transformer(ViTConfig::preset("tiny"));
  EXPECT_EQ(model->canonical_parameter_names(), timm_keys);
}

TEST(TimmParity, VitTinyLogits) {
  const auto r = read_timm_reference("vit_tiny_patch16_224");
  const auto model = colo::nn::make_vision_transformer(ViTConfig::preset("tiny"));
  colo::nn::load_pretrained(*model, r.weights);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(r.reference.at("input"));
  const double error = relative_error(logits, r.reference.at("logits"));
  std::cout << "vit_tiny logits: ||colo - timm|| / ||timm|| = " << error << "\n";
  EXPECT_LT(error, 1e-5);
}

TEST(TimmParity, VitTinyGradients) {
  const auto r = read_timm_reference("vit_tiny_patch16_224");
  ASSERT_TRUE(r.reference.contains("labels"))
      << "the reference has no gradients: rerun tests/oracle/export_timm_vit.py with --grads";
  const auto model = colo::nn::make_vision_transformer(ViTConfig::preset("tiny"));
  colo::nn::load_pretrained(*model, r.weights);
  model->eval();
  const auto logits = model->forward(r.reference.at("input"));
  const auto loss = torch::nn::functional::cross_entropy(logits, r.reference.at("labels"));
  EXPECT_LT(relative_error(loss.detach(), r.reference.at("loss")), 1e-5);
  loss.backward();
  double worst = 0.0;
  std::string worst_name;
  for (const auto& item : model->canonical_named_parameters()) {
    const double error = relative_error(item.value().grad(), r.reference.at("grad." + item.key()));
    EXPECT_LT(error, 1e-4) << item.key();
    if (error >= worst) {
      worst = error;
      worst_name = item.key();
    }
  }
  std::cout << "vit_tiny gradients: worst ||colo - timm|| / ||timm|| = " << worst << " (" << worst_name << ")\n";
}

// colo::nn::linear against at::linear under autograd: its backward computes the bias gradient as a
// matrix-vector product, the rest as the same products.
struct LinearGrads {
  torch::Tensor out, input, weight, bias;
};

LinearGrads linear_grads(bool colo_path, torch::Tensor input, torch::Tensor weight, torch::Tensor bias,
                         const torch::Tensor& grad_out) {
  input = input.detach().requires_grad_(input.requires_grad());
  weight = weight.detach().requires_grad_(weight.requires_grad());
  if (bias.defined()) bias = bias.detach().requires_grad_(bias.requires_grad());
  auto out = colo_path ? colo::nn::linear(input, weight, bias) : at::linear(input, weight, bias);
  out.backward(grad_out);
  return {out.detach(), input.grad(), weight.grad(), bias.defined() ? bias.grad() : torch::Tensor()};
}

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>() /
         std::max(b.to(torch::kDouble).abs().max().item<double>(), 1e-30);
}

TEST(Linear, GradientsEqualAtLinearsForEveryInputRank) {
  torch::manual_seed(3);
  const auto weight = torch::randn({5, 7}).requires_grad_();
  const auto bias = torch::randn({5}).requires_grad_();
  // 1-D, 2-D and 3-D inputs, and the token counts growing then shrinking (the ones vector is reused).
  for (const auto& shape : std::vector<std::vector<int64_t>>{{7}, {3, 7}, {4, 33, 7}, {2, 7}, {2, 3, 7}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    const auto input = torch::randn(shape).requires_grad_();
    auto out_shape = shape;
    out_shape.back() = 5;
    const auto grad_out = torch::randn(out_shape);
    const auto mine = linear_grads(true, input, weight, bias, grad_out);
    const auto ref = linear_grads(false, input, weight, bias, grad_out);
    EXPECT_TRUE(torch::equal(mine.out, ref.out));
    ASSERT_EQ(mine.input.sizes(), ref.input.sizes());
    EXPECT_LT(rel_diff(mine.input, ref.input), 1e-6);
    ASSERT_EQ(mine.weight.sizes(), ref.weight.sizes());
    EXPECT_TRUE(mine.weight.is_contiguous());  // the parameter's layout: autograd keeps it as it is
    EXPECT_LT(rel_diff(mine.weight, ref.weight), 1e-6);
    ASSERT_EQ(mine.bias.sizes(), ref.bias.sizes());
    EXPECT_LT(rel_diff(mine.bias, ref.bias), 1e-6);
    // The bias gradient is the output gradient summed over every row.
    EXPECT_LT(rel_diff(mine.bias, grad_out.reshape({-1, 5}).sum(0)), 1e-6);
  }
}

TEST(Linear, Bf16GradientsStayWithinBf16RoundingOfTheFp32Ones) {
  torch::manual_seed(4);
  const auto input = torch::randn({8, 50, 16});
  const auto weight = torch::randn({12, 16});
  const auto bias = torch::randn({12});
  const auto grad_out = torch::randn({8, 50, 12});
  const auto ref = linear_grads(false, input.requires_grad_(), weight.requires_grad_(), bias.requires_grad_(), grad_out);
  const auto mine = linear_grads(true, input.to(torch::kBFloat16).requires_grad_(),
                                 weight.to(torch::kBFloat16).requires_grad_(),
                                 bias.to(torch::kBFloat16).requires_grad_(), grad_out.to(torch::kBFloat16));
  ASSERT_EQ(mine.bias.scalar_type(), torch::kBFloat16);
  // bf16 keeps 8 significant bits: the inputs' own rounding moves products by ~2^-8 relative.
  EXPECT_LT(rel_diff(mine.out, ref.out), 2e-2);
  EXPECT_LT(rel_diff(mine.input, ref.input), 2e-2);
  EXPECT_LT(rel_diff(mine.weight, ref.weight), 2e-2);
  EXPECT_LT(rel_diff(mine.bias, ref.bias), 2e-2);
}

TEST(Linear, WithoutBiasOrWithFrozenPartsGivesOnlyTheGradientsAsked) {
  torch::manual_seed(5);
  const auto input = torch::randn({3, 4, 6});
  const auto weight = torch::randn({2, 6}).requires_grad_();
  const auto grad_out = torch::randn({3, 4, 2});
  const auto no_bias = linear_grads(true, input, weight, torch::Tensor(), grad_out);
  const auto ref = linear_grads(false, input, weight, torch::Tensor(), grad_out);
  EXPECT_TRUE(torch::equal(no_bias.out, ref.out));
  EXPECT_TRUE(torch::equal(no_bias.weight, ref.weight));
  EXPECT_FALSE(no_bias.input.defined());  // the input did not require a gradient

  const auto frozen_bias = linear_grads(true, input, weight, torch::randn({2}), grad_out);
  EXPECT_FALSE(frozen_bias.bias.defined());
  EXPECT_LT(rel_diff(frozen_bias.weight, ref.weight), 1e-6);
}

TEST(Linear, ModuleForwardIsColoLinear) {
  torch::manual_seed(6);
  colo::nn::Linear layer(torch::nn::LinearOptions(6, 3));
  const auto input = torch::randn({2, 5, 6});
  auto out = layer->forward(input);
  EXPECT_TRUE(torch::equal(out, at::linear(input, layer->weight, layer->bias)));
  ASSERT_NE(out.grad_fn(), nullptr);
  // colo's backward node, not at::linear's (whose AddmmBackward0 sums the bias gradient's columns).
  EXPECT_NE(out.grad_fn()->name().find("LinearFunction"), std::string::npos) << out.grad_fn()->name();
}

// ---- precision=fp8's linear layers (their float8 products are tested on the GPU: tests/gpu) ----

TEST(Fp8Linear, FitsOnlyFeaturesThatAreMultiplesOf16) {
  EXPECT_TRUE(colo::nn::fp8_linear_fits(768, 2304));
  EXPECT_TRUE(colo::nn::fp8_linear_fits(32, 96));
  EXPECT_FALSE(colo::nn::fp8_linear_fits(768, 10));  // a 10-class head
  EXPECT_FALSE(colo::nn::fp8_linear_fits(24, 32));
  EXPECT_FALSE(colo::nn::fp8_linear_fits(0, 16));
}

TEST(Fp8Linear, TheCpuHasNoFloat8ProductsAndSaysSo) {
  const auto reason = colo::nn::fp8_unavailable_reason(torch::kCPU);
  ASSERT_FALSE(reason.empty());
  EXPECT_NE(reason.find("compute capability 8.9"), std::string::npos) << reason;
  const auto input = torch::randn({4, 32}).to(torch::kBFloat16);
  const auto weight = torch::randn({16, 32}).to(torch::kBFloat16);
  try {
    colo::nn::fp8_linear(input, weight, torch::Tensor());
    FAIL() << "fp8_linear ran on the CPU";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(Fp8Linear, UseFp8LinearsOnTheCpuRefusesAndChangesNothing) {
  auto model = colo::nn::make_vision_transformer(small_config());
  try {
    colo::nn::use_fp8_linears(*model, torch::kCPU);
    FAIL() << "use_fp8_linears accepted the CPU";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("precision=fp8"), std::string::npos) << what;
    EXPECT_NE(what.find("precision=bf16"), std::string::npos) << what;
  }
  const auto coverage = colo::nn::fp8_coverage(*model);
  EXPECT_TRUE(coverage.converted.empty()) << coverage.summary();
  // Every block linear fits; the head (10 classes) is the one layer that could not multiply in float8.
  ASSERT_EQ(coverage.kept.size(), 1u) << coverage.summary();
  EXPECT_NE(coverage.kept[0].find("head"), std::string::npos) << coverage.kept[0];
  EXPECT_NE(coverage.kept[0].find("-> 10 features"), std::string::npos) << coverage.kept[0];
}

TEST(Fp8Linear, AnFp8LayerGivenAnotherDtypeMultipliesAsColoLinear) {
  torch::manual_seed(8);
  colo::nn::Linear layer(torch::nn::LinearOptions(32, 16));
  layer->set_fp8(true);
  EXPECT_TRUE(layer->fp8());
  EXPECT_EQ(layer->fp8_features(), std::make_pair(int64_t{32}, int64_t{16}));
  const auto input = torch::randn({3, 32});
  EXPECT_TRUE(torch::equal(layer->forward(input), at::linear(input, layer->weight, layer->bias)));
  // bf16 is what it multiplies in float8: on the CPU that is the clear error, not a silent bf16 product.
  EXPECT_THROW(layer->forward(input.to(torch::kBFloat16)), std::invalid_argument);
}

TEST(Fp8Linear, CoverageSummaryNamesTheFirstKeptLayersAndCountsTheRest) {
  colo::nn::Fp8Coverage coverage;
  coverage.converted = {"a", "b"};
  EXPECT_EQ(coverage.summary(), "fp8: 2 linear layers multiply in float8");
  coverage.kept = {"k1", "k2", "k3", "k4", "k5"};
  EXPECT_EQ(coverage.summary(), "fp8: 2 linear layers multiply in float8; kept in bf16: k1, k2, k3 and 2 more");
}

// colo::nn::layer_norm against at::layer_norm under autograd. On the CPU the backward is ATen's own
// (the CUDA kernel for the weight and bias gradients is tested on the GPU: tests/gpu).
TEST(LayerNorm, MatchesAtLayerNormForwardAndBackward) {
  torch::manual_seed(7);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 8}, {2, 5, 8}, {4, 3, 2, 8}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    const auto x = torch::randn(shape);
    const auto w = torch::randn({8});
    const auto b = torch::randn({8});
    const auto g = torch::randn(shape);
    std::vector<torch::Tensor> grads[2];
    torch::Tensor outs[2];
    for (int colo_path = 0; colo_path < 2; ++colo_path) {
      auto xi = x.clone().requires_grad_();
      auto wi = w.clone().requires_grad_();
      auto bi = b.clone().requires_grad_();
      outs[colo_path] = colo_path ? colo::nn::layer_norm(xi, {8}, wi, bi, 1e-6) : at::layer_norm(xi, {8}, wi, bi, 1e-6);
      outs[colo_path].backward(g);
      grads[colo_path] = {xi.grad(), wi.grad(), bi.grad()};
    }
    EXPECT_TRUE(torch::equal(outs[0], outs[1]));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(grads[1][i], grads[0][i], 1e-6, 1e-6)) << "gradient " << i;
    EXPECT_FALSE(colo::nn::layer_norm_uses_colo_kernel(g, x, 8));  // the CPU
  }
}

TEST(LayerNorm, GivesOnlyTheGradientsAskedAndTakesTheModulesOptions) {
  torch::manual_seed(8);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({6}).eps(1e-3));
  const auto x = torch::randn({4, 6});
  EXPECT_TRUE(torch::equal(colo::nn::layer_norm(x, *norm), norm->forward(x)));

  // A frozen weight and bias: only the input's gradient.
  norm->weight.set_requires_grad(false);
  norm->bias.set_requires_grad(false);
  auto xi = x.clone().requires_grad_();
  colo::nn::layer_norm(xi, *norm).sum().backward();
  EXPECT_TRUE(xi.grad().defined());
  EXPECT_FALSE(norm->weight.grad().defined());

  // An input that needs no gradient: only the parameters'.
  norm->weight.set_requires_grad(true);
  norm->bias.set_requires_grad(true);
  colo::nn::layer_norm(x, *norm).pow(2).sum().backward();
  EXPECT_TRUE(norm->weight.grad().defined());
  EXPECT_TRUE(norm->bias.grad().defined());

  // Without an affine transform it is at::layer_norm.
  EXPECT_TRUE(torch::equal(colo::nn::layer_norm(x, {6}, {}, {}, 1e-5), at::layer_norm(x, {6}, {}, {}, 1e-5)));
}

// The fused residual add + LayerNorm against the composite (x + branch, then at::layer_norm) under
// autograd, with the sum used downstream too (as the block's second residual uses it). On the CPU
// it runs ATen's add and native_layer_norm (the CUDA kernel is tested in tests/gpu).
TEST(LayerNorm, AddLayerNormEqualsTheAddThenTheNorm) {
  torch::manual_seed(9);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({8}).eps(1e-6));
  {
    torch::NoGradGuard no_grad;
    norm->weight.normal_();
    norm->bias.normal_();
  }
  const auto x = torch::randn({2, 5, 8});
  const auto branch = torch::randn({2, 5, 8});
  const auto g_sum = torch::randn({2, 5, 8});
  const auto g_out = torch::randn({2, 5, 8});
  std::vector<torch::Tensor> grads[2];
  for (int fused = 0; fused < 2; ++fused) {
    norm->zero_grad();
    auto xi = x.clone().requires_grad_();
    auto bi = branch.clone().requires_grad_();
    torch::Tensor sum, out;
    if (fused) {
      std::tie(sum, out) = colo::nn::add_layer_norm(xi, bi, *norm);
    } else {
      sum = xi + bi;
      out = at::layer_norm(sum, {8}, norm->weight, norm->bias, 1e-6);
    }
    EXPECT_TRUE(torch::equal(sum, x + branch));
    EXPECT_TRUE(torch::allclose(out, at::layer_norm(x + branch, {8}, norm->weight, norm->bias, 1e-6), 1e-6, 1e-6));
    ((sum * g_sum).sum() + (out * g_out).sum()).backward();
    grads[fused] = {xi.grad(), bi.grad(), norm->weight.grad().clone(), norm->bias.grad().clone()};
  }
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::allclose(grads[1][i], grads[0][i], 1e-5, 1e-6)) << "gradient " << i;

  // Only the normalised output used: both inputs get the norm's input gradient alone.
  auto xi = x.clone().requires_grad_();
  auto [sum, out] = colo::nn::add_layer_norm(xi, branch, *norm);
  out.backward(g_out);
  auto xr = x.clone().requires_grad_();
  at::layer_norm(xr + branch, {8}, norm->weight, norm->bias, 1e-6).backward(g_out);
  EXPECT_TRUE(torch::allclose(xi.grad(), xr.grad(), 1e-5, 1e-6));

  // A branch that broadcasts takes the composite path and still adds.
  const auto row = torch::randn({8});
  auto [bsum, bout] = colo::nn::add_layer_norm(x, row, *norm);
  EXPECT_TRUE(torch::equal(bsum, x + row));
  EXPECT_FALSE(colo::nn::layer_norm_rows_use_colo_kernel(x, norm->weight, norm->bias));  // the CPU
}

TEST(Gelu, IsTimmsExactGeluWithItsGradient) {
  torch::manual_seed(10);
  const auto x = torch::randn({3, 7, 11});
  const auto g = torch::randn({3, 7, 11});
  auto xi = x.clone().requires_grad_();
  auto xr = x.clone().requires_grad_();
  const auto out = colo::nn::gelu(xi);
  EXPECT_TRUE(torch::equal(out, torch::gelu(x)));
  out.backward(g);
  torch::gelu(xr).backward(g);
  EXPECT_TRUE(torch::equal(xi.grad(), xr.grad()));
  EXPECT_FALSE(colo::nn::gelu_uses_colo_kernel(x));  // the CPU
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Deferred weight gradients (zero-bubble pipelines' B and W)

TEST(DeferredWeightGrads, InputGradNowAndWeightGradLaterEqualOneWholeBackward) {
  torch::manual_seed(5);
  const auto model = colo::nn::make_vision_transformer(small_config());
  const auto images = torch::randn({3, 3, 32, 32});
  const auto labels = torch::randint(0, 10, {3});
  auto loss_of = [&] { return torch::nn::functional::cross_entropy(model->forward(images), labels); };

  loss_of().backward();
  std::map<std::string, torch::Tensor> whole;
  for (const auto& item : model->canonical_named_parameters()) whole[item.key()] = item.value().grad().clone();
  model->zero_grad(/*set_to_none=*/true);

  colo::nn::DeferredWeightGrads deferred;
  {
    colo::nn::WeightGradDeferral scope(deferred);
    loss_of().backward();
  }
  EXPECT_FALSE(deferred.empty());
  // B: the linears' and LayerNorms' weight gradients are not there yet; the rest is.
  const auto after_b = model->canonical_named_parameters();
  EXPECT_FALSE(after_b["blocks.0.attn.qkv.weight"].grad().defined());
  EXPECT_FALSE(after_b["blocks.1.mlp.fc2.bias"].grad().defined());
  EXPECT_FALSE(after_b["blocks.0.norm1.weight"].grad().defined());
  EXPECT_FALSE(after_b["head.weight"].grad().defined());
  EXPECT_TRUE(after_b["patch_embed.proj.weight"].grad().defined());
  EXPECT_TRUE(after_b["pos_embed"].grad().defined());

  deferred.run();  // W
  EXPECT_TRUE(deferred.empty());
  for (const auto& item : model->canonical_named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(torch::allclose(item.value().grad(), whole[item.key()], 1e-5, 1e-7)) << item.key();
  }
  EXPECT_EQ(colo::nn::WeightGradDeferral::active(), nullptr);
}

TEST(DeferredWeightGrads, AccumulateIntoExistingGradientsAndDoNotNest) {
  torch::manual_seed(6);
  colo::nn::Linear layer(torch::nn::LinearOptions(4, 3));
  const auto x = torch::randn({5, 4});
  layer->forward(x).sum().backward();
  const auto once = layer->weight.grad().clone();
  colo::nn::DeferredWeightGrads deferred;
  {
    colo::nn::WeightGradDeferral scope(deferred);
    EXPECT_THROW(colo::nn::WeightGradDeferral nested(deferred), std::logic_error);
    layer->forward(x).sum().backward();
  }
  EXPECT_TRUE(torch::equal(layer->weight.grad(), once)) << "deferred: untouched until W";
  deferred.run();
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), 2 * once));
}
