#pragma once

#include <colo/checkpoint/safetensors.h>

#include <string>

namespace colo::checkpoint {

// Throws CheckpointError when a floating-point tensor of `tensors` holds a NaN or an infinity,
// naming `source` (the file it came from), the tensor, how many of its values are not finite and
// where the first one is. Weights or optimizer state like that do not train: the run goes on at
// loss NaN until its end. Every loader calls this before it copies anything (load_safetensors_set,
// so the Booster's CheckpointIO; nn::load_pretrained and load_timm_state), so a refused checkpoint
// leaves the model and optimizer as they were. Integer and bool tensors are not checked.
void require_finite(const NamedTensors& tensors, const std::string& source);

}  // namespace colo::checkpoint
