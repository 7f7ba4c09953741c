#pragma once

#include <cstdint>
#include <string>

namespace colo {

// Memory sizes that options give in MiB or GiB (bucket_cap_mb, device_memory_mb, chunk_size_mb,
// train_vit's --gpu-memory-gib, ...) become int64_t bytes, which a double past 2^63 overflows
// (--gpu-memory-gib 1e10 once planned against -9223372036854775808 bytes). Every such option
// takes at most kMaxMemoryBytes, 1 PiB: more than any device or host holds, and far enough below
// 2^63 that sums of a few thousand sizes cannot overflow either.
inline constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;

struct MemoryUnit {
  const char* name;  // "MiB"
  int64_t bytes;
};
inline constexpr MemoryUnit kBytes{"bytes", 1};
inline constexpr MemoryUnit kMebibytes{"MiB", int64_t{1} << 20};
inline constexpr MemoryUnit kGibibytes{"GiB", int64_t{1} << 30};

// What is wrong with `value` `unit`s as a memory size, in words that follow the option's name
// ("must be a size in MiB above 0 and at most 1073741824 (1 PiB)", "... from 0 to ..."); empty when it is a size:
// finite, above 0 (or 0 itself when `zero_allowed`) and at most kMaxMemoryBytes.
std::string memory_size_problem(double value, MemoryUnit unit, bool zero_allowed);

// The bytes of a size memory_size_problem() accepts (std::invalid_argument for any other).
int64_t memory_size_bytes(double value, MemoryUnit unit);

}  // namespace colo
