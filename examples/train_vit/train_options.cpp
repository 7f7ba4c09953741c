#include "train_options.h"

#include <colo/booster/closest_match.h>
#include <colo/data/image_folder.h>
#include <colo/data/image_transform.h>
#include <colo/engine/memory_size.h>
#include <fmt/format.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <sstream>

#include "config_file.h"

namespace train_vit {
namespace po = boost::program_options;

namespace {

constexpr unsigned kHelpWidth = 110;

const std::vector<std::string> kDatasets = {"fashion-mnist", "cifar10", "synthetic", "imagefolder"};
const std::vector<std::string> kPrecisions = {"fp32", "bf16", "fp16", "fp8"};
const std::vector<std::string> kOptimizers = {"adamw", "lamb", "sgd"};

// The default model, tuned so that the main job (2 CPU ranks, one core each) passes 85%
// Fashion-MNIST test top-1 well inside 15 minutes (README.md has the measurements). It cuts
// images into a 4x4 grid of patches (7x7 pixels at 28x28, 8x8 at CIFAR's 32x32): on
// Fashion-MNIST these 17 tokens learn faster in a few epochs than 4x4-pixel patches (50 tokens),
// at a third of the cost.
constexpr int64_t kMiniGrid = 4;
constexpr int64_t kMiniDim = 96;
constexpr int64_t kMiniDepth = 4;
constexpr int64_t kMiniHeads = 4;
constexpr double kMiniMlpRatio = 2.0;

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

UsageError usage_error(const std::vector<std::string>& problems) {
  if (problems.size() == 1) return UsageError(problems.front());
  return UsageError(fmt::format("{} problems with the command line:\n  {}", problems.size(), join(problems, "\n  ")));
}

// " (did you mean --epochs?)" when a valid option is a likely typo of `token`.
std::string suggestion(const std::string& token, const po::options_description& description) {
  std::string name = token.substr(0, token.find('='));
  name.erase(0, name.find_first_not_of('-'));
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& option : description.options()) {
    const std::string& candidate = option->long_name();
    const size_t distance = candidate.rfind(name, 0) == 0 ? 0 : colo::edit_distance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best.empty() ? "" : fmt::format(" (did you mean --{}?)", best);
}

po::options_description make_description(TrainOptions& o) {
  // One option per line reads better than the formatter's packing of these call chains.
  // clang-format off
  po::options_description general("General", kHelpWidth, kHelpWidth / 2);
  general.add_options()
      ("help,h", "show this help and exit")
      ("config", po::value<std::string>()->value_name("FILE"),
       "read the layout and recipe from a JSON file (examples/configs/; examples/train_vit/README.md lists "
       "its keys); options on the command line override the file's")
      ("plugin", po::value(&o.plugin)->default_value(o.plugin)->value_name("NAME|PATH"),
       "training strategy: a plugin name (torch_ddp, low_level_zero, gemini, hybrid_parallel, or any "
       "libcolo_plugin_<name>.so on COLO_PLUGIN_PATH) or the path of a plugin .so")
      ("plugin-opt", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
       "option for the plugin (repeatable), e.g. --plugin-opt bucket_cap_mb=4; an unknown key makes the "
       "plugin list its valid keys")
      ("precision", po::value(&o.precision)->default_value(o.precision)->value_name("P"),
       "fp32 | bf16 | fp16 | fp8 (passed to the plugin as precision=...; fp8: bf16 with float8 linear layers, GPUs of compute capability 8.9 or newer)")
      ("threads", po::value(&o.threads)->default_value(o.threads)->value_name("N"),
       "LibTorch (and OpenBLAS) threads per rank; 0: this machine's cores divided by the ranks on this node")
      ("dry-run", po::bool_switch(&o.dry_run),
       "print what the plugin would hold on each rank (parameters, gradients, optimizer state, activations; on the "
       "device or in host memory) for this model, batch and world, and exit: nothing is allocated or launched")
      ("world-size", po::value(&o.plan_world_size)->default_value(o.plan_world_size)->value_name("N"),
       "with --dry-run: the number of ranks to plan for (0: the launcher's)")
      ("gpu-memory-gib", po::value(&o.gpu_memory_gib)->default_value(o.gpu_memory_gib)->value_name("X"),
       "with --dry-run: plan for GPUs of X GiB each (gemini's auto placement plans against it); 0: this machine's "
       "GPU, or CPU ranks where there is none")
      ("layout", po::value(&o.layout)->value_name("auto"),
       "auto: train with colo-plan's best layout for this model, batch and world (plugin, its options, "
       "activation checkpointing, accumulation; docs/planning.md); --dry-run shows its memory plan")
      ("layout-cluster", po::value(&o.layout_cluster)->value_name("FILE"),
       "with --layout auto: the cluster file (default: the shipped 8xH100 one on GPUs, rough built-in constants "
       "on CPU ranks; colo-plan profile --collectives measures one)")
      ("layout-profile", po::value(&o.layout_profile)->value_name("FILE"),
       "with --layout auto: a per-layer profile from colo-plan profile (default: analytic compute)")
      ("seed", po::value(&o.seed)->default_value(o.seed)->value_name("N"),
       "seeds the model's initialisation, the shuffle and the augmentation");

  po::options_description model("Model", kHelpWidth, kHelpWidth / 2);
  model.add_options()
      ("model", po::value(&o.model)->default_value(o.model)->value_name("NAME"),
       "mini (default: a 4x4 grid of patches, width 96, depth 4, 4 heads, MLP ratio 2, at the data set's "
       "image size), a timm preset (tiny, small, base, large: patch 16, 224x224 unless --image-size), custom "
       "(then --patch-size, --embed-dim, --depth and --heads are required), or resnet18 / resnet50 (torchvision's, at "
       "the data set's image size; the program keeps its name); the flags below override a ViT preset")
      ("image-size", po::value<int64_t>()->value_name("N"), "model input size; images are resized to it")
      ("patch-size", po::value<int64_t>()->value_name("N"), "patch size (must divide the image size)")
      ("embed-dim", po::value<int64_t>()->value_name("N"), "token width")
      ("depth", po::value<int64_t>()->value_name("N"), "number of encoder blocks")
      ("heads", po::value<int64_t>()->value_name("N"), "attention heads (must divide the width)")
      ("mlp-ratio", po::value<double>()->value_name("X"), "MLP hidden width / token width")
      ("drop-path", po::value(&o.drop_path)->default_value(o.drop_path)->value_name("X"),
       "stochastic depth rate of the last block (rising linearly from 0)")
      ("drop-rate", po::value(&o.drop_rate)->default_value(o.drop_rate)->value_name("X"),
       "dropout after the position embedding, the attention's projection and each MLP linear (timm's drop_rate / "
       "proj_drop_rate; the pipeline ViT tutorial's 0.1)")
      ("attn-drop-rate", po::value(&o.attn_drop_rate)->default_value(o.attn_drop_rate)->value_name("X"),
       "dropout of the attention probabilities (timm's attn_drop_rate)")
      ("init", po::value(&o.init)->value_name("FILE|DIR"),
       "start from pretrained weights: a timm or Hugging Face ViTForImageClassification safetensors file, or a "
       "directory with model.safetensors or a sharded set (model.safetensors.index.json); another number of classes "
       "re-initialises the head, another image size resamples the position embeddings (as timm does); the "
       "architecture flags must otherwise match the checkpoint's (e.g. --model base)")
      ("activation-checkpointing", po::bool_switch(&o.activation_checkpointing),
       "recompute each layer's activations in backward instead of keeping them: less memory, one more forward "
       "pass per step (exact: the same numbers)");

  po::options_description data("Data", kHelpWidth, kHelpWidth / 2);
  data.add_options()
      ("dataset", po::value(&o.dataset)->default_value(o.dataset)->value_name("NAME"),
       "fashion-mnist | cifar10 | synthetic | imagefolder (JPEG/PNG files in DIR/train/<class>/ and "
       "DIR/val/<class>/, given by --data-dir)")
      ("data-dir", po::value(&o.data_dir)->value_name("DIR"),
       "directory holding the data set's files (default: $COLO_DATA_DIR/<data set>, else "
       "/usr/share/datasets/<data set>; required for imagefolder)")
      ("workers", po::value(&o.workers)->default_value(o.workers)->value_name("N"),
       "data loader threads per rank; 0: for imagefolder, this rank's share of the cores less one, else 1")
      ("decoder", po::value(&o.decoder)->default_value(o.decoder)->value_name("cpu|nvjpeg|auto"),
       "imagefolder: where JPEGs are decoded: cpu (libjpeg-turbo in the loader threads), nvjpeg (nvJPEG on the "
       "rank's GPU, then crop/resize/flip there: a few loader threads suffice; an error where it cannot run) or auto "
       "(nvjpeg where it can run, else cpu); the same crops, flips and labels either way")
      ("skip-unreadable", po::value(&o.skip_unreadable)->default_value(o.skip_unreadable)->value_name("0|1"),
       "imagefolder: 1 replaces an image that cannot be read by the next one and counts it; 0 stops with an "
       "error naming the file")
      ("mixup", po::value(&o.mixup_alpha)->default_value(o.mixup_alpha)->value_name("ALPHA"),
       "mixup on each training batch (timm's Mixup): lam ~ Beta(ALPHA, ALPHA), images and soft targets mixed with "
       "the batch flipped; --label-smoothing then smooths the soft targets; 0: off (DeiT: 0.8)")
      ("cutmix", po::value(&o.cutmix_alpha)->default_value(o.cutmix_alpha)->value_name("ALPHA"),
       "CutMix on each training batch: a box of area share 1 - lam, lam ~ Beta(ALPHA, ALPHA), pasted from the "
       "flipped batch; 0: off (DeiT: 1.0)")
      ("cutmix-minmax", po::value(&o.cutmix_minmax)->value_name("MIN,MAX"),
       "CutMix's box sides drawn as fractions of the image in [MIN, MAX) instead of from lam (turns CutMix on)")
      ("mixup-prob", po::value(&o.mixup_prob)->default_value(o.mixup_prob)->value_name("P"),
       "probability that a batch (pair, element) is mixed at all")
      ("mixup-switch-prob", po::value(&o.mixup_switch_prob)->default_value(o.mixup_switch_prob)->value_name("P"),
       "with both --mixup and --cutmix: probability of CutMix instead of mixup")
      ("mixup-mode", po::value(&o.mixup_mode)->default_value(o.mixup_mode)->value_name("MODE"),
       "batch | pair | elem: one lam (and box) per batch, per pair of images, or per image")
      ("mixup-off-epoch", po::value(&o.mixup_off_epoch)->default_value(o.mixup_off_epoch)->value_name("N"),
       "no mixing from epoch N on (counted from 0; the targets stay smoothed); 0: never off")
      ("synthetic-samples", po::value(&o.synthetic_samples)->default_value(o.synthetic_samples)->value_name("N"),
       "training images of --dataset synthetic (random; the test split has a fifth as many)")
      ("augment", po::value(&o.augment)->default_value(o.augment)->value_name("0|1"),
       "1: random crop and horizontal flip for training (the data set's default recipe; imagefolder: "
       "RandomResizedCrop and flip); off by default, as it slows learning down in the few epochs of the main job "
       "(use it for long runs)")
      ("rand-augment", po::value(&o.rand_augment)->value_name("CONFIG"),
       "with --augment 1: timm's RandAugment after the crop and flip, from timm's string (its --aa), e.g. "
       "rand-m9-mstd0.5-inc1 (DeiT's): m magnitude 0-10, n ops per image, p probability per op, mstd magnitude "
       "noise, inc1 increasing-severity ops")
      ("auto-augment", po::value(&o.auto_augment)->value_name("POLICY"),
       "with --augment 1: timm's AutoAugment policy instead: original (the AutoAugment paper's ImageNet policy; "
       "original-mstd0.5 adds magnitude noise)")
      ("reprob", po::value(&o.reprob)->default_value(o.reprob)->value_name("P"),
       "with --augment 1: timm's random erasing probability, on the normalised image; 0: off (DeiT: 0.25)")
      ("remode", po::value(&o.remode)->default_value(o.remode)->value_name("MODE"),
       "random erasing's values: const (0, the mean colour), rand (a normal value per channel) or pixel (per "
       "pixel, DeiT's)");

  po::options_description training("Training", kHelpWidth, kHelpWidth / 2);
  training.add_options()
      ("epochs", po::value(&o.epochs)->default_value(o.epochs)->value_name("N"), "passes over the training set")
      ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size)->value_name("N"),
       "GLOBAL batch: images per optimizer step over all data-parallel ranks; each rank's micro-batch is "
       "batch-size / (data-parallel size x grad-accum), which must be a whole number")
      ("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum)->value_name("N"),
       "micro-batches accumulated per optimizer step (the first N-1 without gradient synchronisation)")
      ("sync-every-microbatch", po::bool_switch(&o.sync_every_microbatch),
       "with --grad-accum: synchronise the gradients after every micro-batch, so gemini and ZeRO-2 keep "
       "no whole gradients between them (less memory, a little slower; --dry-run shows the difference)")
      ("optimizer", po::value(&o.optimizer)->default_value(o.optimizer)->value_name("NAME"),
       "adamw (colo's HybridAdam) | lamb | sgd (momentum 0.9)")
      ("lr", po::value(&o.lr)->default_value(o.lr, fmt::format("{}", o.lr))->value_name("X"),
       "peak learning rate")
      ("warmup", po::value(&o.warmup_epochs)->default_value(o.warmup_epochs, fmt::format("{}", o.warmup_epochs))
                     ->value_name("EPOCHS"),
       "linear warmup length in EPOCHS (fractions allowed; converted to optimizer steps, or whole epochs with "
       "--schedule-per epoch), then --schedule")
      ("schedule", po::value(&o.schedule)->default_value(o.schedule)->value_name("NAME"),
       "learning-rate schedule after the warmup: cosine (to 0 at the end of --epochs) | linear (to 0) | step (x "
       "--lr-gamma every --lr-step epochs) | multistep (x --lr-gamma at each of --lr-milestones)")
      ("schedule-per", po::value(&o.schedule_per)->default_value(o.schedule_per)->value_name("UNIT"),
       "step: the rate changes every optimizer step; epoch: only between epochs (the schedule counts epochs)")
      ("warmup-steps", po::value<int64_t>()->value_name("N"),
       "linear warmup length in optimizer steps, instead of --warmup's epochs (with --schedule-per step)")
      ("lr-step", po::value(&o.lr_step_epochs)->default_value(o.lr_step_epochs)->value_name("EPOCHS"),
       "--schedule step: epochs between decays")
      ("lr-milestones", po::value<std::string>()->value_name("E1,E2,..."),
       "--schedule multistep: the epochs at which the rate is multiplied by --lr-gamma")
      ("lr-gamma", po::value(&o.lr_gamma)->default_value(o.lr_gamma, fmt::format("{}", o.lr_gamma))->value_name("X"),
       "--schedule step / multistep: the factor of each decay")
      ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay, fmt::format("{}", o.weight_decay))
                           ->value_name("X"),
       "decoupled weight decay (adamw), trust-ratio weight decay (lamb), L2 (sgd)")
      ("label-smoothing", po::value(&o.label_smoothing)->default_value(o.label_smoothing)->value_name("X"),
       "label smoothing of the cross-entropy loss, in [0, 1)")
      ("clip", po::value(&o.clip)->default_value(o.clip)->value_name("X"),
       "maximum global gradient norm; 0: the plugin's setting (off unless --plugin-opt max_grad_norm=...)")
      ("max-steps", po::value(&o.max_steps)->default_value(o.max_steps)->value_name("N"),
       "stop after this many optimizer steps in all (counting the steps of a resumed run), evaluate and save; "
       "the learning-rate schedule still spans --epochs; 0: no limit")
      ("max-nonfinite-steps", po::value(&o.max_nonfinite_steps)->default_value(o.max_nonfinite_steps)->value_name("N"),
       "stop with an error when the loss is NaN or infinite for N consecutive optimizer steps on any rank (checked "
       "every N steps); the fp16 loss scaler's skipped steps do not count; 0: never stop")
      ("early-stop", po::value(&o.early_stop)->default_value(o.early_stop)->value_name("N"),
       "stop early (no error) when the test top-1 has not improved for N evaluations in a row (one per epoch), "
       "saving (with --save) and printing the final line as at the end; 0: never");

  po::options_description io("Checkpoints and logs", kHelpWidth, kHelpWidth / 2);
  io.add_options()
      ("save", po::value(&o.save_dir)->value_name("DIR"),
       "save the whole training state (model, optimizer, scheduler, random states, data position) into DIR at "
       "the end of every epoch and when stopping at --max-steps; DIR/latest always names a complete state. DIR is "
       "checked and locked at start-up: one run saves into it at a time, and a DIR that holds another run's state "
       "is refused (continue that run with --resume DIR, or give --overwrite)")
      ("overwrite", po::bool_switch(&o.overwrite),
       "with --save: DIR may hold the states of another run that has ended; they are removed once this run has "
       "saved its first own state (a run that fails before leaves them), never while that run is still saving")
      ("save-async", po::bool_switch(&o.save_async),
       "with --save: copy the state to host memory at the step (pinned memory on GPUs) and write it in the "
       "background while training goes on; the next save waits for it, a failed write stops the run at the next "
       "step, and DIR/latest moves only once every rank's files are in. Costs host memory for one copy of the "
       "state (--dry-run shows it)")
      ("resume", po::value(&o.resume_dir)->value_name("DIR"),
       "continue exactly from a state saved with --save (DIR, DIR/latest or one of its step-* directories); "
       "use the same data set, batch size and number of ranks; the weights (and an image folder's normalisation) "
       "are the saved run's, so --init does not go with it. 'auto': continue from --save's DIR when it holds a "
       "complete state of this run (the same settings), else start fresh, so that a first start and every restart "
       "(colo-run --max-restarts) run one command line; --init then serves the fresh start only")
      ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every)->value_name("STEPS"),
       "with --save: also save every STEPS optimizer steps (a failure then costs at most STEPS steps); 0: at epoch "
       "ends and --max-steps only")
      ("metrics", po::value(&o.metrics_file)->value_name("FILE"),
       "JSON lines on rank 0: one per logged step ({\"event\":\"train\",...}) and one per evaluation "
       "({\"event\":\"eval\",...}); a resumed run appends, any other truncates the file first")
      ("tensorboard", po::value(&o.tensorboard_dir)->value_name("DIR"),
       "TensorBoard event files in DIR (created if missing; `tensorboard --logdir DIR` shows them): every "
       "logged step's and evaluation's numbers as scalars (train/loss, train/lr, train/images_per_s, eval/top1, "
       "eval/loss, ...), written by rank 0; each run adds a file, a resumed one continues the curves")
      ("tensorboard-all-ranks", po::bool_switch(&o.tensorboard_all_ranks),
       "with --tensorboard: every rank writes its own run, DIR/rank<R>, with its own figures (the loss and "
       "accuracy are the world's on every rank; the throughput and loader waits are the rank's)")
      ("log-every", po::value(&o.log_every)->default_value(o.log_every)->value_name("N"),
       "optimizer steps between progress lines")
      ("eval-batch-size", po::value(&o.eval_batch_size)->default_value(o.eval_batch_size)->value_name("N"),
       "images per evaluation batch on each rank");
  // clang-format on

  po::options_description all(kHelpWidth, kHelpWidth / 2);
  all.add(general).add(model).add(data).add(training).add(io);
  return all;
}

