// train_vit: trains a Vision Transformer through a colo plugin (README.md). A user's program:
// it sees only colo's public headers.
//
//   colo-run --nproc-per-node 2 train_vit --plugin torch_ddp
#include <colo/booster/booster.h>
#include <colo/booster/cross_entropy.h>
#include <colo/booster/plugin_registry.h>
#include <colo/trainer/state_directory.h>
#include <colo/trainer/tensorboard_hook.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/checkpoint/atomic_file.h>
#include <colo/data/auto_augment.h>
#include <colo/data/cifar10.h>
#include <colo/data/cuda_work_queues.h>
#include <colo/data/data_loader.h>
#include <colo/data/dataset_error.h>
#include <colo/data/fashion_mnist.h>
#include <colo/data/image_folder.h>
#include <colo/data/synthetic_dataset.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/files/files.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/resnet.h>
#include <colo/nn/vision_transformer.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/optim/lamb.h>
#include <colo/env/elastic.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "auto_layout.h"
#include "compute_threads.h"
#include "dry_run.h"
#include "elastic.h"
#include "layout_checks.h"
#include "run_state.h"
#include "schedule.h"
#include "train_options.h"

namespace {

using train_vit::TrainOptions;
using train_vit::UsageError;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Rank 0 speaks for the job: progress on stdout, flushed per line (colo-run forwards whole lines).
class Console {
 public:
  explicit Console(bool master) : master_(master) {}
  template <typename... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    if (!master_) return;
    fmt::print(format, std::forward<Args>(args)...);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  bool master() const { return master_; }

 private:
  bool master_;
};

struct Datasets {
  std::shared_ptr<const colo::data::Dataset> train;
  std::shared_ptr<const colo::data::Dataset> test;
};

// The classes of DIR/train and DIR/val must be the same list: a label is an index into it.
void check_same_classes(const colo::data::ImageFolder& train, const colo::data::ImageFolder& test) {
  if (train.classes() == test.classes()) return;
  auto only_in = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    std::string out;
    int shown = 0;
    for (const auto& name : a) {
      if (std::find(b.begin(), b.end(), name) != b.end()) continue;
      if (shown++ == 5) return out + ", ...";
      out += (out.empty() ? "" : ", ") + name;
    }
    return out.empty() ? std::string("none") : out;
  };
  throw colo::data::DatasetError(fmt::format(
      "{} and {} hold different classes (only in train: {}; only in val: {}): a label is the class's index in the "
      "sorted list of sub-directories, so the two lists must be equal",
      train.root(), test.root(), only_in(train.classes(), test.classes()), only_in(test.classes(), train.classes())));
}

Datasets load_datasets(const TrainOptions& o, const std::optional<colo::data::Normalization>& normalization) {
  using colo::data::Split;
  if (o.dataset == "imagefolder") {
    // At the model's input size: --image-size, else the timm presets' 224.
    auto options = colo::data::ImageFolderOptions(o.image_size.value_or(224))
                       .skip_unreadable(o.skip_unreadable)
                       .decoder(colo::data::parse_image_decoder(o.decoder));
    if (normalization) options.normalization(*normalization);
    auto train = std::make_shared<colo::data::ImageFolder>(colo::files::join(o.data_dir, "train"), options);
    auto test = std::make_shared<colo::data::ImageFolder>(colo::files::join(o.data_dir, "val"), options);
    check_same_classes(*train, *test);
    return {train, test};
  }
  if (o.dataset == "fashion-mnist") {
    const auto dir =
        o.data_dir.empty() ? colo::data::FashionMnist::default_directory() : o.data_dir;
    return {std::make_shared<colo::data::FashionMnist>(Split::kTrain, dir),
            std::make_shared<colo::data::FashionMnist>(Split::kTest, dir)};
  }
  if (o.dataset == "cifar10") {
    const auto dir = o.data_dir.empty() ? colo::data::Cifar10::default_directory() : o.data_dir;
    return {std::make_shared<colo::data::Cifar10>(Split::kTrain, dir),
            std::make_shared<colo::data::Cifar10>(Split::kTest, dir)};
  }
  // Synthetic RGB images at the model's input size (32 for mini/custom, timm presets' 224).
  const bool small_model = o.model == "mini" || o.model == "custom" || train_vit::is_resnet(o.model);
  const int64_t size = o.image_size.value_or(small_model ? 32 : 224);
  const colo::data::ImageShape shape{3, size, size};
  return {std::make_shared<colo::data::SyntheticDataset>(o.synthetic_samples, shape, 10, o.seed),
          std::make_shared<colo::data::SyntheticDataset>(o.synthetic_samples / 5, shape, 10, o.seed + 1)};
}

