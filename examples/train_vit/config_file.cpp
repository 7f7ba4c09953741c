#include "config_file.h"

#include <colo/booster/closest_match.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "train_options.h"

namespace train_vit {
namespace {

using nlohmann::json;

// How a key's value becomes command-line arguments.
enum class Kind {
  kInteger,      // --flag N
  kReal,         // --flag X
  kText,         // --flag WORD
  kZeroOne,      // --flag 0|1 from true/false
  kSwitch,       // --flag when true, nothing when false
  kPluginOption  // --plugin-opt NAME=VALUE
};

struct Key {
  Kind kind;
  std::string target;  // the flag without "--", or the plugin option's name
};

// section -> key -> what it sets. The names follow the tutorials' config files where they have
// one (tp, pp, microbatches, hidden), the command line's elsewhere.
const std::map<std::string, std::map<std::string, Key>>& table() {
  static const std::map<std::string, std::map<std::string, Key>> sections = {
      {"parallel",
       {{"tp", {Kind::kPluginOption, "tp_size"}},
        {"pp", {Kind::kPluginOption, "pp_size"}},
        // The hybrid example's words: pipeline=P, tensor={mode, size, depth} (tensor_words below).
        {"pipeline", {Kind::kPluginOption, "pp_size"}},
        {"tensor", {Kind::kPluginOption, ""}},
        {"microbatches", {Kind::kPluginOption, "num_microbatches"}},
        {"microbatch_size", {Kind::kPluginOption, "microbatch_size"}},
        {"schedule", {Kind::kPluginOption, "pp_style"}},
        {"schedule_file", {Kind::kPluginOption, "pp_schedule_file"}},
        {"chunks", {Kind::kPluginOption, "num_model_chunks"}},
        {"zero_stage", {Kind::kPluginOption, "zero_stage"}},
        {"sequence_parallel", {Kind::kPluginOption, "enable_sequence_parallelism"}}}},
      {"model",
       {{"preset", {Kind::kText, "model"}},
        {"image_size", {Kind::kInteger, "image-size"}},
        {"patch_size", {Kind::kInteger, "patch-size"}},
        {"hidden", {Kind::kInteger, "embed-dim"}},
        {"depth", {Kind::kInteger, "depth"}},
        {"heads", {Kind::kInteger, "heads"}},
        {"mlp_ratio", {Kind::kReal, "mlp-ratio"}},
        {"drop_path", {Kind::kReal, "drop-path"}},
        {"drop_rate", {Kind::kReal, "drop-rate"}},
        {"attn_drop_rate", {Kind::kReal, "attn-drop-rate"}},
        {"activation_checkpointing", {Kind::kSwitch, "activation-checkpointing"}},
        {"init", {Kind::kText, "init"}}}},
      {"data",
       {{"dataset", {Kind::kText, "dataset"}},
        {"dir", {Kind::kText, "data-dir"}},
        {"augment", {Kind::kZeroOne, "augment"}},
        {"rand_augment", {Kind::kText, "rand-augment"}},
        {"auto_augment", {Kind::kText, "auto-augment"}},
        {"reprob", {Kind::kReal, "reprob"}},
        {"remode", {Kind::kText, "remode"}},
        {"synthetic_samples", {Kind::kInteger, "synthetic-samples"}},
        {"workers", {Kind::kInteger, "workers"}},
        {"skip_unreadable", {Kind::kZeroOne, "skip-unreadable"}},
        {"decoder", {Kind::kText, "decoder"}},
        {"mixup", {Kind::kReal, "mixup"}},
        {"cutmix", {Kind::kReal, "cutmix"}},
        {"cutmix_minmax", {Kind::kText, "cutmix-minmax"}},
        {"mixup_prob", {Kind::kReal, "mixup-prob"}},
        {"mixup_switch_prob", {Kind::kReal, "mixup-switch-prob"}},
        {"mixup_mode", {Kind::kText, "mixup-mode"}},
        {"mixup_off_epoch", {Kind::kInteger, "mixup-off-epoch"}}}},
      {"train",
       {{"epochs", {Kind::kInteger, "epochs"}},
        {"batch_size", {Kind::kInteger, "batch-size"}},
        {"grad_accum", {Kind::kInteger, "grad-accum"}},
        {"sync_every_microbatch", {Kind::kSwitch, "sync-every-microbatch"}},
        {"label_smoothing", {Kind::kReal, "label-smoothing"}},
        {"clip", {Kind::kReal, "clip"}},
        {"seed", {Kind::kInteger, "seed"}},
        {"max_steps", {Kind::kInteger, "max-steps"}},
        {"max_nonfinite_steps", {Kind::kInteger, "max-nonfinite-steps"}},
        {"early_stop", {Kind::kInteger, "early-stop"}},
        {"log_every", {Kind::kInteger, "log-every"}},
        {"eval_batch_size", {Kind::kInteger, "eval-batch-size"}}}},
      {"optimizer",
       {{"name", {Kind::kText, "optimizer"}},
        {"lr", {Kind::kReal, "lr"}},
        {"weight_decay", {Kind::kReal, "weight-decay"}}}},
      {"schedule",
       {{"name", {Kind::kText, "schedule"}},
        {"per", {Kind::kText, "schedule-per"}},
        {"warmup_epochs", {Kind::kReal, "warmup"}},
        {"warmup_steps", {Kind::kInteger, "warmup-steps"}},
        {"step_epochs", {Kind::kInteger, "lr-step"}},
        {"milestones", {Kind::kText, "lr-milestones"}},
        {"gamma", {Kind::kReal, "lr-gamma"}}}},
  };
  return sections;
}

// Top-level keys that are values, not sections. "description" is a note for people.
const std::map<std::string, Key>& top_level() {
  static const std::map<std::string, Key> keys = {{"description", {Kind::kText, ""}},
                                                  {"plugin", {Kind::kText, "plugin"}},
                                                  {"precision", {Kind::kText, "precision"}}};
  return keys;
}

std::string unknown_key(const std::string& where, const std::string& key, const std::vector<std::string>& valid) {
  const auto near = colo::closest_match(key, valid);
  return fmt::format("unknown key '{}'{}{}; the valid keys{} are: {}", key, where.empty() ? "" : " in " + where,
                     near ? fmt::format(" (did you mean '{}'?)", *near) : "",
                     where.empty() ? "" : " of " + where, fmt::join(valid, ", "));
}

std::string type_name(const json& value) { return value.type_name(); }

// The value of `path` (for messages) as the argument text its kind takes.
std::string argument(const std::string& path, const json& value, Kind kind) {
  switch (kind) {
    case Kind::kInteger:
      if (!value.is_number_integer()) {
        throw UsageError(fmt::format("{}: expected a whole number, got {} ({})", path, value.dump(), type_name(value)));
      }
      return std::to_string(value.get<int64_t>());
    case Kind::kReal:
      if (!value.is_number()) {
        throw UsageError(fmt::format("{}: expected a number, got {} ({})", path, value.dump(), type_name(value)));
      }
      return value.is_number_integer() ? std::to_string(value.get<int64_t>()) : fmt::format("{}", value.get<double>());
    case Kind::kText:
      if (!value.is_string()) {
        throw UsageError(fmt::format("{}: expected a string, got {} ({})", path, value.dump(), type_name(value)));
      }
      return value.get<std::string>();
    case Kind::kZeroOne:
    case Kind::kSwitch:
      if (!value.is_boolean()) {
        throw UsageError(fmt::format("{}: expected true or false, got {} ({})", path, value.dump(), type_name(value)));
      }
      return value.get<bool>() ? "1" : "0";
    case Kind::kPluginOption:
      if (value.is_string()) return value.get<std::string>();
      if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
      if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
      if (value.is_number()) return fmt::format("{}", value.get<double>());
      throw UsageError(
          fmt::format("{}: expected a string, number or true/false, got {} ({})", path, value.dump(), type_name(value)));
  }
  return {};
}

// What the command line already says: its flags, and the plugin options it sets.
struct Given {
  std::set<std::string> flags;
  std::set<std::string> plugin_options;
  std::string plugin;  // --plugin's value, if given
};

Given scan(const std::vector<std::string>& args) {
  Given given;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& token = args[i];
    if (token.rfind("--", 0) != 0) continue;
    const auto eq = token.find('=');
    const std::string name = token.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    given.flags.insert(name);
    if (name == "plugin") given.plugin = eq != std::string::npos ? token.substr(eq + 1) : i + 1 < args.size() ? args[i + 1] : "";
    if (name != "plugin-opt") continue;
    const std::string assignment = eq != std::string::npos ? token.substr(eq + 1) : i + 1 < args.size() ? args[i + 1] : "";
    given.plugin_options.insert(assignment.substr(0, assignment.find('=')));
  }
  return given;
}

// Refuses a key given twice in one object, naming it and where it is: nlohmann keeps the last of
// equal keys, so a file that says a thing twice would mean its second saying without a word. A
// parser callback sees every key as it is read.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(std::string path) : path_(std::move(path)) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        std::string name;
        if (!open_.empty()) {
          const auto& parent = open_.back();
          name = !parent.is_object       ? parent.name + "[]"
                 : parent.name.empty() ? pending_key_
                                       : parent.name + "." + pending_key_;
        }
        open_.push_back({event == json::parse_event_t::object_start, std::move(name), {}});
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case json::parse_event_t::key: {
        pending_key_ = parsed.get<std::string>();
        if (open_.empty() || open_.back().keys.insert(pending_key_).second) break;
        const auto& where = open_.back().name;
        throw UsageError(fmt::format("--config {}: the key '{}' is given twice {}; keep one (JSON would keep the last "
                                     "without a word)",
                                     path_, pending_key_, where.empty() ? "at the top level" : "in " + where));
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  }

