// colo-plan profile: measure the per-layer costs of a model on this device (a profile file), or,
// under colo-run, the collectives over the ranks it started (a cluster file).
#include <colo/booster/plugin_registry.h>
#include <colo/planner/profiler.h>
#include <colo/planner/model.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"

namespace po = boost::program_options;

namespace colo_plan {
namespace {

template <typename T>
std::vector<T> numbers(const std::string& flag, const std::string& text) {
  std::vector<T> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      std::size_t used = 0;
      const auto value = std::stoll(item, &used);
      if (used != item.size() || value < 1) throw std::invalid_argument(item);
      out.push_back(static_cast<T>(value));
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--{} {}: '{}' is not a positive whole number (give a comma-separated list)", flag,
                                   text, item));
    }
  }
  if (out.empty()) throw UsageError(fmt::format("--{}: give at least one number", flag));
  return out;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error(fmt::format("--out {}: cannot write the file", path));
  out << text;
}

}  // namespace

int run_profile(const std::vector<std::string>& args) {
  std::string model_name, precision, microbatches, tp, device_name, out_path, optimizer_sizes;
  int64_t image = 0, patch = 0, hidden = 0, depth = 0, heads = 0, classes = 0, largest = 16 << 20;
  double mlp = 0, memory = 0, between_ms = 2, synchronous_between_ms = 8;
  int repeats = 5, warmup = 2, back_to_back = 0, blocks_per_call = 0, calls = 32, overhead_steps = 6;
  int64_t overhead_depth = 6, overhead_samples = 0;
  po::options_description desc(
      "colo-plan profile: measures what the planner's prediction uses, on this machine.\n"
      "  colo-plan profile --model small --precision fp32 --microbatches 1,2,4,8 --tp 1,2 --out profile.json\n"
      "  colo-run --nproc-per-node 2 colo-plan profile --collectives --out cluster.json\nOptions");
  desc.add_options()("help,h", "this help")
      ("collectives", "measure the collectives over the ranks colo-run started instead (writes a cluster file)")
      ("model", po::value(&model_name), "tiny | small | base | large | huge | 6.45b; the flags below override it")
      ("image-size", po::value(&image), "model: image height = width")
      ("patch-size", po::value(&patch), "model: patch size")
      ("hidden", po::value(&hidden), "model: width")
      ("depth", po::value(&depth), "model: blocks (one block is measured: they are all alike)")
      ("heads", po::value(&heads), "model: attention heads")
      ("mlp-ratio", po::value(&mlp), "model: MLP width / width")
      ("num-classes", po::value(&classes), "model: classes (default 1000)")
      ("precision", po::value(&precision), "fp32 | bf16 | fp16 | fp8 (default: bf16 on a GPU, fp32 on the CPU)")
      ("microbatches", po::value(&microbatches)->default_value("1,2,4,8,16,32"), "micro-batch sizes to time")
      ("tp", po::value(&tp)->default_value("1"), "tensor-parallel sizes whose block shard to time, e.g. 1,2,4")
      ("no-sequence-parallel", "leave out the sequence-parallel shards")
      ("device", po::value(&device_name), "cpu | cuda (default: cuda where there is a GPU)")
      ("repeats", po::value(&repeats)->default_value(5), "timed repetitions (their median counts)")
      ("warmup", po::value(&warmup)->default_value(2), "untimed repetitions first")
      ("back-to-back", po::value(&back_to_back)->default_value(0),
       "calls of a layer timed without a synchronisation between them (0: 4 on a GPU, 1 on the CPU)")
      ("blocks-per-call", po::value(&blocks_per_call)->default_value(0),
       "encoder blocks chained in each timed call, as a pipeline stage runs them; a block's time is the chain's "
       "divided by them (0: 4 on a GPU, 1 on the CPU)")
      ("marginal", "also time one call and keep what a call costs beyond it (needs --back-to-back 2 or more; "
                   "a GPU's default is 4)")
      ("optimizer-sizes", po::value(&optimizer_sizes), "elements of the Adam measurements (default: 1M,4M,16M)")
      ("no-plugin-overheads", "leave out the plugins' own step costs (gemini, low_level_zero against torch_ddp on one "
                              "rank: the plugins are loaded and the model trained a few steps each)")
      ("overhead-depth", po::value(&overhead_depth)->default_value(6),
       "the plugins' own step costs: on the model cut to this many blocks (its depth when smaller)")
      ("overhead-samples", po::value(&overhead_samples)->default_value(0),
       "the plugins' own step costs: the batch (0: the largest of --microbatches)")
      ("overhead-steps", po::value(&overhead_steps)->default_value(6),
       "the plugins' own step costs: timed steps per plugin and round (--repeats rounds; the median counts)")
      ("largest-bytes", po::value(&largest)->default_value(16 << 20), "--collectives: the largest message")
      ("gpu-memory-gib", po::value(&memory), "--collectives: memory per rank to record (default: measured)")
      ("calls", po::value(&calls)->default_value(32),
       "--collectives: calls timed back to back per collective and size (their trimmed mean counts)")
      ("between-ms", po::value(&between_ms)->default_value(2.0),
       "--collectives: milliseconds of matmuls before each call, as a step's layers (0: none)")
      ("synchronous-between-ms", po::value(&synchronous_between_ms)->default_value(8.0),
       "--collectives: milliseconds of matmuls before each all-reduce of the synchronous-extra measurement, about "
       "a layer's time between tensor parallelism's collectives (0: not measured, recorded as 0)")
      ("out", po::value(&out_path), "the file to write (required)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (out_path.empty()) throw UsageError("profile: --out FILE is required");
  auto progress = [](const std::string& line) {
    fmt::print("  {}\n", line);
    std::fflush(stdout);
  };

  if (vm.count("collectives")) {
    const auto context = colo::PluginRegistry::global().default_context();
    if (!context.world || context.world->size() < 2) {
      throw UsageError("profile --collectives needs 2 or more ranks: colo-run --nproc-per-node N colo-plan profile "
                       "--collectives --out FILE");
    }
    const bool speaks = context.world->rank() == 0;
    colo::planner::ClusterSpec cluster;
    try {
      cluster = colo::planner::measure_collectives(
          *context.world, context.device,
          colo::planner::CollectiveProfileOptions().largest_bytes(largest).memory_gib(memory).repeats(calls).between_seconds(
              between_ms * 1e-3).synchronous_between_seconds(synchronous_between_ms * 1e-3),
          speaks ? std::function<void(const std::string&)>(progress) : nullptr);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    if (speaks) {
      write(out_path, colo::planner::to_json(cluster));
      fmt::print("colo-plan profile: wrote {} ({})\n", out_path, cluster.name);
    }
    context.world->barrier().wait();
    return 0;
  }

  if (model_name.empty()) throw UsageError("profile: --model NAME is required");
  colo::planner::ModelSpec model;
  try {
    model = colo::planner::model_by_name(model_name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--model: {}", e.what()));
  }
  auto& vit = model.vit;
  if (image) vit.image_size(image);
  if (patch) vit.patch_size(patch);
  if (hidden) vit.embed_dim(hidden);
  if (depth) vit.depth(depth);
  if (heads) vit.num_heads(heads);
  if (mlp > 0) vit.mlp_ratio(mlp);
  if (classes) vit.num_classes(classes);
  const bool cuda = device_name.empty() ? torch::cuda::is_available() : device_name == "cuda";
  if (!device_name.empty() && device_name != "cpu" && device_name != "cuda") {
    throw UsageError(fmt::format("--device {}: expected cpu or cuda", device_name));
  }
  if (cuda && !torch::cuda::is_available()) throw UsageError("--device cuda: this machine (or this LibTorch) has no GPU");
  auto options = colo::planner::ProfileOptions(vit)
                     .precision(precision.empty() ? (cuda ? "bf16" : "fp32") : precision)
                     .microbatches(numbers<int64_t>("microbatches", microbatches))
                     .tp_sizes(numbers<int>("tp", tp))
                     .sequence_parallel(vm.count("no-sequence-parallel") == 0)
                     .device(cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU))
                     .repeats(repeats)
                     .warmup(warmup)
                     .back_to_back(back_to_back)
                     .blocks_per_call(blocks_per_call)
                     .marginal(vm.count("marginal") > 0)
                     .plugin_overheads(vm.count("no-plugin-overheads") == 0)
                     .overhead_depth(overhead_depth)
                     .overhead_samples(overhead_samples)
                     .overhead_steps(overhead_steps);
  if (!optimizer_sizes.empty()) options.optimizer_sizes(numbers<int64_t>("optimizer-sizes", optimizer_sizes));
  fmt::print("colo-plan profile: {} on {}, {}\n", model.name, options.device().str(), options.precision());
  std::fflush(stdout);
  try {
    const auto profile = colo::planner::measure_profile(options, progress);
    write(out_path, colo::planner::to_json(profile));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  fmt::print("colo-plan profile: wrote {}\n", out_path);
  return 0;
}

}  // namespace colo_plan
