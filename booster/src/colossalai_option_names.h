#pragma once

#include <string>
#include <vector>

namespace colo::detail {

// Colossal-AI's plugin keyword arguments that colo names differently or does without. A user
// moving a Booster set-up over tends to type them; OptionReader::finish() adds the hint to the
// "unknown option" line so that the error says what to write instead and where the migration
// guide explains it. Names that are also colo option names (tp_size, precision, ...) are not
// here: under another plugin they are a wrong plugin, not a Colossal-AI habit.
struct ColossalAiOption {
  const char* name;    // Colossal-AI's keyword, as typed
  const char* hint;    // colo's equivalent, or what to do instead, in one line
  const char* anchor;  // a heading of docs/coming_from_colossalai.md, as GitHub links it
};

inline constexpr const char* kColossalAiGuide = "docs/coming_from_colossalai.md";

// Every entry, in the guide's order (tests check each anchor against the guide).
const std::vector<ColossalAiOption>& colossalai_options();

// "a Colossal-AI option: <hint>; see docs/coming_from_colossalai.md#<anchor>", or "" when `key`
// is not one of Colossal-AI's.
std::string colossalai_option_hint(const std::string& key);

}  // namespace colo::detail