void check_choice(std::vector<std::string>& problems, const char* option, const std::string& value,
                  const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    problems.push_back(fmt::format("--{} {}: not one of {}", option, value, join(choices, ", ")));
  }
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names = {"mini"};
  for (const auto& name : colo::nn::ViTConfig::preset_names()) names.push_back(name);
  names.emplace_back("resnet18");
  names.emplace_back("resnet50");
  names.emplace_back("custom");
  return names;
}

bool is_resnet(const std::string& model) { return model == "resnet18" || model == "resnet50"; }

TrainOptions parse_train_options(const std::vector<std::string>& command_line) {
  ExpandedConfig expanded = expand_config(command_line);
  const std::vector<std::string>& args = expanded.args;
  TrainOptions o;
  o.notes = std::move(expanded.notes);
  o.plugin_option_sources = std::move(expanded.plugin_option_sources);
  const po::options_description description = make_description(o);
  po::variables_map vm;
  std::vector<std::string> problems;
  try {
    const po::parsed_options parsed =
        po::command_line_parser(args)
            .options(description)
            .allow_unregistered()
            .style(po::command_line_style::default_style ^ po::command_line_style::allow_guessing)
            .run();
    bool after_unknown_option = false;
    for (const auto& token : po::collect_unrecognized(parsed.options, po::include_positional)) {
      if (token.rfind("-", 0) == 0) {
        problems.push_back(fmt::format("unknown option '{}'{}", token, suggestion(token, description)));
        after_unknown_option = token.find('=') == std::string::npos;
      } else if (after_unknown_option) {
        after_unknown_option = false;  // most likely the unknown option's value: not a problem of its own
      } else {
        problems.push_back(fmt::format("unexpected argument '{}': train_vit takes only options", token));
      }
    }
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    // A malformed value or a missing one ends parsing: report it with whatever was found so far.
    problems.push_back(e.what());
    throw usage_error(problems);
  }
  o.show_help = vm.count("help") > 0;
  if (o.show_help) return o;

  auto optional_int = [&](const char* name, std::optional<int64_t>& out) {
    if (!vm.count(name)) return;
    out = vm[name].as<int64_t>();
    if (*out <= 0) problems.push_back(fmt::format("--{} {}: must be positive", name, *out));
  };
  optional_int("image-size", o.image_size);
  optional_int("patch-size", o.patch_size);
  optional_int("embed-dim", o.embed_dim);
  optional_int("depth", o.depth);
  optional_int("heads", o.num_heads);
  if (vm.count("mlp-ratio")) {
    o.mlp_ratio = vm["mlp-ratio"].as<double>();
    if (!(*o.mlp_ratio > 0)) problems.push_back(fmt::format("--mlp-ratio {}: must be positive", *o.mlp_ratio));
  }

  const auto models = model_names();
  check_choice(problems, "model", o.model, models);
  if (o.model == "custom") {
    std::vector<std::string> missing;
    if (!o.patch_size) missing.emplace_back("--patch-size");
    if (!o.embed_dim) missing.emplace_back("--embed-dim");
    if (!o.depth) missing.emplace_back("--depth");
    if (!o.num_heads) missing.emplace_back("--heads");
    if (!missing.empty()) {
      problems.push_back(fmt::format("--model custom needs {} (or pick a preset: {})", join(missing, ", "),
                                     join(std::vector<std::string>(models.begin(), models.end() - 1))));
    }
  }
  check_choice(problems, "dataset", o.dataset, kDatasets);
  check_choice(problems, "precision", o.precision, kPrecisions);
  check_choice(problems, "optimizer", o.optimizer, kOptimizers);

  auto at_least = [&](const char* name, int64_t value, int64_t minimum, const char* what) {
    if (value < minimum) problems.push_back(fmt::format("--{} {}: {}", name, value, what));
  };
  at_least("epochs", o.epochs, 1, "must be at least 1");
  at_least("batch-size", o.batch_size, 1, "must be at least 1");
  at_least("grad-accum", o.grad_accum, 1, "must be at least 1 (1: no accumulation)");
  at_least("log-every", o.log_every, 1, "must be at least 1");
  at_least("max-steps", o.max_steps, 0, "must be >= 0 (0: no limit)");
  at_least("max-nonfinite-steps", o.max_nonfinite_steps, 0, "must be >= 0 (0: never stop)");
  at_least("early-stop", o.early_stop, 0, "must be >= 0 (0: never stop early)");
  at_least("threads", o.threads, 0, "must be >= 0 (0: cores / ranks on this node)");
  at_least("synthetic-samples", o.synthetic_samples, 5, "must be at least 5 (the test split gets a fifth)");
  at_least("eval-batch-size", o.eval_batch_size, 1, "must be at least 1");
  at_least("workers", o.workers, 0, "must be >= 0 (0: chosen from the cores)");
  if (o.dataset == "imagefolder" && o.data_dir.empty()) {
    problems.emplace_back(
        "--dataset imagefolder needs --data-dir DIR, a directory with train/ and val/, each holding one "
        "sub-directory of images per class");
  }
  try {
    // nvjpeg on a build without nvJPEG: said here, before anything is built, not deep in the loader.
    if (colo::data::parse_image_decoder(o.decoder) == colo::data::ImageDecoder::kNvjpeg &&
        !colo::data::nvjpeg_compiled()) {
      problems.emplace_back(
          "--decoder nvjpeg: this build of colo has no nvJPEG (a CPU build, or a CUDA build configured without "
          "nvjpeg.h and libnvjpeg: install the CUDA toolkit's nvJPEG or PyPI's nvidia-nvjpeg, or set "
          "COLO_NVJPEG_ROOT); --decoder auto decodes on the CPU where nvJPEG cannot run");
    }
  } catch (const std::invalid_argument& e) {
    problems.push_back(fmt::format("--decoder: {}", e.what()));
  }
  if (vm.count("init") && o.init.empty()) problems.emplace_back("--init: the file name is empty");
  if (vm.count("layout") && o.layout != "auto") {
    problems.push_back(fmt::format("--layout {}: the one value is auto (colo-plan --explain shows any other layout)",
                                   o.layout));
  }
  if ((!o.layout_cluster.empty() || !o.layout_profile.empty()) && o.layout.empty()) {
    problems.emplace_back("--layout-cluster and --layout-profile describe a plan: use them with --layout auto");
  }
  at_least("world-size", o.plan_world_size, 0, "must be >= 0 (0: the launcher's)");
  if (auto problem = colo::memory_size_problem(o.gpu_memory_gib, colo::kGibibytes, true); !problem.empty()) {
    problems.push_back(fmt::format("--gpu-memory-gib {}: {} (0: this machine's GPU)", o.gpu_memory_gib, problem));
  }
  if (!o.dry_run && (o.plan_world_size > 0 || o.gpu_memory_gib > 0)) {
    problems.emplace_back("--world-size and --gpu-memory-gib describe a plan: use them with --dry-run");
  }
  if (o.sync_every_microbatch && o.grad_accum == 1 && o.layout.empty()) {  // --layout auto picks the accumulation
    problems.emplace_back(
        "--sync-every-microbatch: with --grad-accum 1 every step is one micro-batch and synchronises already; "
        "set --grad-accum above 1 or drop it");
  }
  if (o.grad_accum >= 1 && o.batch_size >= 1 && o.batch_size % o.grad_accum != 0) {
    problems.push_back(
        fmt::format("--batch-size {} is not divisible by --grad-accum {}: the global batch is split "
                    "into grad-accum micro-batches",
                    o.batch_size, o.grad_accum));
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr)) problems.push_back(fmt::format("--lr {}: must be positive", o.lr));
  if (!(o.warmup_epochs >= 0) || o.warmup_epochs > static_cast<double>(o.epochs)) {
    problems.push_back(
        fmt::format("--warmup {}: must be between 0 and --epochs ({}) epochs", o.warmup_epochs, o.epochs));
  }
  check_choice(problems, "schedule", o.schedule, {"cosine", "linear", "step", "multistep"});
  check_choice(problems, "schedule-per", o.schedule_per, {"step", "epoch"});
  if (vm.count("warmup-steps")) {
    o.warmup_steps = vm["warmup-steps"].as<int64_t>();
    if (*o.warmup_steps < 0) problems.push_back(fmt::format("--warmup-steps {}: must be >= 0", *o.warmup_steps));
    if (o.schedule_per == "epoch") {
      problems.emplace_back("--warmup-steps with --schedule-per epoch: the schedule counts epochs; give --warmup EPOCHS");
    }
    if (!vm["warmup"].defaulted()) problems.emplace_back("--warmup and --warmup-steps: give one of them");
  }
  at_least("lr-step", o.lr_step_epochs, 1, "must be at least 1 (epochs between decays)");
  if (!(o.lr_gamma > 0) || !std::isfinite(o.lr_gamma)) problems.push_back(fmt::format("--lr-gamma {}: must be positive", o.lr_gamma));
  if (vm.count("lr-milestones")) {
    const auto text = vm["lr-milestones"].as<std::string>();
    std::stringstream list(text);
    bool valid = !text.empty();
    for (std::string item; valid && std::getline(list, item, ',');) {
      size_t used = 0;
      try {
        o.lr_milestones.push_back(std::stoll(item, &used));
      } catch (const std::exception&) {
        used = 0;
      }
      valid = used == item.size() && used > 0 && o.lr_milestones.back() >= 1 && o.lr_milestones.back() <= o.epochs &&
              (o.lr_milestones.size() < 2 || o.lr_milestones.back() > o.lr_milestones[o.lr_milestones.size() - 2]);
    }
    if (!valid) {
      problems.push_back(fmt::format("--lr-milestones {}: expected increasing epochs in [1, --epochs = {}], e.g. 30,60,90",
                                     text, o.epochs));
    }
  }
  if (o.schedule == "multistep" && o.lr_milestones.empty() && !vm.count("lr-milestones")) {
    problems.emplace_back("--schedule multistep needs --lr-milestones E1,E2,...");
  }
  if (!(o.weight_decay >= 0)) problems.push_back(fmt::format("--weight-decay {}: must be >= 0", o.weight_decay));
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) {
    problems.push_back(fmt::format("--label-smoothing {}: must be in [0, 1)", o.label_smoothing));
  }
  if (!(o.drop_path >= 0 && o.drop_path < 1)) {
    problems.push_back(fmt::format("--drop-path {}: must be in [0, 1)", o.drop_path));
  }
  if (!(o.drop_rate >= 0 && o.drop_rate < 1)) problems.push_back(fmt::format("--drop-rate {}: must be in [0, 1)", o.drop_rate));
  if (!(o.attn_drop_rate >= 0 && o.attn_drop_rate < 1)) {
    problems.push_back(fmt::format("--attn-drop-rate {}: must be in [0, 1)", o.attn_drop_rate));
  }
  try {
    (void)colo::data::erasing_mode_from_string(o.remode);
  } catch (const std::invalid_argument& e) {
    problems.push_back(fmt::format("--remode: {}", e.what()));
  }
  if (!o.rand_augment.empty() || !o.auto_augment.empty() || o.reprob != 0) {
    if (!o.augment) {
      problems.emplace_back(
          "--rand-augment, --auto-augment and --reprob act on the training augmentation: add "
          "--augment 1 (timm applies them after the random crop and flip)");
    }
    colo::data::Augmentation augmentation;
    augmentation.rand_augment = o.rand_augment;
    augmentation.auto_augment = o.auto_augment;
    augmentation.random_erasing.probability = o.reprob;
    try {
      // ImageTransform's checks (the strings, one policy, the probability), on an RGB image.
      (void)colo::data::ImageTransform({augmentation, 0, colo::data::Normalization{{0.5, 0.5, 0.5}, {1, 1, 1}}, 0},
                                       {3, 8, 8});
    } catch (const std::invalid_argument& e) {
      std::string message = e.what();
      const std::string prefix = "ImageTransform for 3x8x8 images: ";
      if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
      problems.push_back(fmt::format("--rand-augment / --auto-augment / --reprob: {}", message));
    }
  }
  try {
    if (const auto mixup = mixup_options(o)) (void)colo::data::Mixup(*mixup, 1);  // its checks
  } catch (const std::invalid_argument& e) {
    problems.push_back(fmt::format("--mixup / --cutmix: {}", e.what()));
  }
  if (!(o.clip >= 0)) problems.push_back(fmt::format("--clip {}: must be >= 0 (0: no clipping)", o.clip));
  if (vm.count("save") && o.save_dir.empty()) problems.emplace_back("--save: the directory name is empty");
  if (vm.count("resume") && o.resume_dir.empty()) problems.emplace_back("--resume: the directory name is empty");
  if (vm.count("metrics") && o.metrics_file.empty()) problems.emplace_back("--metrics: the file name is empty");
  if (vm.count("tensorboard") && o.tensorboard_dir.empty()) {
    problems.emplace_back("--tensorboard: the directory name is empty");
  }
  if (o.tensorboard_all_ranks && o.tensorboard_dir.empty()) {
    problems.emplace_back("--tensorboard-all-ranks says which ranks write TensorBoard files: give --tensorboard DIR");
  }
  if (o.overwrite && o.save_dir.empty()) problems.emplace_back("--overwrite says what --save may replace: give --save DIR");
  if (o.save_async && o.save_dir.empty()) problems.emplace_back("--save-async says how --save writes: give --save DIR");
  if (o.resume_dir == kResumeAuto && o.save_dir.empty()) {
    problems.emplace_back("--resume auto continues the state this run saves: give --save DIR (and --checkpoint-every)");
  }
  if (o.checkpoint_every < 0) {
    problems.push_back(fmt::format("--checkpoint-every {}: must be >= 0 (0: save at epoch ends only)", o.checkpoint_every));
  } else if (o.checkpoint_every > 0 && o.save_dir.empty()) {
    problems.emplace_back("--checkpoint-every says how often --save saves: give --save DIR");
  }
  if (!o.init.empty() && !o.resume_dir.empty() && o.resume_dir != kResumeAuto) {
    problems.push_back(fmt::format(
        "--init {} with --resume {}: a resumed run takes its weights from the saved state (and an image folder's "
        "normalisation from the saved run's --init), so --init would be ignored; drop --init",
        o.init, o.resume_dir));
  }

  if (vm.count("plugin-opt")) {
    for (const auto& assignment : vm["plugin-opt"].as<std::vector<std::string>>()) {
      try {
        auto [key, value] = colo::parse_option_assignment(assignment);
        if (!o.plugin_options.emplace(key, value).second) {
          problems.push_back(fmt::format("--plugin-opt {}: '{}' is given twice; keep one", assignment, key));
        }
      } catch (const std::invalid_argument& e) {
        problems.push_back(fmt::format("--plugin-opt {}: {}", assignment, e.what()));
      }
    }
  }
  // --precision is the plugin's precision option under a friendlier name: both may be given only
  // when they agree. It reaches the plugin only when the user gave it: a plugin of one's own need
  // not declare a precision option (the built-in ones default to fp32, as --precision does).
  if (auto it = o.plugin_options.find("precision"); it != o.plugin_options.end()) {
    if (vm["precision"].defaulted()) {
      o.precision = it->second;
    } else if (it->second != o.precision) {
      problems.push_back(fmt::format("--precision {} and --plugin-opt precision={} disagree; give one of them",
                                     o.precision, it->second));
    }
  } else if (!vm["precision"].defaulted()) {
    o.plugin_options["precision"] = o.precision;
  }

  if (!problems.empty()) throw usage_error(problems);
  return o;
}

