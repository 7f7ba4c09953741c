#pragma once
// train_vit --metrics files as the tests read them: one JSON record per line.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace metrics_records {

// step -> `field` of the "train" records (a resumed attempt's record of a step replaces the
// earlier attempt's).
inline std::map<int64_t, double> train_field(const std::string& metrics, const std::string& field) {
  std::map<int64_t, double> by_step;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.at("event") == "train") by_step[record.at("step").get<int64_t>()] = record.at(field).get<double>();
  }
  return by_step;
}

}  // namespace metrics_records
