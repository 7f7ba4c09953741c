#pragma once

#include <colo/booster/plugin_options.h>
#include <colo/data/dataset.h>
#include <colo/data/mixup.h>
#include <colo/nn/vit_config.h>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace train_vit {

// The command line is wrong. main() prints the message and exits with status 2 (the shell's
// convention for usage errors), so scripts can tell a bad invocation from a failed run.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// --resume auto: continue --save's directory when it holds this run's state, else start fresh.
inline constexpr const char* kResumeAuto = "auto";

// Everything train_vit can be told. Defaults are the main job: Fashion-MNIST on a few CPU
// cores, >= 85% test top-1 in minutes (see README.md for the measurements behind them).
struct TrainOptions {
  bool show_help = false;

  // Plugin by name (libcolo_plugin_<name>.so on the search path) or path, and its options.
  // `precision` is always among plugin_options (from --precision unless given with --plugin-opt).
  std::string plugin = "torch_ddp";
  colo::PluginOptions plugin_options;
  std::string precision = "fp32";

  // "mini" (the default), a timm preset (tiny, small, base, large) or "custom". The
  // architecture flags override the chosen preset; "custom" needs patch size, width, depth, heads.
  std::string model = "mini";
  std::optional<int64_t> image_size;
  std::optional<int64_t> patch_size;
  std::optional<int64_t> embed_dim;
  std::optional<int64_t> depth;
  std::optional<int64_t> num_heads;
  std::optional<double> mlp_ratio;
  double drop_path = 0.0;
  // Dropout (timm's drop_rate / proj_drop_rate: after the position embedding, the attention's
  // projection and each MLP linear) and attention-probability dropout (attn_drop_rate).
  double drop_rate = 0.0;
  double attn_drop_rate = 0.0;
  // Recompute each layer's activations in backward instead of keeping them (LayerStack::
  // set_activation_checkpointing): less memory for one more forward pass.
  bool activation_checkpointing = false;

  std::string dataset = "fashion-mnist";
  std::string data_dir;  // empty: the library's default directory for the data set
  int64_t synthetic_samples = 10000;
  bool augment = false;  // random crop + flip: slower to learn, pays off only in long schedules
  // timm's policies and random erasing on top of --augment (issue 38; colo::data::Augmentation):
  // --rand-augment "rand-m9-mstd0.5-inc1" or --auto-augment "original", --reprob P, --remode MODE.
  std::string rand_augment;
  std::string auto_augment;
  double reprob = 0.0;
  std::string remode = "const";
  // Loader threads per rank (0: for an image folder, this rank's share of the cores less the
  // one that trains; 1 for the in-memory data sets).
  int64_t workers = 0;
  bool skip_unreadable = false;  // image folder: replace unreadable images instead of stopping
  // image folder: where JPEGs are decoded (colo::data::ImageDecoder): cpu, nvjpeg or auto.
  std::string decoder = "cpu";
  // Mixup / CutMix on each training batch (timm's Mixup; colo::data::MixupOptions): on when an alpha
  // is positive or cutmix_minmax is given. --label-smoothing then goes into the soft targets.
  double mixup_alpha = 0.0;
  double cutmix_alpha = 0.0;
  std::string cutmix_minmax;  // "MIN,MAX" or empty
  double mixup_prob = 1.0;
  double mixup_switch_prob = 0.5;
  std::string mixup_mode = "batch";
  int64_t mixup_off_epoch = 0;

  // Pretrained weights (timm or Hugging Face safetensors: a file or a directory) loaded into
  // the model before boosting; empty: trained from scratch.
  std::string init;

  int64_t epochs = 6;
  int64_t batch_size = 128;  // global: images per optimizer step over all data-parallel ranks
  int64_t grad_accum = 1;
  // Synchronise the gradients after every micro-batch (TrainerOptions::sync_every_microbatch):
  // less memory under gemini and ZeRO-2 for a little speed.
  bool sync_every_microbatch = false;
  std::string optimizer = "adamw";
  double lr = 2e-3;
  double warmup_epochs = 0.1;
  // The learning-rate schedule (schedule.h): cosine | linear | step | multistep, stepped per
  // optimizer "step" or per "epoch"; warmup in epochs (--warmup) or, per step, in steps.
  std::string schedule = "cosine";
  std::string schedule_per = "step";
  std::optional<int64_t> warmup_steps;
  int64_t lr_step_epochs = 1;          // step: decay every this many epochs
  std::vector<int64_t> lr_milestones;  // multistep: decay at these epochs
  double lr_gamma = 0.1;
  double weight_decay = 0.05;
  double label_smoothing = 0.0;
  double clip = 0.0;
  uint64_t seed = 42;

