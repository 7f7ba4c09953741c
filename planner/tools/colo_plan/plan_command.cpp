// colo-plan [plan]: rank the layouts, explain one, write the best as a train_vit config.
#include <colo/planner/planner.h>
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"


namespace po = boost::program_options;

namespace colo_plan {
namespace {

using colo::planner::Prediction;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

nlohmann::json to_json(const Prediction& p, const std::string& precision) {
  const auto& b = p.breakdown;
  nlohmann::json options = nlohmann::json::object();
  for (const auto& [k, v] : p.layout.plugin_options(precision)) options[k] = v;
  return {{"layout", p.layout.name()},
          {"plugin", p.layout.plugin},
          {"plugin_options", options},
          {"activation_checkpointing", p.layout.activation_checkpointing},
          {"grad_accum", p.layout.grad_accum},
          {"step_s", p.step_seconds},
          {"images_per_s", p.images_per_second},
          {"tflops_per_gpu", p.tflops_per_gpu},
          {"mfu", p.mfu},
          {"device_gib", static_cast<double>(p.device_bytes) / kGiB},
          {"host_gib", static_cast<double>(p.host_bytes) / kGiB},
          {"fits", p.fits},
          {"why_not", p.why_not},
          {"bound", p.bound},
          {"breakdown_s",
           {{"compute", b.compute},
            {"recompute", b.recompute},
            {"tp_comm", b.tp_comm},
            {"pp_comm", b.pp_comm},
            {"dp_comm", b.dp_comm},
            {"bubble", b.bubble},
            {"optimizer", b.optimizer},
            {"offload", b.offload},
            {"plugin_work", b.plugin_work}}}};
}

std::string table(const std::vector<Prediction>& ranked, std::size_t top, bool gpu) {
  std::string out = fmt::format("{:>4}  {:<58} {:>11} {:>10} {:>6} {:>9}  {}\n", "rank", "layout", "images/s",
                                "step ms", "MFU %", gpu ? "GiB/GPU" : "GiB/rank", "bound by");
  for (std::size_t i = 0; i < std::min(top, ranked.size()); ++i) {
    const auto& p = ranked[i];
    out += fmt::format("{:>4}  {:<58} {:>11.1f} {:>10.1f} {:>6.1f} {:>9.2f}  {}\n", i + 1, p.layout.name(),
                       p.images_per_second, p.step_seconds * 1e3, 100.0 * p.mfu,
                       static_cast<double>(p.device_bytes) / kGiB, p.bound);
  }
  return out;
}

}  // namespace

std::string default_cluster_file() {
  try {
    return colo::planner::shipped_cluster_file();
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("no --cluster given: {}", e.what()));
  }
}

