#include <colo/amp/precision.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::amp {

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "fp16") return Precision::kFp16;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp8") return Precision::kFp8;
  throw std::invalid_argument(fmt::format("unknown precision '{}': valid values are fp32, fp16, bf16, fp8", name));
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp8:
      return "fp8";
  }
  throw std::invalid_argument(fmt::format("invalid Precision value {}", static_cast<int>(precision)));
}

c10::ScalarType to_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return c10::ScalarType::Float;
    case Precision::kFp16:
      return c10::ScalarType::Half;
    case Precision::kBf16:
    case Precision::kFp8:
      return c10::ScalarType::BFloat16;
  }
  throw std::invalid_argument(fmt::format("invalid Precision value {}", static_cast<int>(precision)));
}

}  // namespace colo::amp