// What --dry-run takes from the data set: its image shape and class count. The built-in sets' are
// known without their files (a plan needs no download); an image folder's classes are its
// sub-directories, read where the folder is there (a missing one is assumed, and said).
struct DataShape {
  colo::data::ImageShape image;
  int64_t classes = 0;
};

DataShape dry_run_data_shape(TrainOptions& o, const std::optional<colo::data::Normalization>& normalization) {
  if (o.dataset == "fashion-mnist") return {{1, 28, 28}, 10};
  if (o.dataset == "cifar10") return {{3, 32, 32}, 10};
  if (o.dataset == "imagefolder" && !colo::files::is_directory(colo::files::join(o.data_dir, "train"))) {
    const int64_t size = o.image_size.value_or(224);
    o.notes.push_back(fmt::format("note: {} is not there: the plan assumes {}x{} RGB images of 1000 classes",
                                  colo::files::join(o.data_dir, "train"), size, size));
    return {{3, size, size}, 1000};
  }
  const Datasets data = load_datasets(o, normalization);
  return {data.train->image_shape(), data.train->num_classes()};
}

// After each epoch's evaluation: how many unreadable images an image folder replaced so far
// (--skip-unreadable), before the state is saved. A hook of train_vit's own.
class UnreadableImagesNote : public colo::TrainerHook {
 public:
  explicit UnreadableImagesNote(Datasets data) : data_(std::move(data)) {}
  void end_epoch(colo::Trainer& trainer) override {
    for (const auto& dataset : {data_.train, data_.test}) {
      const auto& folder = static_cast<const colo::data::ImageFolder&>(*dataset);
      if (folder.num_skipped() == 0) continue;
      trainer.print(fmt::format("{}: {} unreadable image reads replaced so far (--skip-unreadable), e.g. {}",
                                folder.root(), folder.num_skipped(), folder.skipped_files().front()));
    }
  }

 private:
  Datasets data_;
};

// Whether fp16 training can run on CPUs: LibTorch 1.13 has almost no fp16 CPU kernels (its
// linear layers fail with "addmm_impl_cpu_ not implemented for 'Half'"), newer ones have them.
bool cpu_has_fp16_matmul() {
  try {
    const auto a = torch::ones({2, 2}, torch::kHalf);
    torch::mm(a, a);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o, colo::nn::LayerStack& model) {
  // One parameter group over model->parameters(): what the Booster's contract asks for (the
  // group's order is how plugins and checkpoints match optimizer state to parameters).
  if (o.optimizer == "adamw") {
    return std::make_shared<colo::optim::HybridAdam>(model.parameters(),
                                                     colo::optim::HybridAdamOptions(o.lr).weight_decay(o.weight_decay));
  }
  if (o.optimizer == "lamb") {
    return std::make_shared<colo::optim::Lamb>(model.parameters(),
                                               colo::optim::LambOptions(o.lr).weight_decay(o.weight_decay));
  }
  return std::make_shared<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(o.lr).momentum(0.9).weight_decay(o.weight_decay));
}

// Loader threads per rank: decoding an image folder takes every core the rank can spare (one
// trains); the in-memory data sets need one.
int64_t loader_workers(const TrainOptions& o, const colo::dist::Environment& env) {
  if (o.workers > 0) return o.workers;
  if (o.dataset != "imagefolder") return 1;
  return std::max(1, train_vit::available_cpus() / std::max(1, env.local_world_size) - 1);
}