std::optional<colo::data::Augmentation> timm_augmentation(const TrainOptions& o, const colo::data::Augmentation& base) {
  // The mode is checked even when erasing is off, so that a typo is not silently ignored.
  const auto mode = colo::data::erasing_mode_from_string(o.remode);
  if (o.rand_augment.empty() && o.auto_augment.empty() && o.reprob == 0) return std::nullopt;
  colo::data::Augmentation augmentation = base;
  augmentation.rand_augment = o.rand_augment;
  augmentation.auto_augment = o.auto_augment;
  augmentation.random_erasing.probability = o.reprob;
  augmentation.random_erasing.mode = mode;
  return augmentation;
}

std::optional<colo::data::MixupOptions> mixup_options(const TrainOptions& o) {
  std::optional<colo::data::CutmixMinMax> minmax;
  if (!o.cutmix_minmax.empty()) {
    const auto comma = o.cutmix_minmax.find(',');
    size_t used_min = 0, used_max = 0;
    try {
      if (comma == std::string::npos) throw std::invalid_argument("no comma");
      const std::string low = o.cutmix_minmax.substr(0, comma), high = o.cutmix_minmax.substr(comma + 1);
      minmax = colo::data::CutmixMinMax{std::stod(low, &used_min), std::stod(high, &used_max)};
      if (used_min != low.size() || used_max != high.size()) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      throw std::invalid_argument(
          fmt::format("--cutmix-minmax {}: expected two fractions MIN,MAX, e.g. 0.2,0.8", o.cutmix_minmax));
    }
  }
  if (!(o.mixup_alpha > 0) && !(o.cutmix_alpha > 0) && !minmax) {
    if (o.mixup_alpha < 0 || o.cutmix_alpha < 0) {
      throw std::invalid_argument(fmt::format("--mixup {} and --cutmix {} must be >= 0 (0: off)", o.mixup_alpha,
                                              o.cutmix_alpha));
    }
    return std::nullopt;
  }
  return colo::data::MixupOptions()
      .mixup_alpha(o.mixup_alpha)
      .cutmix_alpha(o.cutmix_alpha)
      .cutmix_minmax(minmax)
      .prob(o.mixup_prob)
      .switch_prob(o.mixup_switch_prob)
      .mode(colo::data::mix_mode_from_string(o.mixup_mode))
      .label_smoothing(o.label_smoothing)
      .off_epoch(o.mixup_off_epoch);
}

