// colo-plot: curves of one or several train_vit runs (their --metrics files) in one PNG:
//
//   colo-plot ddp.jsonl zero.jsonl --label torch_ddp --label low_level_zero -o curves.png
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "chart.h"
#include "metrics_file.h"

namespace po = boost::program_options;

namespace {

std::string default_label(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const auto dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs, labels;
  std::string output;
  colo_plot::ChartOptions chart;
  po::options_description visible("Usage: colo-plot METRICS.jsonl... -o FILE.png [options]\n\n"
                                  "Draws training loss, learning rate, images/s and test top-1 against the step for "
                                  "one or several\ntrain_vit runs (their --metrics files), each run in its own "
                                  "colour.\n\nOptions");
  visible.add_options()("help,h", "show this help")(
      "output,o", po::value(&output)->value_name("FILE.png"), "the PNG to write (required)")(
      "label", po::value(&labels)->composing()->value_name("NAME"),
      "legend name of each run, in the order of the files (default: the file name without its extension)")(
      "title", po::value(&chart.title)->value_name("TEXT"), "title over the loss panel")(
      "width", po::value(&chart.width)->default_value(chart.width)->value_name("PIXELS"), "picture width")(
      "height", po::value(&chart.height)->default_value(chart.height)->value_name("PIXELS"), "picture height");
  po::options_description all;
  all.add(visible).add_options()("input", po::value(&inputs)->composing(), "metrics files");
  po::positional_options_description positional;
  positional.add("input", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "colo-plot: error: %s\nRun 'colo-plot --help' for the options.\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << visible << "\n";
    return 0;
  }
  std::vector<std::string> problems;
  if (inputs.empty()) problems.emplace_back("no metrics file given (train_vit --metrics FILE writes one)");
  if (output.empty()) problems.emplace_back("-o FILE.png is required");
  if (labels.size() > inputs.size()) {
    problems.push_back(fmt::format("{} --label for {} files: give at most one per file", labels.size(), inputs.size()));
  }
  if (chart.width < 200 || chart.height < 150 || chart.width > 10000 || chart.height > 10000) {
    problems.push_back(fmt::format("--width {} --height {}: between 200x150 and 10000x10000 pixels", chart.width,
                                   chart.height));
  }
  if (!problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "colo-plot: error: %s\n", p.c_str());
    std::fputs("Run 'colo-plot --help' for the options.\n", stderr);
    return 2;
  }
  try {
    std::vector<colo_plot::RunMetrics> runs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      runs.push_back(colo_plot::read_metrics(inputs[i], i < labels.size() ? labels[i] : default_label(inputs[i])));
    }
    colo_plot::draw_chart(runs, output, chart);
    std::printf("colo-plot: wrote %s (%zu run%s)\n", output.c_str(), runs.size(), runs.size() == 1 ? "" : "s");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "colo-plot: error: %s\n", e.what());
    return 1;
  }
}