colo::data::DataLoaderOptions train_loader_options(const TrainOptions& o, const colo::nn::ViTConfig& config,
                                                   const colo::data::Dataset& dataset, c10::Device device,
                                                   int64_t micro_batch, int64_t workers) {
  return colo::data::DataLoaderOptions(micro_batch)
      .shuffle(true)
      .drop_last(true)  // every optimizer step sees a full global batch
      .seed(o.seed)
      .augment(o.augment)
      .augmentation(train_vit::timm_augmentation(o, dataset.default_augmentation()))
      .mixup(train_vit::mixup_options(o))
      .image_size(config.image_size() == dataset.image_shape().height ? 0 : config.image_size())
      .num_workers(workers)
      .prefetch(std::max<int64_t>(2, workers + 1))
      .device(device);
}

// The normalisation of an image folder: the pretrained weights' own where their directory says
// it, else the data set's default (ImageNet's).
std::optional<colo::data::Normalization> pretrained_normalization(const std::optional<colo::nn::PretrainedWeights>& w) {
  if (!w || w->mean.size() != 3 || w->std.size() != 3) return std::nullopt;
  return colo::data::Normalization{w->mean, w->std};
}

int run(TrainOptions o, const colo::dist::Environment& env) {
  const auto job_start = Clock::now();
  // Before any CUDA work: nvJPEG needs more hardware queues than a context gets by default.
  if (o.dataset == "imagefolder" && o.decoder != "cpu") colo::data::widen_work_queues_for_nvjpeg();
  const int threads = o.threads > 0 ? o.threads : std::max(1, train_vit::available_cpus() / env.local_world_size);
  train_vit::set_compute_threads(threads);
  // Under colo-run --elastic the run is planned (and recorded) for the largest world.
  const train_vit::ElasticRun elastic = train_vit::elastic_run(env);
  // The run record holds the command line's accumulation: --layout auto and an elastic shrink
  // change the one a run takes, and a restart must still recognise its own state.
  const int64_t command_line_grad_accum = o.grad_accum;

  // Before the rendezvous: a state that is not there, a directory this run cannot save into (rank
  // 0 opens and locks it for the run), missing weights, a missing data set or an impossible model
  // fail at once, on their own.
  std::optional<train_vit::ResumedState> resumed;
  if (o.resume_dir == train_vit::kResumeAuto) {
    resumed = train_vit::find_own_state(o, elastic.planned_world);
    if (resumed) o.init.clear();  // the saved run started from it (checked); its weights replace --init's
  } else if (!o.resume_dir.empty()) {
    resumed = train_vit::find_resumed_state(o.resume_dir);
  }
  std::shared_ptr<colo::StateDirectory> save_directory;
  if (!o.save_dir.empty() && env.rank == 0 && !o.dry_run) save_directory = train_vit::open_save_directory(o, resumed);
  std::optional<colo::nn::PretrainedWeights> pretrained;
  train_vit::RunOrigin origin;  // --init's, or the resumed run's (the two are exclusive)
  std::vector<std::string> resume_notes;
  if (!o.init.empty()) {
    pretrained = colo::nn::read_pretrained(o.init);
    origin = {colo::files::canonical_or_absolute(o.init), pretrained_normalization(pretrained)};
  }
  if (resumed) {
    origin = train_vit::resumed_origin(o, *resumed, resume_notes);
    const auto changes = train_vit::check_resume(o, elastic.planned_world, origin, *resumed);
    resume_notes.insert(resume_notes.end(), changes.begin(), changes.end());
  }
  const auto& normalization = origin.normalization;
  if (o.dry_run) {
    const DataShape shape = dry_run_data_shape(o, o.dataset == "imagefolder" ? normalization : std::nullopt);
    colo::nn::ViTConfig config = train_vit::make_vit_config(o, shape.image, shape.classes);
    if (!o.layout.empty()) train_vit::apply_planned_layout(o, config, env);
    return train_vit::print_memory_plan(o, config, env);
  }
  const Datasets data = load_datasets(o, o.dataset == "imagefolder" ? normalization : std::nullopt);
  colo::nn::ViTConfig config = train_vit::make_vit_config(o, data.train->image_shape(), data.train->num_classes());
  // Hugging Face's ViTs normalise with eps 1e-12, timm's with 1e-6.
  if (pretrained && pretrained->hugging_face) config.norm_eps(1e-12);
  const int64_t workers = loader_workers(o, env);
  if (!o.layout.empty()) train_vit::apply_planned_layout(o, config, env);

  std::shared_ptr<colo::Plugin> plugin;
  try {
    plugin = colo::PluginRegistry::global().create(o.plugin, o.plugin_options);
  } catch (const colo::PluginError& e) {
    throw UsageError(fmt::format("--plugin {}: {}", o.plugin, e.what()));
  } catch (const std::invalid_argument& e) {
    train_vit::throw_layout_error(elastic, fmt::format("--plugin {} rejected its options ({}): {}", o.plugin,
                                                       train_vit::plugin_option_origins(o), e.what()));
  }
  const auto world = plugin->context().world;
  const int rank = world ? world->rank() : 0;
  const int world_size = world ? world->size() : 1;
  const c10::Device device = plugin->context().device;
  const Console console(rank == 0);
  colo::Booster booster(plugin);
  if (o.precision == "fp16" && device.is_cpu() && !cpu_has_fp16_matmul()) {
    throw UsageError(
        "--precision fp16: this LibTorch has no fp16 matrix multiply on CPUs (Debian's 1.13 has not), and "
        "there is no GPU here; train in bf16 or fp32 on CPUs, or in fp16 on GPUs");
  }

  torch::manual_seed(o.seed);  // the same initial weights on every rank
  auto model = train_vit::is_resnet(o.model)
                   ? colo::nn::make_resnet(colo::nn::ResNetConfig::preset(o.model)
                                               .in_channels(config.in_channels())
                                               .num_classes(config.num_classes()))
                   : colo::nn::make_vision_transformer(config);
  if (o.activation_checkpointing) model->set_activation_checkpointing(true);
  int64_t num_params = 0;
  for (const auto& p : model->parameters()) num_params += p.numel();
  colo::nn::FineTuneReport fine_tune;
  if (pretrained) {
    try {
      fine_tune = colo::nn::load_pretrained(*model, *pretrained);
    } catch (const std::invalid_argument& e) {
      throw UsageError(fmt::format(
          "--init {}: {}\nChoose the model the checkpoint holds (--model, --image-size, --patch-size, ...).", o.init,
          e.what()));
    }
    pretrained.reset();  // the model holds the values now
  }
  auto optimizer = make_optimizer(o, *model);
  // Labels with --label-smoothing; under --mixup / --cutmix the loader's soft targets (smoothed already).
  const colo::Criterion criterion = colo::cross_entropy_criterion(o.label_smoothing);

  // The per-rank micro-batch depends on the data-parallel size, which only the plugin knows
  // (tensor- and pipeline-parallel ranks share batches): guess world size, check after boost.
  const int64_t per_step_guess = o.batch_size / o.grad_accum;
  auto loader = std::make_shared<colo::data::DataLoader>(
      data.train,
      train_loader_options(o, config, *data.train, device, std::max<int64_t>(1, per_step_guess / world_size),
                           workers));
  colo::Boosted b;
  try {
    b = booster.boost(model, optimizer, criterion, loader);
  } catch (const std::invalid_argument& e) {
    // A layout that does not fit this model or data (too few layers for the stages, say), or a
    // precision this machine cannot run (fp8 without float8 products: the message says why).
    const std::string what = e.what();
    if (what.rfind("precision=fp8:", 0) == 0) throw UsageError(fmt::format("--precision fp8: {}", what.substr(15)));
    train_vit::throw_layout_error(elastic, fmt::format("--plugin {} cannot train this model so: {}", o.plugin, what));
  }
  // precision=fp8: which linear layers multiply in float8 (the plugin turned them on).
  const std::string fp8_line = o.precision == "fp8" ? colo::nn::fp8_coverage(*model).summary() : "";
  // A pipeline stage keeps its own layers; the rest of the stack is freed with the last reference.
  model.reset();
  optimizer.reset();
  // The data-parallel size and rank are the plugin's layout's (pipeline and tensor-parallel
  // peers share batches); a plugin without a layout runs on one replica.
  const int64_t dp_size = b.mesh ? b.mesh->size(colo::dist::MeshAxis::kDp) : 1;
  const int64_t dp_rank = b.mesh ? b.mesh->coordinate(colo::dist::MeshAxis::kDp) : 0;
  // In a world colo-run --elastic shrank, more accumulation keeps the planned global batch.
  std::vector<std::string> elastic_notes;
  o.grad_accum = train_vit::elastic_grad_accum(o, elastic, dp_size, plugin->supports_pipeline(), elastic_notes);
  // What --dry-run checks too, through the same function.
  const int64_t micro_batch = [&] {
    try {
      return train_vit::check_layout(o, dp_size, plugin->supports_pipeline());
    } catch (const UsageError& e) {
      train_vit::throw_layout_error(elastic, e.what());
    }
  }();
  if (b.dataloader->options().batch_size() != micro_batch) {
    // Same object the plugin holds, rebuilt with the right batch (and the plugin's sharding).
    *b.dataloader = colo::data::DataLoader(
        data.train,
        train_loader_options(o, config, *data.train, device, micro_batch, workers).num_replicas(dp_size).rank(dp_rank));
  }
  colo::data::DataLoader& train_loader = *b.dataloader;
  const int64_t steps_per_epoch = train_loader.num_batches() / o.grad_accum;
  if (steps_per_epoch == 0) {
    throw UsageError(fmt::format("--batch-size {} is larger than the training set ({} images): lower it", o.batch_size,
                                 data.train->size()));
  }
  const int64_t total_steps = o.epochs * steps_per_epoch;
  // Built after boosting because its length counts this rank's batches, known once the plugin
  // has sharded the loader. b.optimizer->optimizer() is the optimizer built above, which every
  // plugin steps (under mixed precision with its fp32 masters put in the same groups).
  const train_vit::Schedule schedule = train_vit::make_schedule(o, b.optimizer->optimizer(), steps_per_epoch);
  b.lr_scheduler = schedule.scheduler;
  if (o.clip > 0) b.optimizer->set_max_grad_norm(o.clip);  // else the plugin's own setting stands

  colo::data::DataLoader test_loader(data.test, colo::data::DataLoaderOptions(o.eval_batch_size)
                                                    .num_replicas(dp_size)
                                                    .rank(dp_rank)
                                                    .image_size(train_loader.options().image_size())
                                                    .num_workers(workers)
                                                    .prefetch(std::max<int64_t>(2, workers + 1))
                                                    .device(device));

  int64_t global_step = 0;
  std::string resumed_from;
  if (resumed) {
    const colo::TrainingProgress progress = booster.load_state(b, resumed->directory);
    global_step = progress.global_step;
    resumed_from = fmt::format("resumed from {}: epoch {}, step {}", resumed->directory,
                               std::min(progress.data.epoch + 1, o.epochs), global_step);
  }
  // Opened before anything is printed: a file that cannot be written stops the run at once.
  std::shared_ptr<colo::MetricsLogHook> metrics;
  if (console.master() && !o.metrics_file.empty())
    metrics = std::make_shared<colo::MetricsLogHook>(o.metrics_file, resumed.has_value());
  std::shared_ptr<colo::TensorBoardHook> tensorboard;
  if (!o.tensorboard_dir.empty()) {
    try {
      tensorboard = std::make_shared<colo::TensorBoardHook>(
          o.tensorboard_dir, colo::TensorBoardOptions().rank(env.rank).every_rank(o.tensorboard_all_ranks));
    } catch (const colo::TensorBoardError& e) {
      throw std::runtime_error(fmt::format("--tensorboard (rank {}): {}", env.rank, e.what()));
    }
  }

  const int64_t stop_step = o.max_steps > 0 ? std::min(o.max_steps, total_steps) : total_steps;
  console.print("train_vit: plugin {} ({}), {} rank{} ({}) on {}, {} thread{} per rank", plugin->name(), o.precision,
                world_size, world_size == 1 ? "" : "s",
                b.mesh ? b.mesh->describe() : fmt::format("data-parallel {}", dp_size), device.str(), threads,
                threads == 1 ? "" : "s");
  if (train_vit::is_resnet(o.model)) {
    console.print("model: {} image {}, {:.2f} M parameters", o.model, config.image_size(),
                  static_cast<double>(num_params) / 1e6);
  } else {
    const bool regularised = config.drop_rate() > 0 || config.attn_drop_rate() > 0 || config.drop_path_rate() > 0;
    console.print("model: ViT image {} patch {} width {} depth {} heads {} MLP ratio {:g}, {:.2f} M parameters{}",
                  config.image_size(), config.patch_size(), config.embed_dim(), config.depth(), config.num_heads(),
                  config.mlp_ratio(), static_cast<double>(num_params) / 1e6,
                  regularised ? fmt::format("; dropout {:g}, attention dropout {:g}, drop path {:g}", config.drop_rate(),
                                            config.attn_drop_rate(), config.drop_path_rate())
                              : "");
  }
  if (!fp8_line.empty()) console.print("{}", fp8_line);
  if (!o.init.empty()) {
    console.print("init: {}{}", o.init, fine_tune.notes.empty() ? " (every tensor as it was)" : "");
    for (const auto& note : fine_tune.notes) console.print("  {}", note);
  }
  if (o.dataset == "imagefolder") {
    const auto& folder = static_cast<const colo::data::ImageFolder&>(*data.train);
    const auto& n = folder.default_normalization();
    console.print("data: image folder {} ({} classes) at {}x{}, normalised with mean ({:g}, {:g}, {:g}) std ({:g}, {:g}, "
                  "{:g}){}; {} loader thread{} per rank",
                  o.data_dir, folder.num_classes(), folder.options().image_size(), folder.options().image_size(),
                  n.mean[0], n.mean[1], n.mean[2], n.std[0], n.std[1], n.std[2],
                  normalization ? " (the pretrained weights')" : " (ImageNet's)", workers, workers == 1 ? "" : "s");
    console.print("data: {}", folder.decoder_in_use(train_loader.options().device()));
    for (const auto& dataset : {data.train, data.test}) {
      for (const auto& note : static_cast<const colo::data::ImageFolder&>(*dataset).scan_notes()) {
        console.print("data: {}", note);  // what the scan left out (link cycles, broken links)
      }
    }
  }
  console.print("data: {}, {} training / {} test images; global batch {} = {} x {} per rank x {} accumulation",
                o.dataset, data.train->size(), data.test->size(), o.batch_size, dp_size, micro_batch, o.grad_accum);
  for (const auto& note : elastic_notes) console.print("{}", note);
  if (const auto& a = train_loader.options().augmentation(); a && o.augment) {
    if (!a->rand_augment.empty()) {
      console.print("augment: {}", colo::data::AugmentPolicy::rand_augment(a->rand_augment).description());
    }
    if (!a->auto_augment.empty()) {
      console.print("augment: {}", colo::data::AugmentPolicy::auto_augment(a->auto_augment).description());
    }
    if (a->random_erasing.enabled()) {
      console.print("augment: random erasing with probability {:g}, mode {}", a->random_erasing.probability,
                    colo::data::to_string(a->random_erasing.mode));
    }
  }
  if (const auto& m = train_loader.options().mixup()) {
    console.print("mixup: alpha {:g}, cutmix alpha {:g}{}, prob {:g}, switch prob {:g}, per {}, label smoothing {:g} in "
                  "the soft targets{}",
                  m->mixup_alpha(), m->effective_cutmix_alpha(),
                  m->cutmix_minmax() ? fmt::format(" (box sides in [{:g}, {:g}))", m->cutmix_minmax()->min,
                                                   m->cutmix_minmax()->max)
                                     : "",
                  m->prob(), m->switch_prob(), colo::data::to_string(m->mode()), m->label_smoothing(),
                  m->off_epoch() > 0 ? fmt::format(", off from epoch {}", m->off_epoch() + 1) : "");
  }
  console.print("schedule: {} epochs x {} steps = {} steps{}; {} lr {:g}, {}", o.epochs, steps_per_epoch, total_steps,
                stop_step < total_steps ? fmt::format(" (stopping at {})", stop_step) : "", o.optimizer, o.lr,
                schedule.description);
  for (const auto& note : o.notes) console.print("{}", note);
  if (tensorboard) {
    console.print("tensorboard: {}", o.tensorboard_all_ranks
                                         ? fmt::format("every rank writes its own run, {}/rank<R>", o.tensorboard_dir)
                                         : tensorboard->path());
  }
  if (!resumed_from.empty()) console.print("{}", resumed_from);
  for (const auto& note : resume_notes) console.print("{}", note);

  // The loop is the Trainer's; what train_vit logs, schedules, saves and checks is its hooks'.
  std::vector<std::shared_ptr<colo::TrainerHook>> hooks = {
      std::make_shared<colo::LRSchedulerHook>(nullptr, schedule.per_epoch), std::make_shared<colo::LossHook>(),
      std::make_shared<colo::AccuracyHook>(), std::make_shared<colo::ThroughputHook>()};
  if (metrics) hooks.push_back(metrics);
  if (tensorboard) hooks.push_back(tensorboard);
  if (o.dataset == "imagefolder") hooks.push_back(std::make_shared<UnreadableImagesNote>(data));
  if (!o.save_dir.empty()) {
    TrainOptions recorded = o;  // as given: every attempt of a run records the same run
    recorded.grad_accum = command_line_grad_accum;
    const auto saving = colo::CheckpointOptions()
                            .every_steps(o.checkpoint_every)
                            .extra_files({{train_vit::kRunRecordFile,
                                           train_vit::run_record(recorded, elastic.planned_world, origin).dump(2) + "\n"}})
                            .save(colo::SaveOptions().async(o.save_async));
    // Rank 0 holds the directory it opened at start-up; the other ranks write into its staging.
    hooks.push_back(save_directory ? std::make_shared<colo::CheckpointHook>(save_directory, saving)
                                   : std::make_shared<colo::CheckpointHook>(o.save_dir, saving));
  }
  hooks.push_back(std::make_shared<colo::NonFiniteLossHook>(
      colo::NonFiniteLossOptions()
          .max_steps(o.max_nonfinite_steps)
          .limit_name("--max-nonfinite-steps")
          .advice("Lower --lr, lengthen --warmup, clip gradients (--clip), or train in another --precision")));
  if (o.early_stop > 0) {
    hooks.push_back(std::make_shared<colo::EarlyStoppingHook>(colo::EarlyStoppingOptions().patience(o.early_stop)));
  }

  colo::Trainer trainer(booster, b,
                        colo::TrainerOptions()
                            .grad_accum(o.grad_accum)
                            .sync_every_microbatch(o.sync_every_microbatch)
                            .log_every(o.log_every)
                            .max_steps(o.max_steps)
                            .start_step(global_step)
                            .show_loader_speed(o.dataset == "imagefolder")
                            .started(job_start));
  const colo::FitResult fit = trainer.fit(train_loader, o.epochs, &test_loader, 1, hooks);

  console.print("trained {} steps in {}, {} in all{}", fit.steps, colo::format_duration(fit.train_seconds),
                colo::format_duration(seconds_since(job_start)),
                fit.stopped ? fmt::format(" (stopped early: {})", fit.stop_reason) : "");
  // The last line: what the job achieved.
  console.print("final test top-1: {:.2f}%", 100.0 * fit.last_evaluation.number("top1"));
  return 0;
}

