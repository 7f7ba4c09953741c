#include <colo/shardformer/tensor_parallel_mode.h>

#include <fmt/format.h>

#include <cmath>

namespace colo {
namespace {

// The largest q with q^power * scale <= n (at least 1).
int floor_root(int n, int power, int scale) {
  int q = 1;
  while (static_cast<long long>(std::pow(q + 1, power)) * scale <= n) ++q;
  return q;
}

// "use 4 or 9" (or "use 4" when the lower one is the size itself is impossible): the mode's sizes
// either side of n.
std::string nearest(int n, int power, int scale) {
  const int q = floor_root(n, power, scale);
  const long long below = static_cast<long long>(std::pow(q, power)) * scale;
  const long long above = static_cast<long long>(std::pow(q + 1, power)) * scale;
  if (below > n) return fmt::format("use {}", below);  // n is below the smallest size
  return fmt::format("use {} or {}", below, above);
}

}  // namespace

const std::vector<std::string>& tensor_parallel_modes() {
  static const std::vector<std::string> modes = {"1d", "2d", "2.5d", "3d"};
  return modes;
}

std::optional<int> tensor_parallel_side(const std::string& mode, int tp_size, int depth) {
  if (tp_size < 1) return std::nullopt;
  int power = 1, scale = 1;
  if (mode == "2d") {
    power = 2;
  } else if (mode == "2.5d") {
    if (depth < 1) return std::nullopt;
    power = 2;
    scale = depth;
  } else if (mode == "3d") {
    power = 3;
  } else if (mode != "1d") {
    return std::nullopt;
  }
  const int q = floor_root(tp_size, power, scale);
  if (static_cast<long long>(std::pow(q, power)) * scale != tp_size) return std::nullopt;
  return q;
}

std::optional<std::string> tensor_parallel_size_problem(const std::string& mode, int tp_size, int depth) {
  if (tensor_parallel_side(mode, tp_size, depth)) return std::nullopt;
  if (tp_size < 1) return fmt::format("tp_size must be at least 1, got {}", tp_size);
  if (mode == "2d") {
    return fmt::format("tp_mode=2d needs tp_size = q² (a q × q grid), got {}: {}", tp_size, nearest(tp_size, 2, 1));
  }
  if (mode == "2.5d") {
    if (depth < 1) return fmt::format("tp_depth must be at least 1, got {}", depth);
    return fmt::format("tp_mode=2.5d with tp_depth={} needs tp_size = q² × {} ({} layers of a q × q grid), got {}: {}",
                       depth, depth, depth, tp_size, nearest(tp_size, 2, depth));
  }
  if (mode == "3d") {
    return fmt::format("tp_mode=3d needs tp_size = q³ (a q × q × q cube), got {}: {}", tp_size, nearest(tp_size, 3, 1));
  }
  return fmt::format("tp_mode must be one of 1d, 2d, 2.5d, 3d, got '{}'", mode);
}

}  // namespace colo
