// colo_vit_bench: end-to-end ViT training throughput of one plugin and layout.
//
//   colo-run --nproc-per-node 8 build/bin/colo_vit_bench --plugin torch_ddp --model base
//       --batch-size 128 --precision bf16 --json results/colo_torch_ddp.json
//
// Each rank trains on one synthetic batch made once, on its device, before timing (no data
// loading inside the timed loop), or with --image-folder DIR on batches its DataLoader decodes
// from JPEG/PNG files (RandomResizedCrop + flip, worker threads), to measure what loading costs. Reports images/s (global), model TFLOP/s per GPU, MFU against
// a matmul peak measured in the same run, peak memory and step times; rank 0 writes the JSON
// record that benchmarks/peers/combine_results.py tabulates next to the PyTorch + timm peers.
#include "device_metrics.h"
#include "kernel_trace.h"
#include "vit_flops.h"

#include <colo/amp/precision.h>
#include <colo/booster/booster.h>
#include <colo/booster/plugin_options.h>
#include <colo/booster/plugin_registry.h>
#include <colo/compat/torch_compat.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <colo/data/cuda_work_queues.h>
#include <colo/data/data_loader.h>
#include <colo/data/image_folder.h>
#include <colo/data/synthetic_dataset.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/env/variables.h>
#include <colo/nn/mlp.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vision_transformer.h>
#include <colo/zero/device_memory.h>
#include <colo/optim/hybrid_adam.h>

#include <ATen/Context.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <numeric>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#ifndef COLO_GIT_COMMIT
#define COLO_GIT_COMMIT "unknown"
#endif

namespace po = boost::program_options;

namespace colo::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Options {
  std::string plugin;
  PluginOptions plugin_options;
  std::string model;
  int64_t image_size = 224;
  std::optional<int64_t> patch_size, embed_dim, depth, num_heads, num_classes;
  std::optional<double> mlp_ratio;
  int64_t batch_size = 0;
  std::string precision;
  int64_t warmup_steps = 0;
  std::string training_stream = "default";  // or "side"
  int64_t steps = 0;
  double lr = 0.0;
  double weight_decay = 0.0;
  double peak_tflops = 0.0;
  std::optional<int64_t> peak_matmul_size;
  double peak_seconds = 0.0;
  std::string json_path;
  std::string profile_path;
  std::string commit;
  std::string command_line;
  // Diagnostics of the data-parallel step (not training: --no-sync never averages gradients).
  bool no_sync = false;
  // Reduce every micro-batch's gradients (no booster.no_sync between them): ZeRO's reducers add
  // each pass into the sharded fp32 gradient, so no full-size gradient is held across micro-batches
  // (FSDP2's default) at the price of a reduce-scatter per micro-batch.
  bool sync_every_microbatch = false;
  int64_t grad_accum = 1;
  int32_t gemm_sm_carveout = 0;
  // Train from an image folder (torchvision's layout) instead of one synthetic batch.
  std::string image_folder;
  int64_t workers = 0;  // loader threads; 0: the cores of this rank less one
  std::string decoder = "cpu";  // where the folder's JPEGs are decoded (colo::data::ImageDecoder)
  bool activation_checkpointing = false;
  bool fp8_unfused_gelu = false;  // diagnostic: precision=fp8 without the GELU inside fc2's cast
  bool fp8_unfused_gelu_backward = false;  // diagnostic: without fc1's float8 gradient from the GELU's backward
  // Saves during the timed steps (Booster::save_state into save_dir every save_every steps; 0:
  // none): the stall each costs the loop, synchronous or asynchronous (SaveOptions::async).
  int64_t save_every = 0;
  std::string save_dir;
  bool save_async = false;
};

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos) return arg;
  std::string quoted = "'";
  for (char c : arg) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

// $COLO_COMMIT where set: a copy of the tree on another machine may carry stale git metadata.
std::string commit_of_this_tree() {
  return colo::env::text("COLO_COMMIT").value_or(COLO_GIT_COMMIT);
}

