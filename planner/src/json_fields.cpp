#include "json_fields.h"

#include <colo/booster/closest_match.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

namespace colo::planner::detail {
namespace {

std::size_t skip_space(const std::string& t, std::size_t i) {
  while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
  return i;
}

// Past the string that starts at t[i] == '"'; its unescaped text in `out` (escapes kept raw: keys
// the planner reads have none).
std::size_t skip_string(const std::string& t, std::size_t i, std::string* out) {
  ++i;
  while (i < t.size() && t[i] != '"') {
    if (t[i] == '\\' && i + 1 < t.size()) {
      if (out) out->push_back(t[i]);
      ++i;
    }
    if (out) out->push_back(t[i]);
    ++i;
  }
  return i + 1;
}

// Past the value that starts at t[i].
std::size_t skip_value(const std::string& t, std::size_t i) {
  if (i >= t.size()) return i;
  if (t[i] == '"') return skip_string(t, i, nullptr);
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        i = skip_string(t, i, nullptr);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        --depth;
        if (depth == 0) return i + 1;
      }
      ++i;
    }
    return i;
  }
  while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']') ++i;
  return i;
}

// Where the value of `step` starts inside the container starting at t[i]; npos when absent.
std::size_t enter(const std::string& t, std::size_t i, const PathStep& step) {
  if (i >= t.size()) return std::string::npos;
  if (step.index >= 0) {
    if (t[i] != '[') return std::string::npos;
    i = skip_space(t, i + 1);
    for (int k = 0; k < step.index; ++k) {
      i = skip_space(t, skip_value(t, i));
      if (i >= t.size() || t[i] != ',') return std::string::npos;
      i = skip_space(t, i + 1);
    }
    return i;
  }
  if (t[i] != '{') return std::string::npos;
  i = skip_space(t, i + 1);
  while (i < t.size() && t[i] == '"') {
    std::string key;
    i = skip_space(t, skip_string(t, i, &key));
    if (i >= t.size() || t[i] != ':') return std::string::npos;
    i = skip_space(t, i + 1);
    if (key == step.key) return i;
    i = skip_space(t, skip_value(t, i));
    if (i < t.size() && t[i] == ',') i = skip_space(t, i + 1);
  }
  return std::string::npos;
}

}  // namespace

std::string path_text(const std::vector<PathStep>& path) {
  std::string text;
  for (const auto& step : path) {
    if (step.index >= 0) {
      text += fmt::format("[{}]", step.index);
    } else {
      text += (text.empty() ? "" : ".") + step.key;
    }
  }
  return text.empty() ? "(the document)" : text;
}

