#pragma once

#include <optional>
#include <string>
#include <vector>

namespace colo::detail {

// The candidate a mistyped word most likely meant ("bucket_cap" -> "bucket_cap_mb"), for "did you
// mean" hints: the nearest by edit distance, if it is near enough to be a plausible typo.
std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace colo::detail