// nullopt: --help was printed.
std::optional<Options> parse_command_line(int argc, char** argv) {
  Options o;
  std::vector<std::string> plugin_opts;
  int64_t patch = 0, embed = 0, depth = 0, heads = 0, classes = 0, matmul = 0;
  double mlp = 0.0;
  po::options_description desc(
      "colo_vit_bench: ViT training throughput (images/s, TFLOP/s, MFU, peak memory) of a colo plugin.\n"
      "Multi-GPU: colo-run --nproc-per-node N colo_vit_bench ...\nOptions");
  desc.add_options()("help,h", "this help")
      ("plugin", po::value(&o.plugin)->default_value("torch_ddp"), "plugin name or path to libcolo_plugin_*.so")
      ("plugin-opt", po::value(&plugin_opts)->composing(),
       "plugin option key=value (repeatable), e.g. --plugin-opt stage=2; tp_size and pp_size also set how many "
       "ranks share one batch")
      ("model", po::value(&o.model)->default_value("base"),
       "ViT preset: tiny | small | base | large (timm vit_*_patch16_224), or their timm names")
      ("image-size", po::value(&o.image_size)->default_value(224), "image height = width")
      ("patch-size", po::value(&patch), "override the preset's patch size")
      ("embed-dim", po::value(&embed), "override the preset's embedding dim")
      ("depth", po::value(&depth), "override the preset's number of blocks")
      ("num-heads", po::value(&heads), "override the preset's attention heads")
      ("mlp-ratio", po::value(&mlp), "override the preset's MLP ratio")
      ("num-classes", po::value(&classes), "classifier classes (default 1000)")
      ("batch-size", po::value(&o.batch_size)->default_value(64),
       "images per step per data-parallel replica (= per GPU unless tp_size/pp_size > 1)")
      ("precision", po::value(&o.precision)->default_value("bf16"),
       "fp32 | bf16 | fp16 | fp8: passed to the plugin as precision=..., and the dtype of the peak matmul (bf16 for fp8)")
      ("warmup-steps", po::value(&o.warmup_steps)->default_value(10), "untimed steps first")
      ("training-stream", po::value(&o.training_stream)->default_value("default"),
       "default (the legacy default stream) or side (a non-blocking stream of LibTorch's pool) for the training steps")
      ("steps", po::value(&o.steps)->default_value(50), "timed steps")
      ("lr", po::value(&o.lr)->default_value(1e-4, "1e-4"), "AdamW learning rate")
      ("weight-decay", po::value(&o.weight_decay)->default_value(0.05, "0.05"), "AdamW weight decay")
      ("peak-tflops", po::value(&o.peak_tflops)->default_value(0.0),
       "MFU denominator in TFLOP/s per GPU; 0 measures it (n×n×n matmul loop in the run's precision)")
      ("peak-matmul-size", po::value(&matmul), "n of the peak matmul (default 8192 on a GPU, 1024 on the CPU)")
      ("peak-seconds", po::value(&o.peak_seconds)->default_value(2.0), "minimum duration of the peak measurement")
      ("json", po::value(&o.json_path), "write the result record to this file (rank 0)")
      ("profile", po::value(&o.profile_path),
       "after the timed steps, record 3 more with the Kineto profiler and write a Chrome trace here (rank r > 0 "
       "inserts .rank<r> before the extension; LibTorch 2.x); summarise with benchmarks/peers/kernel_summary.py")
      ("grad-accum", po::value(&o.grad_accum)->default_value(1),
       "plain (non-pipelined) plugins: split each step's batch into this many micro-batches, all but the last "
       "under booster.no_sync (the loop a pipeline with as many microbatches replaces)")
      ("activation-checkpointing", po::bool_switch(&o.activation_checkpointing),
       "recompute each layer's activations in backward (LayerStack::set_activation_checkpointing)")
      ("fp8-unfused-gelu", po::bool_switch(&o.fp8_unfused_gelu),
       "diagnostic, precision=fp8: the MLP's GELU as its own kernel before fc2's float8 cast (Mlp::set_fp8_gelu_fusion "
       "off), for an A/B of the fused producer")
      ("fp8-unfused-gelu-backward", po::bool_switch(&o.fp8_unfused_gelu_backward),
       "diagnostic, precision=fp8: fc1's output gradient cast after the GELU's backward instead of inside it "
       "(Mlp::set_fp8_gelu_backward_fusion off), for an A/B of the fused producer")
      ("sync-every-microbatch", po::bool_switch(&o.sync_every_microbatch),
       "with --grad-accum: communicate every micro-batch's gradients instead of accumulating them under "
       "booster.no_sync (less memory under ZeRO, as FSDP2 does by default; more communication)")
      ("no-sync", po::bool_switch(&o.no_sync),
       "diagnostic: every step under booster.no_sync (no gradient communication), to measure what data "
       "parallelism costs besides communicating")
      ("image-folder", po::value(&o.image_folder),
       "train on batches decoded from this image folder (DIR/<class>/*.jpg|png; RandomResizedCrop + flip, as "
       "training does) instead of one synthetic batch kept on the device")
      ("decoder", po::value(&o.decoder)->default_value(o.decoder),
       "with --image-folder: cpu (libjpeg-turbo in the loader threads), nvjpeg (nvJPEG on this rank's GPU; an error "
       "where it cannot run) or auto")
      ("workers", po::value(&o.workers)->default_value(0),
       "with --image-folder: loader threads per rank; 0: this rank's share of the cores less one")
      ("gemm-sm-carveout", po::value(&o.gemm_sm_carveout)->default_value(0),
       "diagnostic: SMs that cuBLAS leaves free during backward (for the NCCL kernels beside it; LibTorch >= 2.6)")
      ("save-every", po::value(&o.save_every)->default_value(0),
       "save the whole training state (Booster::save_state) into --save-dir every N timed steps and report the "
       "stall each save costs the loop; 0: no saves")
      ("save-dir", po::value(&o.save_dir), "with --save-every: the directory (each save replaces the last)")
      ("save-async", po::bool_switch(&o.save_async),
       "with --save-every: asynchronous saves (a host copy at the step, written in the background)")
      ("commit", po::value(&o.commit)->default_value(commit_of_this_tree()),
       "commit recorded in the JSON (default: $COLO_COMMIT, else the source tree's HEAD at configure time; a copy "
       "of the tree on another machine may carry stale git metadata)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return std::nullopt;
  }
  po::notify(vm);
  if (vm.count("patch-size")) o.patch_size = patch;
  if (vm.count("embed-dim")) o.embed_dim = embed;
  if (vm.count("depth")) o.depth = depth;
  if (vm.count("num-heads")) o.num_heads = heads;
  if (vm.count("mlp-ratio")) o.mlp_ratio = mlp;
  if (vm.count("num-classes")) o.num_classes = classes;
  if (vm.count("peak-matmul-size")) o.peak_matmul_size = matmul;

  std::vector<std::string> problems;
  if (o.batch_size <= 0) problems.push_back(fmt::format("--batch-size must be positive, got {}", o.batch_size));
  if (o.grad_accum <= 0 || (o.batch_size > 0 && o.batch_size % o.grad_accum != 0)) {
    problems.push_back(fmt::format("--grad-accum {} must be positive and divide --batch-size {}", o.grad_accum,
                                   o.batch_size));
  }
  if (o.steps <= 0) problems.push_back(fmt::format("--steps must be positive, got {}", o.steps));
  if (o.save_every < 0) problems.push_back(fmt::format("--save-every must be >= 0, got {}", o.save_every));
  if (o.save_every > 0 && o.save_dir.empty()) problems.push_back("--save-every needs --save-dir DIR");
  if (o.save_every == 0 && (o.save_async || !o.save_dir.empty())) {
    problems.push_back("--save-dir and --save-async go with --save-every N");
  }
  if (o.training_stream != "default" && o.training_stream != "side") {
    problems.push_back(fmt::format("--training-stream must be default or side, got '{}'", o.training_stream));
  }
  if (o.warmup_steps < 0) problems.push_back(fmt::format("--warmup-steps must be >= 0, got {}", o.warmup_steps));
  if (o.peak_tflops < 0) problems.push_back(fmt::format("--peak-tflops must be >= 0, got {}", o.peak_tflops));
  if (o.gemm_sm_carveout < 0) {
    problems.push_back(fmt::format("--gemm-sm-carveout must be >= 0, got {}", o.gemm_sm_carveout));
  }
  amp::parse_precision(o.precision);  // throws with the valid spellings
  for (const auto& text : plugin_opts) o.plugin_options.insert(parse_option_assignment(text));
  // The benchmark's precision is the plugin's: one source of truth, no silent disagreement.
  const auto given = o.plugin_options.find("precision");
  if (given != o.plugin_options.end() && vm["precision"].defaulted()) {
    o.precision = given->second;
  } else if (given != o.plugin_options.end() && given->second != o.precision) {
    problems.push_back(fmt::format("--precision {} contradicts --plugin-opt precision={}; give one of them",
                                   o.precision, given->second));
  }
  o.plugin_options["precision"] = o.precision;
  if (!problems.empty()) {
    std::string message = "invalid command line:";
    for (const auto& p : problems) message += "\n  " + p;
    throw std::invalid_argument(message);
  }
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command_line += ' ';
    o.command_line += shell_quote(argv[i]);
  }
  return o;
}

