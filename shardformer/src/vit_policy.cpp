#include <colo/dist/process_group.h>
#include <colo/nn/classifier_head.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/patch_embedding.h>
#include <colo/shardformer/sequence_mappings.h>
#include <colo/shardformer/vit_policy.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace colo::shardformer {
namespace {

constexpr const char* kNeedsEmbedding =
    "VitPolicy: sequence parallelism needs the patch embedding (it sets the token count); shard the whole stack "
    "before cutting it into pipeline stages";

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

}  // namespace

ShardPlan VitPolicy::plan() const {
  return {layer_plan<nn::EncoderBlock>("EncoderBlock", {{"attn.qkv", Split::kFusedQkv},
                                                        {"attn.proj", Split::kRow},
                                                        {"mlp.fc1", Split::kColumn},
                                                        {"mlp.fc2", Split::kRow}})};
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

int64_t VitPolicy::sequence_tokens(const nn::LayerStack& model) const {
  for (const auto& layer : model.layers()) {
    if (auto* embedding = dynamic_cast<nn::PatchEmbedding*>(layer.get())) return embedding->num_tokens();
  }
  throw std::invalid_argument(kNeedsEmbedding);
}

void VitPolicy::add_mappings(nn::LayerStack& model, const ShardContext& context) const {
  const auto tp = context.tp;
  const bool sp = context.sequence_parallel;
  const int64_t tokens = context.sequence_tokens;
  for (const auto& layer : model.layers()) {
    if (auto* embedding = dynamic_cast<nn::PatchEmbedding*>(layer.get()); embedding && sp) {
      embedding->set_output_mapping([tp, tokens](const torch::Tensor& x) { return split_sequence(x, tokens, *tp); });
    }
    if (auto* head = dynamic_cast<nn::ClassifierHead*>(layer.get()); head && sp) {
      head->set_input_mapping([tp, tokens](const torch::Tensor& x) { return gather_sequence(x, tokens, *tp); });
    }
    auto* block = dynamic_cast<nn::EncoderBlock*>(layer.get());
    if (!block) continue;
    block->attn()->set_sharded_rng(context.sharded_rng, sp);
    block->mlp()->set_sharded_rng(context.sharded_rng, sp);
    if (sp) sum_partial_gradients(*block, tp);
  }
}

}  // namespace colo::shardformer