 private:
  struct Open {
    bool is_object;
    std::string name;  // "model", "parallel", "a.b"; empty at the top
    std::set<std::string> keys;
  };
  std::string path_;
  std::vector<Open> open_;
  std::string pending_key_;
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("--config {}: cannot read the file; check its path", path));
  DuplicateKeyCheck check(path);
  try {
    return json::parse(in, [&check](int depth, json::parse_event_t event, json& parsed) {
      return check(depth, event, parsed);
    });
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("--config {}: not valid JSON ({})", path, e.what()));
  }
}

// parallel.tp or parallel.pp beside the hybrid example's words that say the same (tensor.size,
// pipeline) are refused.
void check_parallel_aliases(const std::string& path, const json& parallel) {
  if (parallel.contains("tp") && parallel.contains("tensor")) {
    throw UsageError(fmt::format("--config {}: parallel.tp and parallel.tensor both give the tensor-parallel size; "
                                 "keep one (tensor.size is tp)",
                                 path));
  }
  if (parallel.contains("pp") && parallel.contains("pipeline")) {
    throw UsageError(fmt::format("--config {}: parallel.pp and parallel.pipeline both give the pipeline size; keep one",
                                 path));
  }
}

// parallel.tensor, the hybrid example's {"mode": "2d", "size": 4, "depth": 2}: each word and the
// plugin option it sets. Refused: a word it does not know, a tensor that is not an object.
std::vector<std::pair<std::string, Key>> tensor_words(const std::string& path, const json& parallel) {
  const json& tensor = parallel.at("tensor");
  if (!tensor.is_object()) {
    throw UsageError(fmt::format("--config {}: parallel.tensor: expected an object such as {{\"mode\": \"1d\", "
                                 "\"size\": 2}}, got {}",
                                 path, tensor.dump()));
  }
  static const std::map<std::string, Key> words = {{"mode", {Kind::kText, "tp_mode"}},
                                                   {"size", {Kind::kInteger, "tp_size"}},
                                                   {"depth", {Kind::kInteger, "tp_depth"}}};
  std::vector<std::pair<std::string, Key>> out;
  for (const auto& [word, value] : tensor.items()) {
    const auto it = words.find(word);
    if (it == words.end()) {
      throw UsageError(fmt::format("--config {}: {}", path, unknown_key("parallel.tensor", word, {"depth", "mode", "size"})));
    }
    out.emplace_back(word, Key{Kind::kPluginOption, it->second.target});
  }
  return out;
}