nn::ViTConfig model_config(const Options& o) {
  auto c = nn::ViTConfig::preset(o.model).image_size(o.image_size);
  if (o.patch_size) c.patch_size(*o.patch_size);
  if (o.embed_dim) c.embed_dim(*o.embed_dim);
  if (o.depth) c.depth(*o.depth);
  if (o.num_heads) c.num_heads(*o.num_heads);
  if (o.mlp_ratio) c.mlp_ratio(*o.mlp_ratio);
  if (o.num_classes) c.num_classes(*o.num_classes);
  c.validate();
  return c;
}

bool has_model_overrides(const Options& o) {
  return o.patch_size || o.embed_dim || o.depth || o.num_heads || o.mlp_ratio;
}

int64_t int_option(const PluginOptions& options, const std::string& key) {
  const auto it = options.find(key);
  if (it == options.end()) return 1;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("--plugin-opt {}={} is not an integer", key, it->second));
  }
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = static_cast<std::size_t>(std::ceil(pos));
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

// Rank 0 writes `path` itself; rank r > 0 writes it with ".rank<r>" before the extension.
std::string rank_trace_path(const std::string& path, int rank) {
  if (rank == 0) return path;
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const std::string suffix = fmt::format(".rank{}", rank);
  return has_extension ? path.substr(0, dot) + suffix + path.substr(dot) : path + suffix;
}