  std::string save_dir;
  // --save into a directory that holds another (ended) run's states: they are removed once this
  // run has published its own first state (not before: a run that fails first leaves them).
  bool overwrite = false;
  // --save in the background (colo::SaveOptions::async): the state is copied to host memory at the
  // step and written while training goes on.
  bool save_async = false;
  // A directory, or kResumeAuto: --save's directory when it holds this run's state, else a fresh
  // start (run_state.h, find_own_state).
  std::string resume_dir;
  // --checkpoint-every: with --save, also save every this many optimizer steps (0: epoch ends only).
  int64_t checkpoint_every = 0;
  std::string metrics_file;
  // --tensorboard DIR: TensorBoard event files (colo::TensorBoardHook) by rank 0, or by every rank
  // (each in DIR/rank<R>) with --tensorboard-all-ranks.
  std::string tensorboard_dir;
  bool tensorboard_all_ranks = false;
  int64_t log_every = 50;
  int64_t max_steps = 0;  // 0: no limit
  // Consecutive optimizer steps with a NaN or infinite loss that end the run with an error (0:
  // never). 10: a diverged run stops within 20 steps of diverging, while a brief overflow (an fp16
  // forward, a few bad batches) passes.
  int64_t max_nonfinite_steps = 10;
  // Evaluations in a row without a better test top-1 that end the run early, without an error (0: never).
  int64_t early_stop = 0;
  int64_t eval_batch_size = 500;
  int threads = 0;  // 0: this machine's cores / ranks on this node

  // --dry-run: print the plugin's memory plan for each rank (Booster::plan_memory) and exit, without
  // creating the model's state, a process group or a data loader. plan_world_size: the world to
  // plan for (0: the launcher's); gpu_memory_gib: plan for GPUs of that size (0: this machine's
  // GPU if it has one, else CPU ranks).
  bool dry_run = false;
  int plan_world_size = 0;
  double gpu_memory_gib = 0.0;

  // From --config: notes for the user (what of the file was left out), and the plugin options the
  // file set with where ("pp_size" -> "parallel.pp of FILE").
  std::vector<std::string> notes;
  std::map<std::string, std::string> plugin_option_sources;

  // --layout auto: the plugin, its options, activation checkpointing and accumulation are the
  // planner's choice (colo::planner::plan_layouts, auto_layout.h) for this model, batch and world,
  // with the cluster and profile files when given.
  std::string layout;
  std::string layout_cluster;
  std::string layout_profile;
};

// Parses the arguments after argv[0]. Throws UsageError listing every problem found (unknown
// options with the closest valid one, malformed or out-of-range values, conflicting options).
TrainOptions parse_train_options(const std::vector<std::string>& args);

// The --help text.
std::string usage();

// Where the plugin's options came from, for an error about them: "--precision / --plugin-opt", and
// each option a config file set with its key ("pp_size from parallel.pp of FILE").
std::string plugin_option_origins(const TrainOptions& options);

// The model for a data set whose images have `shape` and `num_classes` classes: the chosen
// preset with the architecture flags applied (for a ResNet, only the input size, channels and
// classes mean anything). Throws UsageError naming the flags to change when
// the result is not a valid ViT (e.g. an image size the patch size does not divide).
colo::nn::ViTConfig make_vit_config(const TrainOptions& options, const colo::data::ImageShape& shape,
                                    int64_t num_classes);

// The loader's mixing options from --mixup, --cutmix and their companions; nullopt when both are
// off. Throws UsageError for a malformed --cutmix-minmax or --mixup-mode.
std::optional<colo::data::MixupOptions> mixup_options(const TrainOptions& options);

// The data set's default augmentation with --rand-augment, --auto-augment, --reprob and --remode
// added; nullopt when none of them is given (the data set's default alone). Throws
// std::invalid_argument for a malformed string or mode.
std::optional<colo::data::Augmentation> timm_augmentation(const TrainOptions& options,
                                                          const colo::data::Augmentation& base);

// The names --model accepts ("custom" last).
std::vector<std::string> model_names();

// Whether --model names a ResNet (resnet18, resnet50): colo::nn::ResNet instead of the ViT, at the
// data set's image size (or --image-size); the ViT's architecture flags do not apply.
bool is_resnet(const std::string& model);

}  // namespace train_vit
