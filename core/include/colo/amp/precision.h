#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <string_view>

namespace colo::amp {

// The floating-point format of a model's working weights and activations. kFp8 is bf16 working
// weights and activations whose linear layers multiply in float8 (colo::nn::fp8_linear): there is
// no float8 tensor between layers, so its dtype (to_dtype) is bfloat16.
enum class Precision { kFp32, kFp16, kBf16, kFp8 };

// "fp32" | "fp16" | "bf16" | "fp8" (exactly these spellings, as plugin options and command lines
// use). Throws std::invalid_argument naming the bad value and the valid ones.
Precision parse_precision(std::string_view name);

// The spelling parse_precision accepts: "fp32", "fp16", "bf16", "fp8".
std::string to_string(Precision precision);

// torch::kFloat, torch::kHalf or torch::kBFloat16 (for kFp8 too: see above).
c10::ScalarType to_dtype(Precision precision);

}  // namespace colo::amp
