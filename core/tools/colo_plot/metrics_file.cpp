#include "metrics_file.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace colo_plot {
namespace {

void add(Series& series, const nlohmann::json& record, const char* field, double scale = 1.0) {
  const auto step = record.find("step");
  const auto value = record.find(field);
  if (step == record.end() || value == record.end() || !step->is_number() || !value->is_number()) return;
  const double v = value->get<double>();
  if (!std::isfinite(v)) return;  // NaN losses (a diverged run) are gaps, not lines to the axis
  series.step.push_back(step->get<double>());
  series.value.push_back(v * scale);
}

}  // namespace

RunMetrics read_metrics(const std::string& path, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open the metrics file", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  RunMetrics run;
  run.label = label;
  size_t begin = 0;
  int line_number = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // an unfinished last line
    ++line_number;
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format("{}:{}: not a JSON line ({}); is this train_vit's --metrics file?", path,
                                           line_number, e.what()));
    }
    if (!record.is_object()) continue;
    const std::string event = record.value("event", "");
    if (event == "train") {
      add(run.loss, record, "loss");
      add(run.lr, record, "lr");
      add(run.images_per_s, record, "images_per_s");
    } else if (event == "eval") {
      add(run.top1_percent, record, "top1", 100.0);
    }
  }
  if (run.loss.step.empty() && run.top1_percent.step.empty()) {
    throw std::runtime_error(fmt::format(
        "{}: no training or evaluation records ({{\"event\":\"train\",...}} lines) to draw; is this train_vit's "
        "--metrics file?",
        path));
  }
  return run;
}

}  // namespace colo_plot
