#pragma once

#include <string>
#include <utility>
#include <vector>

#include <colo/nn/layer_stack.h>

namespace colo::nn {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Copies `state` (timm names, e.g. from a timm safetensors checkpoint) into the model's
// parameters and buffers by canonical name, converting dtype and device. A model sharded by
// tensor parallelism takes this rank's piece of each split tensor (its layers' shard specs). Strict: if any name
// is missing, unexpected, or has the wrong shape, throws std::invalid_argument listing every
// such problem and changes nothing; a NaN or infinite value anywhere is a
// colo::checkpoint::CheckpointError naming the tensor (checkpoint::require_finite), which changes
// nothing either.
void load_timm_state(LayerStack& model, const NamedTensors& state);

// Renames a Hugging Face ViTModel / ViTForImageClassification state ("vit." prefix optional)
// to timm names: embeddings → cls_token, pos_embed, patch_embed.proj; encoder.layer.{i} →
// blocks.{i} (query, key and value concatenated into attn.qkv); layernorm → norm;
// classifier → head. Names it does not know pass through unchanged (a strict load then
// reports them). Throws std::invalid_argument when a layer has some of query/key/value but
// not all.
NamedTensors hf_vit_to_timm_names(const NamedTensors& hf_state);

// load_timm_state(model, hf_vit_to_timm_names(hf_state)). Note that HF ViTs use LayerNorm
// eps 1e-12: build the model with ViTConfig::norm_eps(1e-12) to reproduce their outputs.
void load_hf_vit_state(LayerStack& model, const NamedTensors& hf_state);

// True if the names look like a Hugging Face ViT checkpoint ("vit.", "embeddings.",
// "encoder.layer." prefixes) rather than a timm one.
bool is_hf_vit_state(const NamedTensors& state);

// Reads a safetensors checkpoint (timm or Hugging Face names, detected) into the model.
// Throws colo::checkpoint::CheckpointError for an unreadable file or one holding a NaN or infinite
// value (naming the file and the tensor), std::invalid_argument (naming the file) when its
// tensors do not match the model. The model changes only when everything checks out.
void load_pretrained(LayerStack& model, const std::string& path);

}  // namespace colo::nn
