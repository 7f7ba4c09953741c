// PLplot's C++ API (plstream) with its cairo driver's PNG device. PLplot ends the process when
// it cannot start a device (after asking on stdin for another), so the device is checked first.
#include "chart.h"

#include <fmt/format.h>
#include <plstream.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace colo_plot {
namespace {

constexpr const char* kDevice = "pngcairo";
constexpr PLINT kBackground = 0;
constexpr PLINT kInk = 1;
constexpr PLINT kFirstRun = 2;

// Distinct, colour-blind-friendly line colours (Okabe and Ito's palette), then greys.
const std::vector<std::vector<int>> kPalette = {{0, 114, 178},  {213, 94, 0},   {0, 158, 115}, {204, 121, 167},
                                                {230, 159, 0},  {86, 180, 233}, {120, 120, 120}};

bool device_available() {
  // plgDevs fills arrays the caller provides; count is their size in, the devices' number out.
  std::vector<const char*> menu(256), names(256);
  int count = static_cast<int>(names.size());
  const char** menu_data = menu.data();
  const char** name_data = names.data();
  plgDevs(&menu_data, &name_data, &count);
  for (int i = 0; i < count; ++i) {
    if (names[static_cast<size_t>(i)] != nullptr && std::string(names[static_cast<size_t>(i)]) == kDevice) return true;
  }
  return false;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(const std::vector<double>& values) {
    for (const double v : values) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  // Widened a little, and never to nothing (one point, or a flat curve).
  void pad(double fraction) {
    const double span = hi - lo;
    const double margin = span > 0 ? span * fraction : std::max(std::abs(hi) * 0.1, 1e-9);
    lo -= margin;
    hi += margin;
  }
};

double line_width(size_t run) { return std::max(1.5, 5.5 - 2.0 * static_cast<double>(run)); }

void panel(plstream& pls, const std::vector<RunMetrics>& runs, Series RunMetrics::*member, const char* y_label,
           const char* title, bool markers, double y_floor) {
  Range x, y;
  for (const auto& run : runs) {
    x.add((run.*member).step);
    y.add((run.*member).value);
  }
  pls.col0(kInk);
  pls.width(1.0);
  if (x.empty()) {
    pls.env(0, 1, 0, 1, 0, 0);
    pls.lab("step", y_label, title);
    pls.ptex(0.5, 0.5, 1, 0, 0.5, "no records");
    return;
  }
  if (x.lo == x.hi) x.pad(0.05);
  y.pad(0.05);
  if (y.lo < y_floor) y.lo = y_floor;
  pls.env(x.lo, x.hi, y.lo, y.hi, 0, 0);
  pls.lab("step", y_label, title);
  for (size_t i = 0; i < runs.size(); ++i) {
    const Series& series = runs[i].*member;
    if (series.step.empty()) continue;
    std::vector<PLFLT> xs(series.step.begin(), series.step.end());
    std::vector<PLFLT> ys(series.value.begin(), series.value.end());
    pls.col0(kFirstRun + static_cast<PLINT>(i));
    // Later runs thinner, so that equal curves (two plugins' learning rates) show both colours.
    pls.width(line_width(i));
    pls.line(static_cast<PLINT>(xs.size()), xs.data(), ys.data());
    if (markers || xs.size() == 1) pls.poin(static_cast<PLINT>(xs.size()), xs.data(), ys.data(), 4);
  }
  pls.width(1.0);
}

void legend(plstream& pls, const std::vector<RunMetrics>& runs) {
  const auto n = static_cast<PLINT>(runs.size());
  std::vector<PLINT> options(runs.size(), PL_LEGEND_LINE), colours(runs.size()), styles(runs.size(), 1);
  std::vector<PLFLT> widths(runs.size());
  std::vector<const char*> text(runs.size());
  std::vector<PLINT> text_colours(runs.size(), kInk);
  for (size_t i = 0; i < runs.size(); ++i) {
    colours[i] = kFirstRun + static_cast<PLINT>(i);
    widths[i] = line_width(i);
    text[i] = runs[i].label.c_str();
  }
  PLFLT width = 0, height = 0;
  pls.col0(kInk);
  pls.legend(&width, &height, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
             PL_POSITION_BOTTOM | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.02, 0.02, 0.08, kBackground, kInk, 1, 0, 0, n,
             options.data(), 1.0, 0.8, 2.0, 1.0, text_colours.data(), text.data(), nullptr, nullptr, nullptr, nullptr,
             colours.data(), styles.data(), widths.data(), nullptr, nullptr, nullptr, nullptr);
}

std::vector<int> run_colour(size_t i) { return kPalette[std::min(i, kPalette.size() - 1)]; }

}  // namespace

void draw_chart(const std::vector<RunMetrics>& runs, const std::string& png_path, const ChartOptions& options) {
  if (!device_available()) {
    throw std::runtime_error(fmt::format(
        "PLplot has no {} device here, so {} cannot be drawn; install Debian's plplot-driver-cairo", kDevice,
        png_path));
  }
  ::remove(png_path.c_str());
  {
    plstream pls;
    pls.sdev(kDevice);
    pls.sfnam(png_path.c_str());
    pls.spage(0, 0, static_cast<PLINT>(options.width), static_cast<PLINT>(options.height), 0, 0);
    pls.scmap0n(static_cast<PLINT>(kFirstRun + std::max<size_t>(runs.size(), 1)));
    pls.scol0(kBackground, 255, 255, 255);
    pls.scol0(kInk, 0, 0, 0);
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto c = run_colour(i);
      pls.scol0(kFirstRun + static_cast<PLINT>(i), c[0], c[1], c[2]);
    }
    pls.ssub(2, 2);
    pls.init();
    pls.schr(0, 0.8);
    const std::string loss_title = options.title.empty() ? "training loss" : options.title + ": training loss";
    panel(pls, runs, &RunMetrics::loss, "loss", loss_title.c_str(), false, -std::numeric_limits<double>::infinity());
    panel(pls, runs, &RunMetrics::lr, "learning rate", "learning rate", false, 0.0);
    panel(pls, runs, &RunMetrics::images_per_s, "images/s", "training throughput", false, 0.0);
    panel(pls, runs, &RunMetrics::top1_percent, "top-1 %", "test accuracy", true, 0.0);
    // In the accuracy panel's lower right, where a rising curve leaves room.
    legend(pls, runs);
  }  // the stream's end writes the file
  struct stat status {};
  if (::stat(png_path.c_str(), &status) != 0 || status.st_size == 0) {
    throw std::runtime_error(fmt::format("{}: PLplot did not write the PNG (a directory that does not exist, or no "
                                         "permission?)",
                                         png_path));
  }
}

}  // namespace colo_plot