std::string plugin_option_origins(const TrainOptions& o) {
  std::string origins = "--precision / --plugin-opt";
  std::string from_file;
  for (const auto& [key, source] : o.plugin_option_sources) {
    if (o.plugin_options.count(key)) from_file += fmt::format("{}{} from {}", from_file.empty() ? "" : ", ", key, source);
  }
  return from_file.empty() ? origins : origins + "; " + from_file;
}

std::string usage() {
  TrainOptions defaults;
  std::ostringstream text;
  text << "Usage: colo-run --nproc-per-node N train_vit [options]\n"
          "       train_vit [options]                  (one process)\n\n"
          "Trains a Vision Transformer on an image classification data set through a colo plugin, evaluates\n"
          "test top-1 accuracy after every epoch (sharded over the data-parallel ranks) and prints\n"
          "'final test top-1: XX.XX%' as its last line.\n"
       << make_description(defaults)
       << "\nExamples:\n"
          "  colo-run --nproc-per-node 2 train_vit                           the main job (Fashion-MNIST)\n"
          "  colo-run --nproc-per-node 2 train_vit --precision bf16 --save ckpt\n"
          "  colo-run --nproc-per-node 2 train_vit --resume ckpt --save ckpt   continue where ckpt stopped\n"
          "  train_vit --dataset synthetic --model tiny --max-steps 20 --metrics m.jsonl\n"
          "  train_vit --dataset imagefolder --data-dir photos --model base --init vit-base/ --augment 1 --precision bf16\n"
          "Exit status: 0 on success, 2 for a bad command line or plugin option, 1 for any other failure.\n";
  return text.str();
}