// The value of `x` reduced over every rank (kMax: the slowest rank sets the pace).
double reduce_over_ranks(dist::ProcessGroup* world, double x, dist::ReduceOp op) {
  if (!world) return x;
  auto t = torch::full({1}, x, torch::dtype(torch::kFloat64));
  world->all_reduce_and_wait(t, op);
  return t.item<double>();
}

// Every rank's `local` values (all ranks hold as many), rank by rank.
std::vector<std::vector<double>> gather_over_ranks(dist::ProcessGroup* world, const std::vector<double>& local) {
  if (!world || world->size() == 1) return {local};
  const auto mine = world->communicable(torch::tensor(local, torch::dtype(torch::kFloat64)));
  auto all = torch::empty({world->size() * mine.numel()}, mine.options());
  world->all_gather(all, mine).wait();
  const auto host = all.cpu().view({world->size(), mine.numel()}).contiguous();
  std::vector<std::vector<double>> out;
  for (int64_t r = 0; r < host.size(0); ++r) {
    const double* row = host[r].data_ptr<double>();
    out.emplace_back(row, row + host.size(1));
  }
  return out;
}

int run(const Options& o) {
  // Before any CUDA work: nvJPEG needs more hardware queues than a context gets by default.
  if (!o.image_folder.empty() && o.decoder != "cpu") data::widen_work_queues_for_nvjpeg();
  auto& registry = PluginRegistry::global();
  const PluginContext context = registry.default_context();
  const c10::Device device = context.device;
  dist::ProcessGroup* world = context.world.get();
  const int rank = world ? world->rank() : 0;
  const int world_size = world ? world->size() : 1;

  if (device.is_cuda()) {
    // Only the patch embedding is a convolution; cuDNN's autotuner picks its fastest algorithm.
    at::globalContext().setBenchmarkCuDNN(true);
    // fp32 runs may use TF32 tensor cores for matrix products (the peers do the same, and the
    // peak matmul is then measured under the same setting).
    at::globalContext().setFloat32MatmulPrecision("high");
  }

  const auto config = model_config(o);
  const auto dtype = amp::to_dtype(amp::parse_precision(o.precision));
  // Ranks that share one batch (tensor- and pipeline-parallel groups) do not add images.
  const int64_t tp = int_option(o.plugin_options, "tp_size");
  const int64_t pp = int_option(o.plugin_options, "pp_size");
  if (tp <= 0 || pp <= 0 || world_size % (tp * pp) != 0) {
    throw std::invalid_argument(fmt::format("tp_size {} × pp_size {} must divide the world size {}", tp, pp,
                                            world_size));
  }
  const int64_t dp = world_size / (tp * pp);
  const int64_t global_batch = o.batch_size * dp;

  auto plugin = registry.create(o.plugin, o.plugin_options, context);
  Booster booster(plugin);

  torch::manual_seed(0);  // the same initial model on every rank, as a real run would have
  // What the plugin plans to hold (Booster::plan_memory), printed beside what the run measures.
  MemoryPlan plan;
  {
    MemoryPlanInputs inputs;
    inputs.model = nn::summarize_vision_transformer(config);
    inputs.world_size(world_size)
        .global_batch_size(global_batch)
        .accumulation_steps(o.grad_accum)
        .sync_every_pass(o.sync_every_microbatch && !o.no_sync)
        .activation_checkpointing(o.activation_checkpointing)
        .device_is_gpu(device.is_cuda())
        .async_checkpoint(o.save_every > 0 && o.save_async);
    if (const auto capacity = zero::device_capacity_bytes(device)) inputs.device_memory_bytes(*capacity);
    plan = Booster::plan_memory(o.plugin, o.plugin_options, inputs);
  }
  auto model = nn::make_vision_transformer(config);
  if (o.activation_checkpointing) model->set_activation_checkpointing(true);
  if (o.fp8_unfused_gelu) nn::set_fp8_gelu_fusion(*model, false);
  if (o.fp8_unfused_gelu_backward) nn::set_fp8_gelu_backward_fusion(*model, false);
  model->to(device);
  int64_t num_params = 0;
  for (const auto& p : model->parameters()) num_params += p.numel();
  auto optimizer = std::make_shared<optim::HybridAdam>(
      model->parameters(), optim::HybridAdamOptions(o.lr).weight_decay(o.weight_decay));
  Criterion criterion = [](const torch::Tensor& output, const torch::Tensor& target) {
    return torch::nn::functional::cross_entropy(output.to(torch::kFloat), target);
  };
  auto b = booster.boost(model, optimizer, criterion);

  // One batch, made once and kept on the device. Every rank uses the same one: ranks of a
  // tensor-parallel group must see identical inputs, and what the images are does not change
  // the work.
  data::SyntheticDataset dataset(o.batch_size, {config.in_channels(), config.image_size(), config.image_size()},
                                 config.num_classes(), /*seed=*/0);
  std::vector<int64_t> indices(static_cast<std::size_t>(o.batch_size));
  std::iota(indices.begin(), indices.end(), 0);
  auto batch = dataset.get_batch(indices);
  const auto norm = dataset.default_normalization();
  const auto mean = torch::tensor(norm.mean, torch::dtype(torch::kFloat)).view({1, -1, 1, 1});
  const auto stdev = torch::tensor(norm.std, torch::dtype(torch::kFloat)).view({1, -1, 1, 1});
  const auto synthetic_images = ((batch.images - mean) / stdev).to(device);
  const auto synthetic_labels = batch.labels.to(device);

  // With --image-folder, each step's batch comes from a loader (this rank's shard, a new epoch
  // when one ends).
  std::unique_ptr<data::DataLoader> loader;
  int64_t workers = 0;
  if (!o.image_folder.empty()) {
    const auto folder = std::make_shared<data::ImageFolder>(
        o.image_folder, data::ImageFolderOptions(config.image_size()).decoder(data::parse_image_decoder(o.decoder)));
    const int64_t cores = static_cast<int64_t>(std::thread::hardware_concurrency());
    const int64_t local_ranks = colo::env::integer("LOCAL_WORLD_SIZE", 1, INT_MAX, "processes").value_or(1);
    workers = o.workers > 0 ? o.workers : std::max<int64_t>(1, cores / local_ranks - 1);
    const int64_t dp_rank = b.mesh ? b.mesh->coordinate(dist::MeshAxis::kDp) : rank;
    loader = std::make_unique<data::DataLoader>(folder, data::DataLoaderOptions(o.batch_size)
                                                            .shuffle(true)
                                                            .drop_last(true)
                                                            .augment(true)
                                                            .num_workers(workers)
                                                            .prefetch(workers + 2)
                                                            .num_replicas(dp)
                                                            .rank(dp_rank)
                                                            .device(device));
  }
  torch::Tensor images = synthetic_images, labels = synthetic_labels;
  auto next_batch = [&] {
    if (!loader) return;
    auto next = loader->next();
    if (!next) {
      loader->set_epoch(loader->epoch() + 1);
      next = loader->next();
    }
    images = next->images;
    labels = next->labels;
  };

  const bool pipelined = plugin->supports_pipeline();
  if (pipelined && o.grad_accum > 1) {
    throw std::invalid_argument("--grad-accum is for plain plugins; a pipelined one splits the batch itself "
                                "(--plugin-opt num_microbatches=N)");
  }
  torch::Tensor loss;
  auto train_step = [&] {
    next_batch();
    const auto micro_images = images.chunk(o.grad_accum);
    const auto micro_labels = labels.chunk(o.grad_accum);
    if (pipelined) {
      loss = booster.execute_pipeline(images, labels, *b.model, b.criterion, *b.optimizer, {}).loss;
    } else {
      for (int64_t m = 0; m < o.grad_accum; ++m) {
        std::optional<NoSyncGuard> skip_sync;
        if (o.no_sync || (m + 1 < o.grad_accum && !o.sync_every_microbatch)) {
          skip_sync.emplace(booster.no_sync(*b.model, *b.optimizer));
        }
        auto micro = b.criterion(b.model->forward(micro_images[m]), micro_labels[m]);
        if (o.grad_accum > 1) micro = micro / static_cast<double>(o.grad_accum);
        loss = m == 0 ? micro.detach() : loss + micro.detach();  // the step's mean loss
        if (o.gemm_sm_carveout > 0) compat::set_gemm_sm_carveout(o.gemm_sm_carveout);
        booster.backward(micro, *b.optimizer);
        // Back to 0 (every SM) explicitly, in case a cuBLAS handle keeps the target it was last given.
        if (o.gemm_sm_carveout > 0) compat::set_gemm_sm_carveout(0);
      }
    }
    b.optimizer->step();
    b.optimizer->zero_grad();
  };

  // The peak covers training (model, optimizer state, activations), as torch.cuda's does in the
  // peer after its reset_peak_memory_stats() at the same point.
  // --training-stream side: the steps on a stream of LibTorch's pool (non-blocking) rather than the
  // legacy default stream, with which any library's synchronous CUDA call (a cudaMemcpy, say)
  // implicitly waits for every queued training kernel.
  synchronize(device);
  std::optional<c10::StreamGuard> training_stream;
  if (o.training_stream == "side" && device.is_cuda()) {
    training_stream.emplace(c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device));
  }
  reset_peak_memory(device);
  b.model->train();
  for (int64_t i = 0; i < o.warmup_steps; ++i) train_step();
  // As the Trainer's CheckpointHook does: the pinned copies' memory is allocated before the timed
  // steps, not in the first save's stall.
  if (o.save_every > 0 && o.save_async) booster.reserve_async_save(b);
  synchronize(device);
  if (world) world->barrier().wait();

  StepTimer timer(device);
  const data::DataLoaderStats loader_before = loader ? loader->stats() : data::DataLoaderStats();
  const auto begin = std::chrono::steady_clock::now();
  // A save's stall: from the step's end (its work done) to the loop's going on. The last
  // asynchronous save's remaining write is waited for inside the timed span, as a run's end would.
  std::vector<double> save_stall_s;
  auto save_if_due = [&](int64_t step) {
    if (o.save_every <= 0 || step % o.save_every != 0) return;
    synchronize(device);
    const auto stall_begin = std::chrono::steady_clock::now();
    booster.save_state(b, TrainingProgress{0, step, {}}, o.save_dir, SaveOptions().async(o.save_async));
    save_stall_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - stall_begin).count());
  };
  timer.start();
  for (int64_t i = 0; i < o.steps; ++i) {
    train_step();
    save_if_due(i + 1);
    timer.lap();
  }
  booster.wait_for_save();
  synchronize(device);
  const double local_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  const auto step_ms = timer.step_times_ms();
  // The loader's work over the timed steps: images per CPU-second of its threads (per core) and
  // how long the steps waited for batches.
  nlohmann::json loader_json = nullptr;
  if (loader) {
    const auto after = loader->stats();
    const double cpu = after.worker_cpu_seconds - loader_before.worker_cpu_seconds;
    const double images_made = static_cast<double>(after.images - loader_before.images);
    loader_json = {{"image_folder", o.image_folder},
                   {"images", loader->dataset().size()},
                   {"workers", workers},
                   {"decoder", o.decoder},
                   {"decoder_in_use", static_cast<const data::ImageFolder&>(loader->dataset()).decoder_in_use(device)},
                   {"images_per_cpu_s", cpu > 0 ? nlohmann::json(images_made / cpu) : nlohmann::json(nullptr)},
                   {"images_decoded", images_made},
                   {"worker_cpu_s", cpu},
                   {"wait_s", after.wait_seconds - loader_before.wait_seconds},
                   {"decode_phases", static_cast<const data::ImageFolder&>(loader->dataset()).gpu_decode_phases(device)}};
  }

  if (!o.profile_path.empty()) {
    // After the timed steps, so that profiling overhead never enters the measurement.
    // Every rank records: a rank that is slower than the others sets everyone's pace, and only
    // its own trace shows why.
    KernelTrace trace;
    trace.start();
    for (int i = 0; i < 3; ++i) train_step();
    synchronize(device);
    trace.stop_and_save(rank_trace_path(o.profile_path, rank));
  }

  const double seconds = reduce_over_ranks(world, local_seconds, dist::ReduceOp::kMax);
  // Per step, the slowest rank's time: a synchronous data-parallel step cannot be shorter. In a
  // --no-sync run (ranks independent) its mean against the slowest rank's own mean is what
  // per-step synchronisation alone would cost under the ranks' step-to-step variation.
  const auto step_ms_by_rank = gather_over_ranks(world, step_ms);
  std::vector<double> rank_means;
  for (const auto& times : step_ms_by_rank) {
    rank_means.push_back(std::accumulate(times.begin(), times.end(), 0.0) / static_cast<double>(times.size()));
  }
  double per_step_max_sum = 0.0;
  for (std::size_t i = 0; i < step_ms.size(); ++i) {
    double slowest = 0.0;
    for (const auto& times : step_ms_by_rank) slowest = std::max(slowest, times[i]);
    per_step_max_sum += slowest;
  }
  const double mean_of_per_step_max = per_step_max_sum / static_cast<double>(step_ms.size());
  const double peak_mem =
      reduce_over_ranks(world, peak_memory_bytes(device), dist::ReduceOp::kMax) / (1024.0 * 1024.0 * 1024.0);
  const double final_loss = loss.defined() ? loss.detach().to(torch::kFloat).cpu().item<double>() : std::nan("");
  // The process's peak resident host memory (getrusage: KiB on Linux), max over ranks.
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  const double peak_rss =
      reduce_over_ranks(world, static_cast<double>(usage.ru_maxrss) * 1024.0, dist::ReduceOp::kMax) / kGiB;

  // Measured after training, on a warm device, and after the memory peak was read.
  std::optional<MatmulPeak> matmul;
  double peak_tflops = o.peak_tflops;
  if (peak_tflops == 0.0) {
    const int64_t n = o.peak_matmul_size.value_or(device.is_cuda() ? 8192 : 1024);
    matmul = measure_matmul_peak(device, dtype, n, o.peak_seconds);
    peak_tflops = reduce_over_ranks(world, matmul->tflops, dist::ReduceOp::kSum) / world_size;
  }

  const auto flops = vit_flops(config);
  const double images_per_s = static_cast<double>(global_batch * o.steps) / seconds;
  const double tflops_per_gpu = flops.training_flops_per_image() * images_per_s / world_size / 1e12;
  const double mfu = tflops_per_gpu / peak_tflops;
  const double mean_ms = rank_means.at(static_cast<std::size_t>(rank));

  if (rank == 0) {
    nlohmann::json options_json = nlohmann::json::object();
    for (const auto& [k, v] : o.plugin_options) options_json[k] = v;
    nlohmann::json record = {
        {"framework", "colo"},
        {"hardware", hardware_name(device)},
        {"device", device.str()},
        {"date", utc_now()},
        {"commit", o.commit},
        {"command", o.command_line},
        {"torch_version", TORCH_VERSION},
        {"plugin", plugin->name()},
        {"options", options_json},
        {"precision", o.precision},
        {"model",
         {{"name", has_model_overrides(o) ? "custom" : o.model},
          {"image_size", config.image_size()},
          {"patch_size", config.patch_size()},
          {"embed_dim", config.embed_dim()},
          {"depth", config.depth()},
          {"num_heads", config.num_heads()},
          {"mlp_ratio", config.mlp_ratio()},
          {"num_classes", config.num_classes()},
          {"params", num_params}}},
        {"batch", {{"per_replica", o.batch_size}, {"global", global_batch}, {"data_parallel_size", dp}}},
        {"world_size", world_size},
        {"warmup_steps", o.warmup_steps},
        {"steps", o.steps},
        {"images_per_s", images_per_s},
        {"tflops_per_gpu", tflops_per_gpu},
        {"mfu", mfu},
        {"peak_tflops", peak_tflops},
        {"peak_tflops_measured", matmul ? nlohmann::json(peak_tflops) : nlohmann::json(nullptr)},
        {"peak_matmul",
         matmul ? nlohmann::json{{"n", matmul->size},
                                 {"dtype", o.precision},
                                 {"iterations", matmul->iterations},
                                 {"seconds", matmul->seconds},
                                 {"tf32_allowed_for_fp32", device.is_cuda()},
                                 {"rank0_tflops", matmul->tflops}}
                : nlohmann::json(nullptr)},
        {"peak_mem_gib", peak_mem},
        {"peak_host_rss_gib", peak_rss},
        {"activation_checkpointing", o.activation_checkpointing},
        {"fp8_unfused_gelu", o.fp8_unfused_gelu},
        {"fp8_unfused_gelu_backward", o.fp8_unfused_gelu_backward},
        {"planned",
         {{"device_gib", static_cast<double>(plan.ranks.front().device_bytes()) / kGiB},
          {"host_gib", static_cast<double>(plan.ranks.front().host_bytes()) / kGiB},
          {"table", plan.to_string()}}},
        {"peak_mem_method", peak_memory_method(device) + ", max over ranks"},
        {"step_time_ms",
         {{"mean", mean_ms},
          {"p50", percentile(step_ms, 0.5)},
          {"min", *std::min_element(step_ms.begin(), step_ms.end())},
          {"max", *std::max_element(step_ms.begin(), step_ms.end())},
          {"mean_per_rank", rank_means},
          {"mean_of_per_step_max_over_ranks", mean_of_per_step_max}}},
        {"timed_seconds", seconds},
        {"forward_gflops_per_image", flops.forward_flops_per_image() / 1e9},
        {"training_gflops_per_image", flops.training_flops_per_image() / 1e9},
        {"flop_model", kFlopModel},
        {"mfu_definition", "tflops_per_gpu / peak_tflops; peak = dense n×n×n matmul throughput measured in this run "
                           "in the run's precision (mean over ranks) unless --peak-tflops was given"},
        {"diagnostics",
         {{"no_sync", o.no_sync}, {"sync_every_microbatch", o.sync_every_microbatch},
          {"gemm_sm_carveout", o.gemm_sm_carveout}}},
        {"grad_accum", o.grad_accum},
        {"data", loader ? "image_folder" : "synthetic"},
        {"loader", loader_json},
        {"final_loss", std::isnan(final_loss) ? nlohmann::json(nullptr) : nlohmann::json(final_loss)},
        {"saves",
         o.save_every > 0
             ? nlohmann::json{{"every", o.save_every},
                              {"async", o.save_async},
                              {"count", save_stall_s.size()},
                              {"stall_s", save_stall_s},
                              {"stall_s_mean", save_stall_s.empty() ? 0.0
                                                                    : std::accumulate(save_stall_s.begin(),
                                                                                      save_stall_s.end(), 0.0) /
                                                                          static_cast<double>(save_stall_s.size())},
                              {"stall_definition",
                               "rank 0's seconds in Booster::save_state after the step's device work, per save"}}
             : nlohmann::json(nullptr)},
    };
    fmt::print("colo_vit_bench: plugin {} | {} ViT (D={}, L={}, {}px) {} | world {} | global batch {}\n",
               plugin->name(), record["model"]["name"].get<std::string>(), config.embed_dim(), config.depth(),
               config.image_size(), o.precision, world_size, global_batch);
    fmt::print("  {:.4g} images/s | {:.4g} TFLOP/s per GPU | MFU {:.3g}% of {:.4g} TFLOP/s | peak mem {:.2f} GiB | "
               "step {:.1f} ms (p50 {:.1f}) | loss {:.4f}\n",
               images_per_s, tflops_per_gpu, 100.0 * mfu, peak_tflops, peak_mem, mean_ms, percentile(step_ms, 0.5),
               final_loss);
    if (o.save_every > 0) {
      fmt::print("  {} {} saves every {} steps: stall per save {:.3f} s mean (the timed span includes them and the "
                 "last write)\n",
                 save_stall_s.size(), o.save_async ? "asynchronous" : "synchronous", o.save_every,
                 record["saves"]["stall_s_mean"].get<double>());
    }
    if (loader) {
      fmt::print("  data: {} ({} images), {} loader threads, {}: {:.0f} images per CPU-second of the loader, the steps "
                 "waited {:.2f} s for batches\n",
                 o.image_folder, loader->dataset().size(), workers, loader_json["decoder_in_use"].get<std::string>(), loader_json["images_per_cpu_s"].is_null() ? 0.0 : loader_json["images_per_cpu_s"].get<double>(),
                 loader_json["wait_s"].get<double>());
      if (const auto phases = loader_json["decode_phases"].get<std::string>(); !phases.empty()) {
        fmt::print("  GPU decoding, {}\n", phases);
      }
    }
    fmt::print("  planned (Booster::plan_memory, rank 0): device {:.2f} GiB, host {:.2f} GiB | measured peak host RSS "
               "{:.2f} GiB\n",
               static_cast<double>(plan.ranks.front().device_bytes()) / kGiB,
               static_cast<double>(plan.ranks.front().host_bytes()) / kGiB, peak_rss);
    if (!o.json_path.empty()) {
      std::ofstream out(o.json_path);
      if (!out) throw std::runtime_error(fmt::format("cannot write --json {}", o.json_path));
      out << record.dump(2) << "\n";
    }
  }
  if (world) world->barrier().wait();
  return 0;
}

}  // namespace
}  // namespace colo::bench

int main(int argc, char** argv) {
  try {
    const auto options = colo::bench::parse_command_line(argc, argv);
    if (!options) return 0;
    return colo::bench::run(*options);
  } catch (const std::exception& e) {
    std::cerr << "colo_vit_bench: " << e.what() << "\n";
    return 1;
  }
}
