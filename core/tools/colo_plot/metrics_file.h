#pragma once

#include <string>
#include <vector>

namespace colo_plot {

// One run's curves, as train_vit's --metrics file records them (JSON lines; "event":"train"
// lines have step, loss, lr, images_per_s; "event":"eval" lines have step and top1).
struct Series {
  std::vector<double> step;
  std::vector<double> value;
};

struct RunMetrics {
  std::string label;  // shown in the legend
  Series loss;
  Series lr;
  Series images_per_s;
  Series top1_percent;
};

// Reads a metrics file. Lines of other events and fields that are missing or not numbers are
// skipped; a last line without its newline (a run still writing) is ignored. Throws
// std::runtime_error naming the file (and line) when it cannot be read, a complete line is not
// JSON, or nothing in it can be drawn.
RunMetrics read_metrics(const std::string& path, const std::string& label);

}  // namespace colo_plot
