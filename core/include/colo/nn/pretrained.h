#pragma once

#include <torch/arg.h>

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

// Pretrained weights read from a file or a directory, under timm's names.
struct PretrainedWeights {
  std::string source;          // the file or directory read
  NamedTensors state;          // timm names (Hugging Face's converted)
  bool hugging_face = false;   // the names were Hugging Face's, whose LayerNorms use eps 1e-12
  // The input normalisation the weights were trained with (read_pretrained_normalization): 3
  // values each, or empty when their directory does not say.
  std::vector<double> mean;
  std::vector<double> std;
};

// The input normalisation of pretrained weights, per RGB channel.
struct PretrainedNormalization {
  std::vector<double> mean;  // 3 values, or empty when no file says
  std::vector<double> std;   // 3 positive values, or empty
};

// The normalisation the config files beside `file_or_directory` (the weights' directory) give:
// Hugging Face's preprocessor_config.json (image_mean / image_std: 3 numbers each, or one for all
// channels; do_normalize false: mean 0, std 1), else timm's config.json (pretrained_cfg mean /
// std). Empty when neither file says. A file that is there but malformed (not JSON, a mean
// without a std, not 3 numbers, a std that is not positive) throws std::invalid_argument naming
// the file and what is wrong: no silent fallback to ImageNet's statistics.
PretrainedNormalization read_pretrained_normalization(const std::string& file_or_directory);

// Reads a safetensors file, or a directory holding model.safetensors or a sharded set
// (model.safetensors.index.json and its files), as Hugging Face and timm publish them, with their
// normalisation (read_pretrained_normalization). Throws colo::checkpoint::CheckpointError naming
// the file for an unreadable one or one with a NaN or infinite value, std::invalid_argument naming
// the directory when it holds no such set, or a config file beside it that is malformed.
PretrainedWeights read_pretrained(const std::string& file_or_directory);

struct FineTuneOptions {
  // A classifier head of another number of classes (head.* in a ViT, fc.* in a ResNet) is not
  // loaded: the model keeps its own, freshly initialised one.
  TORCH_ARG(bool, replace_head) = true;
  // Position embeddings of another grid (another image or patch size) are resampled to the
  // model's as timm's resample_abs_pos_embed does (the class token's kept, the grid bicubic with
  // antialiasing, align_corners false).
  TORCH_ARG(bool, resample_pos_embed) = true;
};

// What load_pretrained adapted, in words for the console ("head: 1000 classes in the checkpoint,
// 10 in the model: re-initialised").
struct FineTuneReport {
  bool head_replaced = false;
  bool pos_embed_resampled = false;
  std::vector<std::string> notes;
};

// Loads pretrained weights for fine-tuning: as load_timm_state, but a head of another class
// count and position embeddings of another grid are adapted (FineTuneOptions). Anything else
// that does not fit is a std::invalid_argument naming the source and summing the mismatches up
// in a few lines (per kind, names that differ only in the block number are one line), with the
// architecture the checkpoint's shapes describe. The model changes only when everything fits.
FineTuneReport load_pretrained(LayerStack& model, const PretrainedWeights& weights,
                               const FineTuneOptions& options = FineTuneOptions());

// What a ViT checkpoint's shapes say about its architecture ("ViT of patch 16, width 768, depth
// 12, MLP 3072, 197 tokens (14x14 patches: 224x224 images), 3 input channels, 1000 classes"), or
// an empty string when the names are not a ViT's.
std::string describe_vit_state(const NamedTensors& state);

}  // namespace colo::nn