void print_error(const std::string& message, bool usage) {
  std::fprintf(stderr, "train_vit: error: %s\n%s", message.c_str(),
               usage ? "Run 'train_vit --help' for the options.\n" : "");
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  // Every rank reports its own failure, a bad command line included, although all ranks find the
  // same problems: colo-run stops the job as soon as one rank exits, and the first to exit, whose
  // reason the user must see, need not be rank 0. (colo-run prefixes each line with its rank.)
  colo::dist::Environment env;
  try {
    env = colo::dist::Environment::from_env();
  } catch (const std::exception& e) {
    print_error(e.what(), false);
    return 2;
  }
  TrainOptions options;
  try {
    options = train_vit::parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    print_error(e.what(), true);
    return 2;
  }
  if (options.show_help) {
    if (env.rank == 0) std::fputs(train_vit::usage().c_str(), stdout);
    return 0;
  }
  try {
    return run(options, env);
  } catch (const train_vit::WorldSizeUnusable& e) {
    // colo-run --elastic reads the note and tries a smaller world.
    colo::env::leave_elastic_note(env.run_reports, colo::env::ElasticNote::kWorldSizeUnusable, env.rank, e.what());
    print_error(e.what(), false);
    return 2;
  } catch (const UsageError& e) {
    print_error(e.what(), true);
    return 2;
  } catch (const c10::Error& e) {
    print_error(e.what_without_backtrace(), false);  // LibTorch's C++ backtrace helps no user
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what(), false);
    return 1;
  }
}
