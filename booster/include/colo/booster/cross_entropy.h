#pragma once

#include <colo/booster/boosted.h>

#include <torch/types.h>

namespace colo {

// timm's SoftTargetCrossEntropy: the mean over the batch of sum_c -target[c] * log_softmax(logits)[c],
// for soft targets float [B, C] (a mixing loader's, whose label smoothing is in them already).
torch::Tensor soft_target_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

// The criterion for both kinds of targets a DataLoader gives (Batch::criterion_targets()): int64
// labels [B] take the cross-entropy with `label_smoothing` (timm's LabelSmoothingCrossEntropy,
// PyTorch's label_smoothing); soft targets float [B, C] take soft_target_cross_entropy, unsmoothed
// (timm's train.py switches criteria alike when mixup is on). Logits are cast to fp32 first.
Criterion cross_entropy_criterion(double label_smoothing = 0.0);

}  // namespace colo
