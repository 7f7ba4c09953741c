#pragma once
// Reading the planner's JSON files (cluster, profile) field by field, with errors that name the
// file, the line and the field's path ("intra_node.latency_us"). nlohmann::json keeps no
// positions, so a field's line is found again in the text by walking the path (json_lines.cpp).

#include <colo/planner/file_error.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colo::planner::detail {

// One step of a path: an object's key, or an array's index.
struct PathStep {
  std::string key;
  int index = -1;  // >= 0: an array element
};

// "a.b[2].c"
std::string path_text(const std::vector<PathStep>& path);

// The 1-based line where the value at `path` starts in `text` (the document's first line when the
// path cannot be followed).
int line_of(const std::string& text, const std::vector<PathStep>& path);

// A parsed document and its text, for messages.
struct JsonDocument {
  std::string source;  // the file name as the user gave it
  std::string text;
  nlohmann::json root;

  // Reads `path` (or names it "<text>" when source is empty). Throws PlannerFileError for an
  // unreadable file or malformed JSON (with the line and column of the problem).
  static JsonDocument read_file(const std::string& path);
  static JsonDocument parse(std::string text, std::string source);

  [[noreturn]] void fail(const std::vector<PathStep>& path, const std::string& what) const;
};

// Fields of one object of a document. Every getter records the key as known; finish() rejects
// keys nobody asked for (with the closest known one as a suggestion), so a misspelt key is an
// error rather than a silently ignored default.
class ObjectReader {
 public:
  ObjectReader(const JsonDocument& doc, std::vector<PathStep> path);

  bool has(const std::string& key) const;
  // A number > 0 (or >= 0 with allow_zero); a default when absent and `fallback` is set.
  double number(const std::string& key, std::optional<double> fallback = std::nullopt, bool allow_zero = false);
  double fraction(const std::string& key, std::optional<double> fallback = std::nullopt);  // in [0, 1]
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt, int64_t minimum = 1);
  std::string text(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  bool boolean(const std::string& key, std::optional<bool> fallback = std::nullopt);
  // A nested object (must be an object when present); nullopt when absent.
  std::optional<ObjectReader> object(const std::string& key, bool required = false);
  // The elements of an array of objects.
  std::vector<ObjectReader> objects(const std::string& key, bool required = false);
  // Keys accepted and not read (descriptions, sources).
  void allow(const std::string& key);
  std::vector<std::string> keys() const;
  // Throws for the first key that was neither read nor allowed.
  void finish() const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  // A required `key` that is absent: a field of the object spelt close to it is named first
  // (the usual cause), else `what`.
  [[noreturn]] void fail_missing(const std::string& key, const std::string& what) const;
  const std::vector<PathStep>& path() const { return path_; }
  const nlohmann::json& value() const { return *value_; }

 private:
  const nlohmann::json* find(const std::string& key);

  const JsonDocument* doc_;
  std::vector<PathStep> path_;
  const nlohmann::json* value_;
  std::vector<std::string> known_;
};

}  // namespace colo::planner::detail
