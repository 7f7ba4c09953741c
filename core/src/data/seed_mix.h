// Derived seeds: every random choice in colo's data pipeline is a pure function of a few
// integers (seed, epoch, sample index), so results do not depend on threads, batching or
// replicas, and a resumed run repeats them exactly.
#pragma once

#include <cstdint>

namespace colo::data::detail {

// SplitMix64's finaliser: a bijection of 64-bit integers that spreads every input bit over the
// output, so nearby inputs (indices 0, 1, 2, …) give unrelated seeds.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t combine_seeds(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }

}  // namespace colo::data::detail
