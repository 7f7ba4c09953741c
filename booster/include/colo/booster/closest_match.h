#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

// "Did you mean" hints for mistyped names: plugin names, plugin option keys and values, and
// train_vit's command-line flags. Public so that programs built on colo (train_vit) use the same
// distance as the library instead of a copy of it.
namespace colo {

// Levenshtein distance: the fewest single-character insertions, deletions and substitutions
// that turn `a` into `b`.
std::size_t edit_distance(const std::string& a, const std::string& b);

// The candidate a mistyped word most likely meant ("bucket_cap" -> "bucket_cap_mb"): the nearest
// by edit distance, if it is near enough (a third of the word's length, at least 1) to be a
// plausible typo.
std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace colo
