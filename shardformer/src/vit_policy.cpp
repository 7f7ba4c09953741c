#include <colo/dist/process_group.h>
#include <colo/nn/classifier_head.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/patch_embedding.h>
#include <colo/shardformer/parallel_linear.h>
#include <colo/shardformer/sequence_mappings.h>
#include <colo/shardformer/tp_mappings.h>
#include <colo/shardformer/vit_policy.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace colo::shardformer {
namespace {

// A replaceable sub-module's weight and bias (undefined when it has none).
std::pair<torch::Tensor, torch::Tensor> weight_and_bias(const torch::nn::AnyModule& module) {
  torch::Tensor weight, bias;
  for (const auto& item : module.ptr()->named_parameters(/*recurse=*/false)) {
    if (item.key() == "weight") weight = item.value();
    if (item.key() == "bias") bias = item.value();
  }
  if (!weight.defined() || weight.dim() != 2) {
    throw std::invalid_argument("VitPolicy: a block's qkv, proj, fc1 and fc2 must be linear layers with a weight");
  }
  return {weight, bias};
}

constexpr const char* kNeedsEmbedding =
    "VitPolicy: sequence parallelism needs the patch embedding (it sets the token count); shard the whole stack "
    "before cutting it into pipeline stages";

int64_t tokens_of(const nn::LayerStack& model) {
  for (const auto& layer : model.layers()) {
    if (auto* embedding = dynamic_cast<nn::PatchEmbedding*>(layer.get())) return embedding->num_tokens();
  }
  throw std::invalid_argument(kNeedsEmbedding);
}

}  // namespace

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The parameter of `layer` whose name ends with `suffix`, or null.
const nn::ParameterSummary* find_summary_parameter(const nn::LayerSummary& layer, const std::string& suffix) {
  for (const auto& p : layer.parameters) {
    if (ends_with(p.name, suffix)) return &p;
  }
  return nullptr;
}

// What shard() splits: the column-parallel layers' weights and biases, the row-parallel ones' weights.
const char* const kSplit[] = {".attn.qkv.weight", ".attn.qkv.bias", ".attn.proj.weight",
                              ".mlp.fc1.weight",  ".mlp.fc1.bias",  ".mlp.fc2.weight"};

}  // namespace

bool VitPolicy::knows(const nn::ModelSummary& model) const {
  for (const auto& layer : model.layers) {
    for (const auto& p : layer.parameters) {
      if (p.name.rfind("blocks.", 0) == 0 && ends_with(p.name, ".attn.qkv.weight")) return true;
    }
  }
  return false;
}

int64_t VitPolicy::rank_numel(const std::string& name, int64_t numel, int64_t tp_size) const {
  if (name.rfind("blocks.", 0) != 0) return numel;
  for (const char* suffix : kSplit) {
    if (ends_with(name, suffix)) return numel / tp_size;
  }
  return numel;
}

bool VitPolicy::matches(const nn::LayerStack& model) const {
  for (const auto& layer : model.layers()) {
    if (dynamic_cast<nn::EncoderBlock*>(layer.get())) return true;
  }
  return false;
}

std::vector<std::string> VitPolicy::problems(const nn::LayerStack& model, int64_t tp_size,
                                             bool sequence_parallel) const {
  return summary_problems(nn::summarize(model), tp_size, sequence_parallel);
}

