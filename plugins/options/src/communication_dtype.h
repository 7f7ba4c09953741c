#pragma once

#include <colo/amp/precision.h>
#include <colo/booster/plugin_options.h>

#include <c10/core/ScalarType.h>
#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>

namespace colo::detail {

// `communication_dtype` as the plugins read it (auto|fp32|fp16|bf16; auto, the default, is
// nullopt).
inline std::optional<c10::ScalarType> read_communication_dtype(OptionReader& in) {
  const auto value = in.get_choice("communication_dtype", "auto", {"auto", "fp32", "fp16", "bf16"},
                                   "dtype gradients are reduced in; auto: the precision's");
  if (value == "auto") return std::nullopt;
  return amp::to_dtype(amp::parse_precision(value));
}

// Its inverse: written only when set, and an error naming `owner` for a dtype no key spells.
inline void write_communication_dtype(OptionWriter& out, const std::optional<c10::ScalarType>& dtype,
                                      const char* owner) {
  if (!dtype) return;
  switch (*dtype) {
    case c10::kFloat:
      out.set_string("communication_dtype", "fp32", "auto");
      return;
    case c10::kHalf:
      out.set_string("communication_dtype", "fp16", "auto");
      return;
    case c10::kBFloat16:
      out.set_string("communication_dtype", "bf16", "auto");
      return;
    default:
      throw std::invalid_argument(fmt::format("{}: communication_dtype {} has no option value: use float, half "
                                              "or bfloat16 (fp32, fp16, bf16), or leave it unset (auto)",
                                              owner, c10::toString(*dtype)));
  }
}

}  // namespace colo::detail
