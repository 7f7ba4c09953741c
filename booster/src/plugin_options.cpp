#include <colo/booster/plugin_options.h>

#include <colo/booster/closest_match.h>
#include <colo/engine/memory_size.h>

#include <fmt/format.h>

#include "colossalai_option_names.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace colo {
namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::string quote_if_empty(const std::string& text) { return text.empty() ? "\"\"" : text; }

}  // namespace

std::pair<std::string, std::string> parse_option_assignment(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw std::invalid_argument(
        fmt::format("plugin option '{}' must have the form key=value (for example tp_size=2)", text));
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

OptionReader::OptionReader(std::string plugin_name, PluginOptions options)
    : plugin_name_(std::move(plugin_name)), options_(std::move(options)) {}

const std::string* OptionReader::find(const std::string& key, const std::string& default_text,
                                      const std::string& help) {
  // A plugin may read a key on more than one path; it is still one valid key.
  const bool known = std::any_of(declared_.begin(), declared_.end(), [&](const Declared& d) { return d.key == key; });
  if (!known) declared_.push_back({key, default_text, help});
  const auto it = options_.find(key);
  return it == options_.end() ? nullptr : &it->second;
}

void OptionReader::reject(const std::string& key, const std::string& value, const std::string& what) {
  errors_.push_back(fmt::format("option {}='{}' {}", key, value, what));
}

bool OptionReader::get_bool(const std::string& key, bool fallback, const std::string& help) {
  const std::string* value = find(key, fallback ? "true" : "false", help);
  if (!value) return fallback;
  const std::string v = lowercase(*value);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  reject(key, *value, "is not a boolean (use true/false, 1/0, yes/no or on/off)");
  return fallback;
}

int64_t OptionReader::get_int(const std::string& key, int64_t fallback, const std::string& help) {
  const std::string* value = find(key, std::to_string(fallback), help);
  if (!value) return fallback;
  // from_chars takes no '+' and no whitespace: exactly the strictness wanted, bar the '+'.
  const char* begin = value->data();
  const char* end = begin + value->size();
  if (begin != end && *begin == '+') ++begin;
  int64_t parsed = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, parsed);
  if (ec == std::errc::result_out_of_range) {
    reject(key, *value, "is out of the range of a 64-bit integer");
  } else if (ec != std::errc() || ptr != end || begin == end) {
    reject(key, *value, "is not an integer");
  } else {
    return parsed;
  }
  return fallback;
}

double OptionReader::get_double(const std::string& key, double fallback, const std::string& help) {
  const std::string* value = find(key, fmt::format("{}", fallback), help);
  if (!value) return fallback;
  // strtod alone would accept leading blanks, trailing garbage after a prefix, and "nan"/"inf".
  if (value->empty() || std::isspace(static_cast<unsigned char>(value->front()))) {
    reject(key, *value, "is not a number");
    return fallback;
  }
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  if (end != value->c_str() + value->size()) {
    reject(key, *value, "is not a number");
  } else if (errno == ERANGE || !std::isfinite(parsed)) {
    reject(key, *value, "is not a finite number in double range");
  } else {
    return parsed;
  }
  return fallback;
}

double OptionReader::get_mebibytes(const std::string& key, double fallback, const std::string& help,
                                   bool zero_allowed) {
  const std::size_t errors = errors_.size();
  const double parsed = get_double(key, fallback, help);
  const auto given = options_.find(key);
  if (given == options_.end() || errors_.size() != errors) return parsed;  // the default, or said so already
  const auto problem = memory_size_problem(parsed, kMebibytes, zero_allowed);
  if (problem.empty()) return parsed;
  reject(key, given->second, problem);
  return fallback;
}

std::string OptionReader::get_string(const std::string& key, const std::string& fallback, const std::string& help) {
  const std::string* value = find(key, quote_if_empty(fallback), help);
  return value ? *value : fallback;
}

std::string OptionReader::get_choice(const std::string& key, const std::string& fallback,
                                     const std::vector<std::string>& choices, const std::string& help) {
  const std::string one_of = join(choices, ", ");
  const std::string* value = find(key, quote_if_empty(fallback), fmt::format("{} (one of {})", help, one_of));
  if (!value) return fallback;
  if (std::find(choices.begin(), choices.end(), *value) != choices.end()) return *value;
  std::string what = fmt::format("is not one of {}", one_of);
  if (auto guess = closest_match(*value, choices)) what += fmt::format(" (did you mean '{}'?)", *guess);
  reject(key, *value, what);
  return fallback;
}

void OptionReader::fail(const std::string& message) { errors_.push_back(message); }

void OptionReader::finish() const {
  std::vector<std::string> problems = errors_;
  std::vector<std::string> valid_keys;
  for (const auto& d : declared_) valid_keys.push_back(d.key);
  bool any_unknown = false;
  for (const auto& [key, value] : options_) {
    if (std::find(valid_keys.begin(), valid_keys.end(), key) != valid_keys.end()) continue;
    any_unknown = true;
    std::string line = fmt::format("unknown option '{}'", key);
    // A Colossal-AI name gets colo's equivalent and the guide's section instead of a near key:
    // the hint knows what colo calls it, the edit distance only guesses.
    if (auto hint = detail::colossalai_option_hint(key); !hint.empty()) {
      line += fmt::format(" ({})", hint);
    } else if (auto guess = closest_match(key, valid_keys)) {
      line += fmt::format(" (did you mean '{}'?)", *guess);
    }
    problems.push_back(std::move(line));
  }
  if (problems.empty()) return;

  std::string valid;
  if (any_unknown) {
    std::vector<std::string> listed;
    for (const auto& d : declared_) listed.push_back(fmt::format("{} (default {})", d.key, d.default_text));
    valid = declared_.empty() ? std::string("it takes no options") : "valid options: " + join(listed, ", ");
  }
  std::string message;
  if (problems.size() == 1) {
    message = fmt::format("{}: {}", plugin_name_, problems.front());
    if (any_unknown) message += "; " + valid;
  } else {
    message = fmt::format("{}: {} problems with the plugin options:", plugin_name_, problems.size());
    for (const auto& p : problems) message += "\n  - " + p;
    if (any_unknown) message += "\n  " + valid;
  }
  throw std::invalid_argument(message);
}

std::vector<std::string> OptionReader::describe() const {
  std::vector<std::string> out;
  for (const auto& d : declared_) out.push_back(fmt::format("{} (default: {}) {}", d.key, d.default_text, d.help));
  return out;
}

void OptionWriter::set_bool(const std::string& key, bool value, bool fallback) {
  if (value != fallback) options_[key] = value ? "true" : "false";
}

void OptionWriter::set_int(const std::string& key, int64_t value, int64_t fallback) {
  if (value != fallback) options_[key] = std::to_string(value);
}

void OptionWriter::set_double(const std::string& key, double value, double fallback) {
  // fmt's "{}" is the shortest text that strtod reads back exactly (and a non-finite value's text,
  // which get_double then refuses by name).
  if (value != fallback) options_[key] = fmt::format("{}", value);
}

void OptionWriter::set_double(const std::string& key, const std::optional<double>& value) {
  if (value) options_[key] = fmt::format("{}", *value);
}

void OptionWriter::set_string(const std::string& key, const std::string& value, const std::string& fallback) {
  if (value != fallback) options_[key] = value;
}

void OptionWriter::merge(const PluginOptions& options) {
  for (const auto& [key, value] : options) options_[key] = value;
}

}  // namespace colo