colo::nn::ViTConfig make_vit_config(const TrainOptions& o, const colo::data::ImageShape& shape, int64_t num_classes) {
  colo::nn::ViTConfig config;
  if (is_resnet(o.model)) {
    // The ViT config carries only what the data pipeline reads: input size, channels, classes.
    const int64_t size = o.image_size.value_or(shape.height);
    return config.image_size(size).patch_size(size).in_channels(shape.channels).num_classes(num_classes);
  }
  if (o.model == "mini" || o.model == "custom") {
    if (shape.height != shape.width && !o.image_size) {
      throw UsageError(fmt::format("the {} data set's images are {}x{}, not square: pass --image-size", o.dataset,
                                   shape.height, shape.width));
    }
    config.image_size(shape.height);
    if (o.model == "mini") {
      config.patch_size(std::max<int64_t>(1, o.image_size.value_or(shape.height) / kMiniGrid))
          .embed_dim(kMiniDim)
          .depth(kMiniDepth)
          .num_heads(kMiniHeads)
          .mlp_ratio(kMiniMlpRatio);
    }
  } else {
    config = colo::nn::ViTConfig::preset(o.model);
  }
  if (o.image_size) config.image_size(*o.image_size);
  if (o.patch_size) config.patch_size(*o.patch_size);
  if (o.embed_dim) config.embed_dim(*o.embed_dim);
  if (o.depth) config.depth(*o.depth);
  if (o.num_heads) config.num_heads(*o.num_heads);
  if (o.mlp_ratio) config.mlp_ratio(*o.mlp_ratio);
  config.in_channels(shape.channels)
      .num_classes(num_classes)
      .drop_path_rate(o.drop_path)
      .drop_rate(o.drop_rate)
      .attn_drop_rate(o.attn_drop_rate);
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    throw UsageError(
        fmt::format("--model {} with the given flags is not a valid ViT (change --image-size, "
                    "--patch-size, --embed-dim or --heads): {}",
                    o.model, e.what()));
  }
  return config;
}

}  // namespace train_vit
