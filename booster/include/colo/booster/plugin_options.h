#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo {

// Options reach every plugin, a third party's included, as strings ("tp_size" -> "2"), from code
// or from `--plugin-opt key=value`. Each plugin parses them into its typed options in one
// validate step through an OptionReader, which reports every problem at once. colo's four plugins
// also take typed options (<colo/plugins/<name>_options.h>), which write this map (to_options(),
// through an OptionWriter) and are parsed back from it: one path for code, CLI and JSON.
using PluginOptions = std::map<std::string, std::string>;

// Parses "key=value" (the command-line form). Throws std::invalid_argument on a missing '='.
std::pair<std::string, std::string> parse_option_assignment(const std::string& text);

// Reads typed values out of PluginOptions for one plugin. Every get_* declares a valid key (with
// its default and a one-line help); finish() then throws one std::invalid_argument listing
// every ill-typed value, every violated rule (fail()) and every unknown key together with the
// valid keys.
class OptionReader {
 public:
  OptionReader(std::string plugin_name, PluginOptions options);

  bool get_bool(const std::string& key, bool fallback, const std::string& help);
  int64_t get_int(const std::string& key, int64_t fallback, const std::string& help);
  double get_double(const std::string& key, double fallback, const std::string& help);
  // A memory size in MiB: a number that memory_size_problem() accepts (above 0, or 0 too where
  // `zero_allowed`, and at most 1 PiB), else rejected with the valid range.
  double get_mebibytes(const std::string& key, double fallback, const std::string& help, bool zero_allowed);
  std::string get_string(const std::string& key, const std::string& fallback, const std::string& help);
  // A string restricted to `choices`.
  std::string get_choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& choices,
                         const std::string& help);

  // Records a violated rule (e.g. "stage must be 1 or 2, got 3").
  void fail(const std::string& message);
  void finish() const;

  // "key (default: value) help" for each declared key, in declaration order: plugins' help text.
  std::vector<std::string> describe() const;

 private:
  struct Declared {
    std::string key;
    std::string default_text;
    std::string help;
  };
  // Declares `key` and returns its value, or nullptr when it is not set.
  const std::string* find(const std::string& key, const std::string& default_text, const std::string& help);
  void reject(const std::string& key, const std::string& value, const std::string& what);

  std::string plugin_name_;
  PluginOptions options_;
  std::vector<Declared> declared_;
  std::vector<std::string> errors_;
};

// The inverse of OptionReader, for a plugin's typed options (their to_options()): each set_*
// writes `key` only when `value` differs from `fallback` (the default the matching get_* falls
// back to), as text that get_* reads back to the same value. A default struct writes nothing.
class OptionWriter {
 public:
  void set_bool(const std::string& key, bool value, bool fallback);
  void set_int(const std::string& key, int64_t value, int64_t fallback);
  // The shortest text that reads back to the same double.
  void set_double(const std::string& key, double value, double fallback);
  // An optional value, whose default is unset: written whenever it is set.
  void set_double(const std::string& key, const std::optional<double>& value);
  void set_string(const std::string& key, const std::string& value, const std::string& fallback);
  // Adds `options`' keys (e.g. PrecisionOptions::to_options()).
  void merge(const PluginOptions& options);

  const PluginOptions& options() const { return options_; }

 private:
  PluginOptions options_;
};

}  // namespace colo