std::vector<std::string> VitPolicy::summary_problems(const nn::ModelSummary& model, int64_t tp_size,
                                                     bool sequence_parallel) const {
  std::vector<std::string> found;
  bool embedding = false;
  for (const auto& layer : model.layers) {
    for (const auto& p : layer.parameters) embedding = embedding || p.name == "pos_embed";
  }
  for (const auto& layer : model.layers) {
    const nn::ParameterSummary* fc1 = find_summary_parameter(layer, ".mlp.fc1.weight");
    if (layer.attention_heads <= 0 || !fc1) continue;
    const int64_t heads = layer.attention_heads;
    const int64_t hidden = fc1->shape.at(0);
    if (heads % tp_size != 0) {
      found.push_back(fmt::format("{} heads do not divide over tp_size={} (each rank needs whole heads): use a tp_size "
                                  "that divides {}",
                                  heads, tp_size, heads));
    }
    if (hidden % tp_size != 0) {
      found.push_back(fmt::format("the MLP's {} hidden units do not divide over tp_size={}", hidden, tp_size));
    }
    break;  // every block of a ViT has the same shapes
  }
  if (sequence_parallel && tp_size > 1 && !embedding) found.emplace_back(kNeedsEmbedding);
  return found;
}

void VitPolicy::shard(nn::LayerStack& model, const ShardContext& context) const {
  const auto tp = context.tp;
  if (!tp) throw std::invalid_argument("VitPolicy: the tensor-parallel group is null");
  const bool sp = context.sequence_parallel && tp->size() > 1;
  const int64_t tokens = sp ? tokens_of(model) : 0;
  const auto options = ParallelLinearOptions().sequence_tokens(tokens);

  for (const auto& layer : model.layers()) {
    if (auto* embedding = dynamic_cast<nn::PatchEmbedding*>(layer.get()); embedding && sp) {
      embedding->set_output_mapping([tp, tokens](const torch::Tensor& x) { return split_sequence(x, tokens, *tp); });
    }
    if (auto* head = dynamic_cast<nn::ClassifierHead*>(layer.get()); head && sp) {
      head->set_input_mapping([tp, tokens](const torch::Tensor& x) { return gather_sequence(x, tokens, *tp); });
    }
    auto* block = dynamic_cast<nn::EncoderBlock*>(layer.get());
    if (!block) continue;
    const auto [qkv_w, qkv_b] = weight_and_bias(block->attn()->qkv());
    const auto [proj_w, proj_b] = weight_and_bias(block->attn()->proj());
    const auto [fc1_w, fc1_b] = weight_and_bias(block->mlp()->fc1());
    const auto [fc2_w, fc2_b] = weight_and_bias(block->mlp()->fc2());
    ColumnParallelLinear qkv(qkv_w, qkv_b, tp, ParallelLinearOptions(options).parts(3));
    RowParallelLinear proj(proj_w, proj_b, tp, options);
    ColumnParallelLinear fc1(fc1_w, fc1_b, tp, options);
    RowParallelLinear fc2(fc2_w, fc2_b, tp, options);
    block->replace_submodule("attn.qkv", torch::nn::AnyModule(qkv));
    block->replace_submodule("attn.proj", torch::nn::AnyModule(proj));
    block->replace_submodule("mlp.fc1", torch::nn::AnyModule(fc1));
    block->replace_submodule("mlp.fc2", torch::nn::AnyModule(fc2));
    block->set_shard_spec("attn.qkv.weight", qkv->spec());
    if (qkv_b.defined()) block->set_shard_spec("attn.qkv.bias", qkv->spec());
    block->set_shard_spec("attn.proj.weight", proj->spec());
    block->set_shard_spec("mlp.fc1.weight", fc1->spec());
    if (fc1_b.defined()) block->set_shard_spec("mlp.fc1.bias", fc1->spec());
    block->set_shard_spec("mlp.fc2.weight", fc2->spec());
    block->attn()->set_sharded_rng(context.sharded_rng, sp);
    block->mlp()->set_sharded_rng(context.sharded_rng, sp);
    if (sp) {
      // LayerNorms and the biases added after a sum see only this rank's tokens: their gradients
      // are partial sums, completed over the tensor-parallel ranks as they arrive.
      for (const auto& item : block->named_parameters()) {
        if (block->shard_specs().count(item.key())) continue;
        auto param = item.value();
        param.register_hook([tp](const torch::Tensor& grad) { return all_reduce_sum(grad, *tp); });
      }
    }
  }
}

}  // namespace colo::shardformer
