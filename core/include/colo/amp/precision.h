#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <string_view>

namespace colo::amp {

// The floating-point format of a model's working weights and activations.
enum class Precision { kFp32, kFp16, kBf16 };

// "fp32" | "fp16" | "bf16" (exactly these spellings, as plugin options and command lines use).
// Throws std::invalid_argument naming the bad value and the valid ones.
Precision parse_precision(std::string_view name);

// The spelling parse_precision accepts: "fp32", "fp16", "bf16".
std::string to_string(Precision precision);

// torch::kFloat, torch::kHalf or torch::kBFloat16.
c10::ScalarType to_dtype(Precision precision);

}  // namespace colo::amp
