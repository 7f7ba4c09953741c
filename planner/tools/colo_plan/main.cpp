// colo-plan: which layout? Predicts step time, images/s, MFU and memory of every layout the
// plugins accept for a model, a global batch and a cluster, ranks them and writes the best as a
// train_vit --config file; `colo-plan profile` measures the per-layer costs (and, under colo-run,
// the collectives) the prediction uses. docs/planning.md.
//
//   colo-plan --model 6.45b --world-size 64 --gpus-per-node 8 --gpu-memory-gib 80 --global-batch 512
//   colo-plan profile --model small --precision fp32 --out profile.json
//   colo-run --nproc-per-node 2 colo-plan profile --collectives --out cluster.json
#include <colo/planner/file_error.h>
#include <colo/planner/planner.h>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args.front() == "profile") return colo_plan::run_profile({args.begin() + 1, args.end()});
    if (!args.empty() && args.front() == "plan") args.erase(args.begin());
    return colo_plan::run_plan(args);
  } catch (const colo_plan::UsageError& e) {
    fmt::print(stderr, "colo-plan: {}\n(colo-plan --help lists the options)\n", e.what());
    return 2;
  } catch (const colo::planner::PlannerFileError& e) {
    fmt::print(stderr, "colo-plan: {}\n", e.what());
    return 2;
  } catch (const colo::planner::NoLayoutFits& e) {
    fmt::print(stderr, "colo-plan: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "colo-plan: {}\n", e.what());
    return 1;
  }
}
