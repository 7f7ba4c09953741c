#include <colo/engine/memory_size.h>
#include <colo/ddp/bucket_assignment.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace colo {

static_assert(ddp::kMaxBucketCapBytes == kMaxMemoryBytes, "the buckets' cap and the options' limit are one limit");

std::string memory_size_problem(double value, MemoryUnit unit, bool zero_allowed) {
  const double limit = static_cast<double>(kMaxMemoryBytes / unit.bytes);  // whole: units are powers of 2
  const bool low = zero_allowed ? !(value >= 0.0) : !(value > 0.0);
  if (std::isfinite(value) && !low && value <= limit) return {};
  if (zero_allowed) return fmt::format("must be a size in {} from 0 to {:.0f} (1 PiB)", unit.name, limit);
  return fmt::format("must be a size in {} above 0 and at most {:.0f} (1 PiB)", unit.name, limit);
}

int64_t memory_size_bytes(double value, MemoryUnit unit) {
  if (const auto problem = memory_size_problem(value, unit, true); !problem.empty()) {
    throw std::invalid_argument(fmt::format("memory size {} {}: {}", value, unit.name, problem));
  }
  return static_cast<int64_t>(value * static_cast<double>(unit.bytes));
}

}  // namespace colo
