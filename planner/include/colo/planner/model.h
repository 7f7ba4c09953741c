#pragma once

#include <colo/nn/vit_config.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colo::planner {

// A model the planner plans for: a ViT with a name for tables and messages.
struct ModelSpec {
  std::string name;
  nn::ViTConfig vit;
};

// The models --model accepts: timm's presets (tiny, small, base, large: patch 16, 224²), huge
// (ViT-H/14: width 1280, depth 32, 16 heads, patch 14) and 6.45b (the hybrid-parallel example's
// ViT: width 4096, depth 32, 64 heads, patch 16). Each also under the names vit-ti/16, vit-s/16,
// vit-b/16, vit-l/16, vit-h/14 and "giant". Throws std::invalid_argument listing them (with the
// closest as a suggestion) for any other name.
ModelSpec model_by_name(const std::string& name);
std::vector<std::string> model_names();

// Model FLOPs per image as colo's benchmarks count them (benchmarks/RESULTS.md: matrix products
// only, 2 FLOPs per multiply-add): forward = 2·(N·C·P²·D + L·(4·T·D² + 2·T²·D + 2·T·D·M) + D·K);
// training = 3 × forward (recomputation not counted).
double forward_flops_per_image(const nn::ViTConfig& config);
double training_flops_per_image(const nn::ViTConfig& config);

// The forward FLOPs of one layer kind for `samples` samples, tensor parallelism over `tp` ranks
// dividing the block's products (the analytic compute model's work).
double patch_embedding_flops(const nn::ViTConfig& config, int64_t samples);
double encoder_block_flops(const nn::ViTConfig& config, int64_t samples, int tp);
double head_flops(const nn::ViTConfig& config, int64_t samples);

}  // namespace colo::planner