// The file's settings as command-line arguments, leaving out what `given` sets.
ExpandedConfig file_arguments(const std::string& path, const Given& given) {
  const json root = read_json(path);
  if (!root.is_object()) throw UsageError(fmt::format("--config {}: expected a JSON object at the top", path));
  std::vector<std::string> valid_top;
  for (const auto& [key, spec] : top_level()) valid_top.push_back(key);
  valid_top.emplace_back("plugin_options");
  for (const auto& [section, keys] : table()) valid_top.push_back(section);
  std::sort(valid_top.begin(), valid_top.end());

  // low_level_zero names its ZeRO stage "stage"; hybrid_parallel, "zero_stage".
  const std::string file_plugin =
      root.contains("plugin") && root["plugin"].is_string() ? root["plugin"].get<std::string>() : "";
  const std::string plugin = given.plugin.empty() ? file_plugin : given.plugin;
  // The parallel and plugin_options sections are options of the file's plugin: another plugin
  // would refuse them (or, worse, read them otherwise), so --plugin OTHER leaves them out.
  const bool other_plugin = !given.plugin.empty() && !file_plugin.empty() && given.plugin != file_plugin;
  std::vector<std::string> left_out;

  ExpandedConfig out;
  auto& args = out.args;
  auto add = [&](const std::string& where, const json& value, Key key) {
    if (key.target.empty()) return;
    if (key.target == "zero_stage" && plugin == "low_level_zero") key.target = "stage";
    const std::string text = argument(fmt::format("--config {}: {}", path, where), value, key.kind);
    if (key.kind == Kind::kPluginOption) {
      if (other_plugin) {
        left_out.push_back(where);
        return;
      }
      if (given.plugin_options.count(key.target)) return;  // the command line's wins
      args.push_back("--plugin-opt");
      args.push_back(key.target + "=" + text);
      out.plugin_option_sources[key.target] = fmt::format("{} of {}", where, path);
      return;
    }
    if (given.flags.count(key.target)) return;
    if (key.kind == Kind::kSwitch) {
      if (text == "1") args.push_back("--" + key.target);
      return;
    }
    args.push_back("--" + key.target);
    args.push_back(text);
  };

  for (const auto& [name, value] : root.items()) {
    if (const auto it = top_level().find(name); it != top_level().end()) {
      add(name, value, it->second);
      continue;
    }
    if (name == "plugin_options") {
      // Any key: the plugin checks them (and lists its valid ones) as it does --plugin-opt's.
      if (!value.is_object()) throw UsageError(fmt::format("--config {}: plugin_options: expected an object", path));
      for (const auto& [option, v] : value.items()) add("plugin_options." + option, v, {Kind::kPluginOption, option});
      continue;
    }
    const auto section = table().find(name);
    if (section == table().end()) throw UsageError(fmt::format("--config {}: {}", path, unknown_key("", name, valid_top)));
    if (!value.is_object()) {
      throw UsageError(fmt::format("--config {}: {}: expected an object of keys, got {}", path, name, value.dump()));
    }
    if (name == "parallel") check_parallel_aliases(path, value);
    std::vector<std::string> valid;
    for (const auto& [key, spec] : section->second) valid.push_back(key);
    for (const auto& [key, v] : value.items()) {
      const auto it = section->second.find(key);
      if (it == section->second.end()) throw UsageError(fmt::format("--config {}: {}", path, unknown_key(name, key, valid)));
      if (name == "parallel" && key == "tensor") {
        for (const auto& [word, option] : tensor_words(path, value)) add("parallel.tensor." + word, v.at(word), option);
        continue;
      }
      add(name + "." + key, v, it->second);
    }
  }
  if (!left_out.empty()) {
    out.notes.push_back(fmt::format(
        "note: --plugin {} replaces the plugin of --config {} ({}): its options for {} are left out ({})", given.plugin,
        path, file_plugin, file_plugin, fmt::join(left_out, ", ")));
  }
  return out;
}

}  // namespace

ExpandedConfig expand_config(const std::vector<std::string>& command_line) {
  std::vector<std::string> rest;
  std::vector<std::string> configs;
  for (size_t i = 0; i < command_line.size(); ++i) {
    const auto& token = command_line[i];
    if (token == "--config") {
      if (i + 1 >= command_line.size()) throw UsageError("--config needs a FILE (a JSON file: see examples/configs/)");
      configs.push_back(command_line[++i]);
    } else if (token.rfind("--config=", 0) == 0) {
      configs.push_back(token.substr(9));
    } else {
      rest.push_back(token);
    }
  }
  if (configs.empty()) return {command_line, {}, {}};
  if (configs.size() > 1) throw UsageError(fmt::format("--config is given {} times; give one file", configs.size()));
  auto expanded = file_arguments(configs.front(), scan(rest));
  expanded.args.insert(expanded.args.end(), rest.begin(), rest.end());
  return expanded;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const auto& [key, spec] : top_level()) keys.push_back(key);
  keys.emplace_back("plugin_options.*");
  for (const auto& [section, entries] : table()) {
    for (const auto& [key, spec] : entries) keys.push_back(section + "." + key);
  }
  return keys;
}

}  // namespace train_vit
