// The input normalisation pretrained weights were trained with, from the config files published
// beside them. A file that is there but malformed is an error naming it and what is wrong: falling
// back to ImageNet's statistics would train on inputs the weights never saw, without a word.
#include <colo/files/files.h>
#include <colo/nn/pretrained.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace colo::nn {
namespace {

constexpr const char* kFixIt = "; fix the file, or remove it to normalise with ImageNet's mean and std";

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: {}{}", path, what, kFixIt));
}

// The file's JSON object, or nothing when there is no such file.
std::optional<nlohmann::json> read_json(const std::string& path) {
  if (!files::exists(path)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot be read", path));
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    malformed(path, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!value.is_object()) malformed(path, fmt::format("holds {} ({}), not a JSON object", value.dump(), value.type_name()));
  return value;
}

// `key` of `object`: three finite numbers (one per RGB channel; a single number stands for all
// three, as Hugging Face's processors allow), positive ones for a standard deviation.
std::vector<double> channel_values(const std::string& path, const nlohmann::json& object, const std::string& key,
                                   bool positive) {
  const nlohmann::json& value = object.at(key);
  std::vector<nlohmann::json> items;
  if (value.is_number()) {
    items.assign(3, value);
  } else if (value.is_array() && value.size() == 3) {
    items.assign(value.begin(), value.end());
  } else {
    malformed(path, fmt::format("{} is {}: expected 3 numbers, one per RGB channel (or one number for all three)",
                                key, value.dump()));
  }
  std::vector<double> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string where = value.is_array() ? fmt::format("{}[{}]", key, i) : key;
    if (!items[i].is_number()) {
      malformed(path, fmt::format("{} is {} ({}), not a number", where, items[i].dump(), items[i].type_name()));
    }
    const double v = items[i].get<double>();
    if (!std::isfinite(v)) malformed(path, fmt::format("{} is {}, not a finite number", where, items[i].dump()));
    if (positive && !(v > 0)) malformed(path, fmt::format("{} is {}: a standard deviation must be positive", where, v));
    out.push_back(v);
  }
  return out;
}

// Fills `out` from `object`'s mean and std keys; false when it has neither (the file does not say).
bool read_pair(const std::string& path, const nlohmann::json& object, const std::string& mean_key,
               const std::string& std_key, PretrainedNormalization& out) {
  const bool has_mean = object.contains(mean_key), has_std = object.contains(std_key);
  if (!has_mean && !has_std) return false;
  if (has_mean != has_std) {
    malformed(path, fmt::format("has {} but no {}: give both", has_mean ? mean_key : std_key,
                                has_mean ? std_key : mean_key));
  }
  out.mean = channel_values(path, object, mean_key, false);
  out.std = channel_values(path, object, std_key, true);
  return true;
}

}  // namespace

PretrainedNormalization read_pretrained_normalization(const std::string& file_or_directory) {
  const std::string directory =
      files::is_directory(file_or_directory) ? file_or_directory : files::parent_path(file_or_directory);
  PretrainedNormalization out;
  const std::string hf_path = files::join(directory, "preprocessor_config.json");
  if (const auto hf = read_json(hf_path)) {
    const auto normalize = hf->find("do_normalize");
    if (normalize != hf->end() && !normalize->is_boolean()) {
      malformed(hf_path, fmt::format("do_normalize is {}, not true or false", normalize->dump()));
    }
    if (normalize != hf->end() && !normalize->get<bool>()) return {{0.0, 0.0, 0.0}, {1.0, 1.0, 1.0}};
    if (read_pair(hf_path, *hf, "image_mean", "image_std", out)) return out;
  }
  const std::string timm_path = files::join(directory, "config.json");
  if (const auto timm = read_json(timm_path); timm && timm->contains("pretrained_cfg")) {
    const auto& cfg = (*timm)["pretrained_cfg"];
    if (!cfg.is_object()) malformed(timm_path, fmt::format("pretrained_cfg is {}, not an object", cfg.dump()));
    if (read_pair(timm_path + " (pretrained_cfg)", cfg, "mean", "std", out)) return out;
  }
  return out;
}

}  // namespace colo::nn