int line_of(const std::string& text, const std::vector<PathStep>& path) {
  std::size_t at = skip_space(text, 0);
  for (const auto& step : path) {
    const auto next = enter(text, at, step);
    if (next == std::string::npos) break;
    at = next;
  }
  at = std::min(at, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

JsonDocument JsonDocument::read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw PlannerFileError(fmt::format("{}: cannot be read (does it exist?)", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

JsonDocument JsonDocument::parse(std::string text, std::string source) {
  JsonDocument doc;
  doc.source = source.empty() ? "<text>" : std::move(source);
  doc.text = std::move(text);
  try {
    doc.root = nlohmann::json::parse(doc.text);
  } catch (const nlohmann::json::parse_error& e) {
    const auto at = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, doc.text.size());
    const auto line = 1 + std::count(doc.text.begin(), doc.text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    const auto line_start = doc.text.rfind('\n', at == 0 ? 0 : at - 1);
    const auto column = at - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
    throw PlannerFileError(fmt::format("{}:{}:{}: malformed JSON: {}", doc.source, line, column, e.what()));
  }
  if (!doc.root.is_object()) {
    throw PlannerFileError(fmt::format("{}:1: expected a JSON object {{...}}, got {}", doc.source, doc.root.type_name()));
  }
  return doc;
}

void JsonDocument::fail(const std::vector<PathStep>& path, const std::string& what) const {
  throw PlannerFileError(fmt::format("{}:{}: field '{}': {}", source, line_of(text, path), path_text(path), what));
}

ObjectReader::ObjectReader(const JsonDocument& doc, std::vector<PathStep> path)
    : doc_(&doc), path_(std::move(path)), value_(&doc.root) {
  for (const auto& step : path_) value_ = step.index >= 0 ? &value_->at(static_cast<std::size_t>(step.index))
                                                           : &value_->at(step.key);
  if (!value_->is_object()) doc_->fail(path_, fmt::format("expected an object {{...}}, got {}", value_->type_name()));
}

bool ObjectReader::has(const std::string& key) const { return value_->contains(key); }

const nlohmann::json* ObjectReader::find(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  const auto it = value_->find(key);
  return it == value_->end() ? nullptr : &*it;
}

void ObjectReader::fail_missing(const std::string& key, const std::string& what) const {
  for (const auto& item : value_->items()) {
    if (std::find(known_.begin(), known_.end(), item.key()) != known_.end()) continue;
    if (closest_match(item.key(), std::vector<std::string>{key})) {
      fail(item.key(), fmt::format("unknown field (did you mean '{}'?)", key));
    }
  }
  fail(key, what);
}

void ObjectReader::fail(const std::string& key, const std::string& what) const {
  auto path = path_;
  if (!key.empty()) path.push_back({key});
  doc_->fail(path, what);
}

double ObjectReader::number(const std::string& key, std::optional<double> fallback, bool allow_zero) {
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail_missing(key, allow_zero ? "missing: a number >= 0 is required" : "missing: a number > 0 is required");
  }
  if (!v->is_number()) fail(key, fmt::format("expected a number, got {} ({})", v->dump(), v->type_name()));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < 0 || (!allow_zero && x == 0)) {
    fail(key, fmt::format("expected a number {} 0, got {}", allow_zero ? ">=" : ">", v->dump()));
  }
  return x;
}

double ObjectReader::fraction(const std::string& key, std::optional<double> fallback) {
  const double x = number(key, fallback, true);
  if (x > 1) fail(key, fmt::format("expected a fraction in [0, 1], got {}", x));
  return x;
}

int64_t ObjectReader::integer(const std::string& key, std::optional<int64_t> fallback, int64_t minimum) {
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail_missing(key, fmt::format("missing: a whole number >= {} is required", minimum));
  }
  if (!v->is_number_integer()) fail(key, fmt::format("expected a whole number, got {} ({})", v->dump(), v->type_name()));
  const auto x = v->get<int64_t>();
  if (x < minimum) fail(key, fmt::format("expected a whole number >= {}, got {}", minimum, x));
  return x;
}

std::string ObjectReader::text(const std::string& key, std::optional<std::string> fallback) {
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail_missing(key, "missing: a string is required");
  }
  if (!v->is_string()) fail(key, fmt::format("expected a string, got {} ({})", v->dump(), v->type_name()));
  return v->get<std::string>();
}

bool ObjectReader::boolean(const std::string& key, std::optional<bool> fallback) {
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail_missing(key, "missing: true or false is required");
  }
  if (!v->is_boolean()) fail(key, fmt::format("expected true or false, got {} ({})", v->dump(), v->type_name()));
  return v->get<bool>();
}

std::optional<ObjectReader> ObjectReader::object(const std::string& key, bool required) {
  const auto* v = find(key);
  if (!v) {
    if (required) fail_missing(key, "missing: an object {...} is required");
    return std::nullopt;
  }
  auto path = path_;
  path.push_back({key});
  return ObjectReader(*doc_, std::move(path));
}

std::vector<ObjectReader> ObjectReader::objects(const std::string& key, bool required) {
  const auto* v = find(key);
  std::vector<ObjectReader> out;
  if (!v) {
    if (required) fail_missing(key, "missing: an array [...] of objects is required");
    return out;
  }
  if (!v->is_array()) fail(key, fmt::format("expected an array [...], got {}", v->type_name()));
  for (std::size_t i = 0; i < v->size(); ++i) {
    auto path = path_;
    path.push_back({key});
    path.push_back({"", static_cast<int>(i)});
    out.emplace_back(*doc_, std::move(path));
  }
  return out;
}

void ObjectReader::allow(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
}

std::vector<std::string> ObjectReader::keys() const {
  std::vector<std::string> keys;
  for (const auto& item : value_->items()) keys.push_back(item.key());
  return keys;
}

void ObjectReader::finish() const {
  for (const auto& item : value_->items()) {
    if (std::find(known_.begin(), known_.end(), item.key()) != known_.end()) continue;
    const auto near = closest_match(item.key(), known_);
    fail(item.key(), fmt::format("unknown field{}; the fields here are: {}",
                                 near ? fmt::format(" (did you mean '{}'?)", *near) : "", fmt::join(known_, ", ")));
  }
}

}  // namespace colo::planner::detail
