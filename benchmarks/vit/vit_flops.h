#pragma once

#include <colo/nn/vit_config.h>

#include <cstdint>

namespace colo::bench {

// The FLOP model behind every TFLOP/s and MFU figure colo reports; benchmarks/peers/
// timm_train_bench.py implements the same formula (and checks it against PyTorch's
// FlopCounterMode), so colo/peer ratios compare like with like.
//
// Only matrix products count (2 FLOPs per multiply-accumulate); layer norms, softmax, GELU,
// bias adds, dropout and the optimizer are left out, as in the usual MFU convention (PaLM,
// Megatron). Per image, with N = (image/patch)² patches, T = N + 1 tokens, embed dim D, MLP
// hidden dim M, C input channels, P patch size, L blocks, K classes:
//
//   patch embedding      N · (C·P²) · D
//   per block            qkv 3·T·D²  +  attention QKᵀ T²·D  +  attention·V T²·D
//                        + proj T·D²  +  fc1 T·D·M  +  fc2 T·M·D
//   head                 D · K        (class token only)
//
//   forward FLOPs  = 2 · (patch + L · block + head)
//   training FLOPs = 3 · forward FLOPs   (backward = 2 × forward: grads w.r.t. inputs and weights)
//
// ViT-B/16 at 224²: 17.56 GMACs, i.e. 35.1 GFLOPs forward and 105.4 GFLOPs per trained image.
// Activation recomputation, if a plugin does it, is not counted: this is *model* FLOPs.
inline constexpr const char* kFlopModel =
    "model FLOPs: training = 3 x forward; forward = 2 x matmul MACs per image = 2 x (N*C*P^2*D [patch embed] + "
    "L*(4*T*D^2 [qkv+proj] + 2*T^2*D [QK^T, AV] + 2*T*D*M [fc1+fc2]) + D*K [head]); N=(image/P)^2, T=N+1; norms, "
    "softmax, GELU, biases and optimizer excluded";

struct VitFlops {
  double forward_macs_per_image = 0.0;
  double forward_flops_per_image() const { return 2.0 * forward_macs_per_image; }
  double training_flops_per_image() const { return 3.0 * forward_flops_per_image(); }
};

inline VitFlops vit_flops(const nn::ViTConfig& c) {
  const auto n = static_cast<double>(c.num_patches());
  const auto t = static_cast<double>(c.num_tokens());
  const auto d = static_cast<double>(c.embed_dim());
  const auto m = static_cast<double>(c.mlp_hidden_dim());
  const auto p = static_cast<double>(c.patch_size());
  const auto channels = static_cast<double>(c.in_channels());
  const double patch = n * channels * p * p * d;
  const double block = 4.0 * t * d * d + 2.0 * t * t * d + 2.0 * t * d * m;
  const double head = d * static_cast<double>(c.num_classes());
  return {patch + static_cast<double>(c.depth()) * block + head};
}

}  // namespace colo::bench