int run_plan(const std::vector<std::string>& args) {
  std::string model_name, cluster_path, profile_path, out_path, json_path, plugins, chunks, precision;
  std::vector<std::string> explain;
  int world = 0, gpus_per_node = 0, top = 10, max_microbatches = 64, max_accum = 16;
  int64_t batch = 0, image = 0, patch = 0, hidden = 0, depth = 0, heads = 0, classes = 0;
  double memory = 0, mlp = 0;
  po::options_description desc(
      "colo-plan: predicts step time, images/s, MFU and memory of every layout the plugins accept, ranks them and "
      "writes the best as a train_vit --config file (docs/planning.md).\n"
      "  colo-plan --model 6.45b --world-size 64 --gpus-per-node 8 --gpu-memory-gib 80 --global-batch 512\n"
      "  colo-plan profile --help      (measure a profile / the collectives)\nOptions");
  desc.add_options()("help,h", "this help")
      ("model", po::value(&model_name), "tiny | small | base | large (ViT-x/16) | huge (ViT-H/14) | 6.45b (the "
                                         "hybrid example's); the flags below override it")
      ("image-size", po::value(&image), "model: image height = width")
      ("patch-size", po::value(&patch), "model: patch size")
      ("hidden", po::value(&hidden), "model: width")
      ("depth", po::value(&depth), "model: blocks")
      ("heads", po::value(&heads), "model: attention heads")
      ("mlp-ratio", po::value(&mlp), "model: MLP width / width")
      ("num-classes", po::value(&classes), "model: classes (default 1000)")
      ("world-size", po::value(&world), "GPUs (or CPU ranks) of the job")
      ("gpus-per-node", po::value(&gpus_per_node), "GPUs per node (default: the cluster file's)")
      ("gpu-memory-gib", po::value(&memory), "memory per GPU in GiB (default: the cluster file's)")
      ("global-batch", po::value(&batch), "images per optimizer step over the whole job")
      ("precision", po::value(&precision), "fp32 | bf16 | fp16 | fp8 (default: bf16 on GPUs, fp32 on CPU ranks)")
      ("cluster", po::value(&cluster_path), "cluster file (JSON; default: the shipped 8×H100 SXM nodes)")
      ("profile", po::value(&profile_path), "per-layer profile from colo-plan profile (default: analytic compute)")
      ("top", po::value(&top)->default_value(10), "layouts to print")
      ("out", po::value(&out_path)->default_value("planned_layout.json"),
       "write the best layout here as a train_vit --config file ('' for none)")
      ("explain", po::value(&explain)->composing(),
       "print one layout's breakdown, e.g. \"hybrid_parallel pp4 tp4 1f1b mb4 ckpt\" (repeatable)")
      ("why-not", "also list the layouts set aside and why")
      ("json", po::value(&json_path), "write every prediction (ranked, explained) as JSON here")
      ("plugins", po::value(&plugins), "search only these plugins (comma-separated)")
      ("max-microbatches", po::value(&max_microbatches)->default_value(64), "search: most microbatches")
      ("max-grad-accum", po::value(&max_accum)->default_value(16), "search: most accumulation passes")
      ("chunks", po::value(&chunks)->default_value("2"), "search: the interleaved schedule's chunk counts")
      ("no-offload", "search: leave out layouts with state in host memory");
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
  std::vector<std::string> problems;
  if (world < 1) problems.emplace_back("--world-size N is required (N >= 1)");
  if (batch < 1) problems.emplace_back("--global-batch B is required (B >= 1)");
  if (model_name.empty() && (patch == 0 || hidden == 0 || depth == 0 || heads == 0)) {
    problems.emplace_back("--model NAME is required (or --patch-size, --hidden, --depth and --heads)");
  }
  if (!problems.empty()) {
    std::string message = "invalid command line:";
    for (const auto& p : problems) message += "\n  " + p;
    throw UsageError(message);
  }

  colo::planner::PlanRequest request;
  try {
    request.model = model_name.empty() ? colo::planner::ModelSpec{"custom", colo::nn::ViTConfig()}
                                       : colo::planner::model_by_name(model_name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--model: {}", e.what()));
  }
  auto& vit = request.model.vit;
  if (image) vit.image_size(image);
  if (patch) vit.patch_size(patch);
  if (hidden) vit.embed_dim(hidden);
  if (depth) vit.depth(depth);
  if (heads) vit.num_heads(heads);
  if (mlp > 0) vit.mlp_ratio(mlp);
  if (classes) vit.num_classes(classes);
  if (image || patch || hidden || depth || heads || mlp > 0 || classes) request.model.name += " (modified)";
  try {
    vit.validate();
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("the model: {}", e.what()));
  }
  if (cluster_path.empty()) cluster_path = default_cluster_file();
  request.cluster = colo::planner::read_cluster_file(cluster_path);
  if (gpus_per_node > 0) request.cluster.gpus_per_node = gpus_per_node;
  if (memory > 0) request.cluster.device.memory_gib = memory;
  if (!profile_path.empty()) request.profile = colo::planner::read_profile_file(profile_path);
  request.world_size = world;
  request.global_batch = batch;
  request.precision = !precision.empty() ? precision
                      : request.profile ? request.profile->precision
                      : request.cluster.device.is_gpu ? "bf16"
                                                      : "fp32";
  if (!plugins.empty()) request.plugins = split_list(plugins);
  request.max_microbatches = max_microbatches;
  request.max_grad_accum = max_accum;
  request.interleaved_chunks.clear();
  for (const auto& c : split_list(chunks)) request.interleaved_chunks.push_back(std::stoi(c));
  request.include_offload = vm.count("no-offload") == 0;

  std::optional<colo::planner::StepModel> model;
  try {
    model.emplace(request);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  fmt::print("colo-plan: {} ({:.2f} B parameters), {} {} ({} per node, {:g} GiB), global batch {}, {}\n",
             request.model.name, static_cast<double>(model->summary().num_parameters()) / 1e9, world,
             request.cluster.device.is_gpu ? "GPUs" : "CPU ranks", request.cluster.gpus_per_node,
             request.cluster.device.memory_gib, batch, request.precision);
  fmt::print("cluster: {} ({}); compute: {}; all figures PREDICTED\n", request.cluster.name, cluster_path,
             request.profile ? "profile " + profile_path : "analytic (no --profile)");

  nlohmann::json record = {{"model", request.model.name}, {"world_size", world}, {"global_batch", batch},
                           {"precision", request.precision}, {"cluster", cluster_path},
                           {"profile", profile_path}};
  if (!explain.empty()) {
    record["explained"] = nlohmann::json::array();
    for (const auto& text : explain) {
      colo::planner::Layout layout;
      try {
        layout = colo::planner::Layout::parse(text, world);
        const auto p = model->predict(layout);
        fmt::print("\n{}", colo::planner::explain(p, request));
        record["explained"].push_back(to_json(p, request.precision));
      } catch (const std::invalid_argument& e) {
        throw UsageError(fmt::format("--explain \"{}\": {}", text, e.what()));
      }
    }
    if (!json_path.empty()) std::ofstream(json_path) << record.dump(2) << "\n";
    return 0;
  }

  const auto result = colo::planner::plan_layouts(*model);
  fmt::print("searched {} layouts in {:.2f} s: {} fit, {} set aside{}\n\n", result.enumerated, result.seconds,
             result.ranked.size(), result.rejected.size(), vm.count("why-not") ? "" : " (--why-not lists them)");
  fmt::print("{}", table(result.ranked, static_cast<std::size_t>(std::max(top, 1)), request.cluster.device.is_gpu));
  fmt::print("\nthe best, explained:\n{}", colo::planner::explain(result.ranked.front(), request));
  if (vm.count("why-not")) {
    fmt::print("\nset aside:\n");
    for (const auto& r : result.rejected) fmt::print("  {}: {}\n", r.layout.name(), r.reason);
  }
  if (!out_path.empty()) {
    std::ofstream out(out_path);
    if (!out) throw std::runtime_error(fmt::format("--out {}: cannot write the file", out_path));
    out << colo::planner::train_vit_config(result.ranked.front(), request);
    fmt::print("\nwrote {}: train_vit --config {} (check it: add --dry-run --world-size {})\n", out_path, out_path,
               world);
  }
  if (!json_path.empty()) {
    record["searched"] = result.enumerated;
    record["search_seconds"] = result.seconds;
    record["ranked"] = nlohmann::json::array();
    for (const auto& p : result.ranked) record["ranked"].push_back(to_json(p, request.precision));
    record["rejected"] = nlohmann::json::array();
    for (const auto& r : result.rejected) record["rejected"].push_back({{"layout", r.layout.name()}, {"reason", r.reason}});
    std::ofstream(json_path) << record.dump(2) << "\n";
  }
  return 0;
}

}  // namespace colo_plan
