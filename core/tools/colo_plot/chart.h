#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "metrics_file.h"

namespace colo_plot {

struct ChartOptions {
  int64_t width = 1200;
  int64_t height = 800;
  std::string title;
};

// Draws four panels against the optimizer step (training loss, learning rate, images/s, test
// top-1 %), every run in its own colour, with a legend, into a PNG file through PLplot's cairo
// driver. The runs' colours are Okabe and Ito's, in this order: (0, 114, 178) blue, (213, 94, 0)
// vermilion, (0, 158, 115) green, (204, 121, 167), (230, 159, 0), (86, 180, 233), then grey.
// Throws std::runtime_error naming the file when it cannot be written.
void draw_chart(const std::vector<RunMetrics>& runs, const std::string& png_path, const ChartOptions& options);

}  // namespace colo_plot
