#include <colo/booster/booster.h>
#include <colo/engine/memory_size.h>
#include <colo/booster/plugin_registry.h>
#include <colo/checkpoint/atomic_file.h>
#include <colo/checkpoint/checkpoint_error.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/compat/torch_compat.h>
#include <colo/data/data_loader.h>
#include <colo/dist/logger.h>
#include <colo/dist/process_group.h>
#include <colo/env/variables.h>
#include <colo/optim/lr_scheduler.h>

#include <colo/files/files.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "async_save_plan.h"
#include "background_writer.h"
#include "deferred_writes.h"

namespace colo {

namespace {

int world_rank(const Plugin& plugin) { return plugin.context().world ? plugin.context().world->rank() : 0; }
int world_size(const Plugin& plugin) { return plugin.context().world ? plugin.context().world->size() : 1; }

constexpr const char* kTrainingStateFile = "training_state.json";

std::string rng_file(const std::string& dir, int rank) {
  return files::join(dir, fmt::format("rng_rank{}.safetensors", rank));
}

nlohmann::json progress_json(const TrainingProgress& progress, int world_size, const std::string& plugin) {
  return {{"epoch", progress.epoch},
          {"global_step", progress.global_step},
          {"data_epoch", progress.data.epoch},
          {"data_next_batch", progress.data.next_batch},
          {"data_images_per_batch", progress.data.images_per_batch},
          {"world_size", world_size},
          {"plugin", plugin}};
}

std::shared_ptr<Plugin> require_plugin(std::shared_ptr<Plugin> plugin) {
  if (!plugin) throw std::invalid_argument("Booster needs a plugin; create one with colo::PluginRegistry");
  return plugin;
}

}  // namespace

MemoryPlan Booster::plan_memory(const std::string& plugin, const PluginOptions& options,
                                const MemoryPlanInputs& inputs) {
  if (inputs.device_memory_bytes()) {
    const auto bytes = *inputs.device_memory_bytes();
    if (auto problem = memory_size_problem(static_cast<double>(bytes), kBytes, false); !problem.empty()) {
      throw std::invalid_argument(fmt::format("MemoryPlanInputs::device_memory_bytes {} {}", bytes, problem));
    }
  }
  auto plan = PluginRegistry::global().plan_memory(plugin, options, inputs);
  if (inputs.async_checkpoint()) memory_planning::add_async_save_copy(plan, options, inputs);
  return plan;
}

Booster::Booster(std::shared_ptr<Plugin> plugin)
    : plugin_(require_plugin(std::move(plugin))), writer_(std::make_shared<detail::BackgroundWriter>()) {}

Boosted Booster::boost(std::shared_ptr<nn::LayerStack> model, std::shared_ptr<torch::optim::Optimizer> optimizer,
                       Criterion criterion, std::shared_ptr<data::DataLoader> dataloader,
                       std::shared_ptr<optim::LRScheduler> lr_scheduler) {
  if (!model) throw std::invalid_argument("Booster::boost: the model is null");
  if (!optimizer) throw std::invalid_argument("Booster::boost: the optimizer is null");
  if (!criterion) throw std::invalid_argument("Booster::boost: the criterion is empty");
  auto boosted = plugin_->boost({std::move(model), std::move(optimizer), std::move(criterion), std::move(dataloader),
                                 std::move(lr_scheduler)});
  if (!boosted.mesh) boosted.mesh = plugin_->context().mesh;
  // The Trainer and user code read the data-parallel size and rank from the mesh; a plugin that
  // leaves it unset would hand them a null pointer far from the cause, so it is named here.
  if (!boosted.mesh) {
    throw std::runtime_error(fmt::format(
        "plugin '{}' gave Booster::boost no mesh: set Boosted::mesh in its boost() (or PluginContext::mesh in its "
        "constructor) to its layout; a plugin that trains on one rank sets a one-rank mesh, "
        "std::make_shared<colo::dist::ProcessGroupMesh>(context().world, colo::dist::dp_pp_tp_shape(1, 1, 1)) "
        "(docs/writing_a_plugin.md)",
        plugin_->name()));
  }
  return boosted;
}

void Booster::backward(const torch::Tensor& loss, OptimizerWrapper& optimizer) { plugin_->backward(loss, optimizer); }

NoSyncGuard Booster::no_sync(ModelWrapper& model, OptimizerWrapper& optimizer) {
  return plugin_->no_sync(model, optimizer);
}

PipelineResult Booster::execute_pipeline(const torch::Tensor& inputs, const torch::Tensor& targets,
                                         ModelWrapper& model, const Criterion& criterion,
                                         OptimizerWrapper& optimizer, const PipelineOptions& options) {
  return plugin_->execute_pipeline(inputs, targets, model, criterion, optimizer, options);
}

void Booster::save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options) {
  plugin_->checkpoint_io().save_model(model, dir, options);
}
void Booster::load_model(ModelWrapper& model, const std::string& dir) { plugin_->checkpoint_io().load_model(model, dir); }
void Booster::save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options) {
  plugin_->checkpoint_io().save_optimizer(optimizer, dir, options);
}
void Booster::load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) {
  plugin_->checkpoint_io().load_optimizer(optimizer, dir);
}
void Booster::save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir) {
  plugin_->checkpoint_io().save_lr_scheduler(scheduler, dir);
}
void Booster::load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir) {
  plugin_->checkpoint_io().load_lr_scheduler(scheduler, dir);
}

void Booster::save_state(const Boosted& boosted, const TrainingProgress& progress, const std::string& dir,
                         const SaveOptions& options, std::function<void()> when_complete) {
  // The next save waits for the previous one (and throws its error): one host copy at a time.
  wait_for_save();
  const auto marker = files::join(dir, kTrainingStateFile);
  const auto& world = plugin_->context().world;
  const int rank = world_rank(*plugin_);
  // Saving over an earlier state: its marker goes first, durably, and no rank writes before it
  // is gone. A save that stops halfway then leaves a directory load_state refuses, never an old
  // marker vouching for a mix of old and new files. An asynchronous save's ranks say through their
  // RNG files that they are done: an old one goes too.
  if (rank == 0) checkpoint::remove_file_durably(marker);
  if (options.async()) checkpoint::remove_file_durably(rng_file(dir, rank));
  if (world && world_size(*plugin_) > 1) world->barrier().wait();
  if (options.async()) return write_state_async(boosted, progress, dir, options, std::move(when_complete));

  // Each rank's random state goes to its own file: dropout and augmentation draw from it.
  files::create_directories(dir);
  checkpoint::NamedTensors rng{{"cpu", at::detail::getDefaultCPUGenerator().get_state()}};
  if (plugin_->context().device.is_cuda()) rng.emplace_back("cuda", compat::cuda_rng_state(plugin_->context().device));
  checkpoint::write_safetensors(rng_file(dir, rank), rng);

  save_model(*boosted.model, dir, options);
  save_optimizer(*boosted.optimizer, dir, options);
  if (boosted.lr_scheduler) save_lr_scheduler(*boosted.lr_scheduler, dir);
  if (rank == 0) {
    // Written last: its presence marks a complete training state. Every rank's files are in
    // by now: each rank wrote its RNG file before save_model, which ends in a barrier.
    checkpoint::atomic_write_file(marker, progress_json(progress, world_size(*plugin_), plugin_->name()).dump(2));
  }
  if (world && world_size(*plugin_) > 1) world->barrier().wait();
  if (when_complete) when_complete();
}

int64_t Booster::reserve_async_save(const Boosted& boosted) {
  wait_for_save();  // one host copy at a time, as for a save
  detail::DeferredWrites writes;
  int64_t bytes = 0;
  queue_state_writes(boosted, "", {}, writes, &bytes);
  // `writes` and the host copies its closures own go here, unrun: the pinned blocks return to
  // LibTorch's cache, where the next save's copies of the same sizes find them.
  return bytes;
}

void Booster::queue_state_writes(const Boosted& boosted, const std::string& dir, const SaveOptions& options,
                                 detail::DeferredWrites& writes, int64_t* copied_bytes) {
  writes.pinned = plugin_->context().device.is_cuda();
  // The save_* calls gather (collectives, on this thread) and queue their writes with host copies.
  auto& io = plugin_->checkpoint_io();
  io.defer_writes_to(&writes);
  io.count_host_copies(copied_bytes);
  try {
    save_model(*boosted.model, dir, options);
    save_optimizer(*boosted.optimizer, dir, options);
    if (boosted.lr_scheduler) save_lr_scheduler(*boosted.lr_scheduler, dir);
  } catch (...) {
    io.defer_writes_to(nullptr);
    io.count_host_copies(nullptr);
    throw;
  }
  io.defer_writes_to(nullptr);
  io.count_host_copies(nullptr);
}

void Booster::write_state_async(const Boosted& boosted, const TrainingProgress& progress, const std::string& dir,
                                const SaveOptions& options, std::function<void()> when_complete) {
  const int rank = world_rank(*plugin_);
  const int ranks = world_size(*plugin_);
  auto writes = std::make_shared<detail::DeferredWrites>();
  queue_state_writes(boosted, dir, options, *writes);

  // get_state returns a copy. This rank's RNG file goes last: it says that the rank is done.
  checkpoint::NamedTensors rng{{"cpu", at::detail::getDefaultCPUGenerator().get_state()}};
  if (plugin_->context().device.is_cuda()) rng.emplace_back("cuda", compat::cuda_rng_state(plugin_->context().device));
  writes->local.insert(writes->local.begin(), [dir] { files::create_directories(dir); });
  writes->local.push_back([path = rng_file(dir, rank), rng] { checkpoint::write_safetensors(path, rng); });

  std::vector<std::string> every_rank_done;
  if (rank == 0) {
    for (int r = 0; r < ranks; ++r) every_rank_done.push_back(rng_file(dir, r));
    const auto text = progress_json(progress, ranks, plugin_->name()).dump(2);
    writes->after_every_rank.push_back([marker = files::join(dir, kTrainingStateFile), text] {
      checkpoint::atomic_write_file(marker, text);
    });
  }
  const std::chrono::milliseconds timeout(env::timeout_ms().value_or(env::kDefaultTimeoutMs));
  writer_->start([writes, every_rank_done, timeout, hook = options.before_background_write(),
                  when_complete = std::move(when_complete)](const std::atomic<bool>& cancelled) {
    if (hook) hook();
    detail::run_deferred_writes(*writes, every_rank_done, timeout, cancelled);
    if (when_complete) when_complete();
  });
}

void Booster::check_save() { writer_->check(); }
void Booster::wait_for_save() { writer_->wait(); }
bool Booster::save_finished() const { return writer_->finished(); }
bool Booster::save_failed() const { return writer_->failed(); }
void Booster::abandon_save() { writer_->abandon(); }

namespace {

// The global ranks (of `world`) that set their flag: every rank passes whether it failed.
std::vector<int> ranks_that_failed(dist::ProcessGroup* world, bool failed) {
  if (world == nullptr || world->size() < 2) return failed ? std::vector<int>{0} : std::vector<int>{};
  auto flags = torch::zeros({world->size()}, torch::kInt);
  flags[world->rank()] = failed ? 1 : 0;
  world->all_reduce_and_wait(flags);
  std::vector<int> ranks;
  for (int r = 0; r < world->size(); ++r) {
    if (flags[r].item<int>() != 0) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace

TrainingProgress Booster::load_state(const Boosted& boosted, const std::string& dir) {
  const auto state_path = files::join(dir, kTrainingStateFile);
  TrainingProgress progress;
  bool same_world = true;
  int saved_world = 0;
  checkpoint::SafetensorsFile rng;
  // Every part is checked before any is loaded, so that a state this run refuses (another model,
  // a loader of another batch size, a scheduler of other groups, a missing RNG file) leaves the
  // boosted objects as they were, on every rank: the ranks agree on the checks' outcome before
  // any loads (each rank checks its own part: a pipeline stage, its RNG file), so that a rank
  // whose part is refused does not leave the others loading, and they name it.
  std::exception_ptr refused;
  try {
    if (!files::exists(state_path)) {
      throw checkpoint::CheckpointError(fmt::format(
          "{}: no training_state.json, so this is not a complete training state (was saving interrupted?)", dir));
    }
    try {
      std::ifstream in(state_path);
      const auto json = nlohmann::json::parse(in);
      progress.epoch = json.at("epoch").get<int64_t>();
      progress.global_step = json.at("global_step").get<int64_t>();
      progress.data.epoch = json.at("data_epoch").get<int64_t>();
      progress.data.next_batch = json.at("data_next_batch").get<int64_t>();
      // Absent from states saved before it was recorded: the loader's own unit is assumed.
      progress.data.images_per_batch = json.value("data_images_per_batch", int64_t{0});
      saved_world = json.at("world_size").get<int>();
    } catch (const nlohmann::json::exception& e) {
      throw checkpoint::CheckpointError(fmt::format("{}: malformed training state ({})", state_path, e.what()));
    }
    // The optimizer's load checks everything itself before it changes anything, so it goes
    // first; the model's, checked from its files' headers, then cannot fail on the state's shape.
    // (Both hold the fp32 masters, equal at a save, so the order does not change what is loaded.)
    auto& io = plugin_->checkpoint_io();
    io.check_model(*boosted.model, dir);
    if (boosted.lr_scheduler) io.check_lr_scheduler(*boosted.lr_scheduler, dir);
    if (boosted.dataloader) boosted.dataloader->check_state(progress.data);
    // Random states resume exactly only on the same number of ranks; elsewhere the run goes on
    // with fresh streams (weights, optimizer and data position still carry over).
    same_world = saved_world == world_size(*plugin_);
    if (same_world) {
      const auto path = rng_file(dir, world_rank(*plugin_));
      rng = checkpoint::read_safetensors(path);
      if (!rng.contains("cpu")) throw checkpoint::CheckpointError(fmt::format("{}: no 'cpu' random state", path));
      // A throwaway generator takes it first: a malformed state is refused before anything loads.
      at::detail::createCPUGenerator().set_state(rng.at("cpu"));
    }
  } catch (...) {
    refused = std::current_exception();
  }
  const auto failed = ranks_that_failed(plugin_->context().world.get(), refused != nullptr);
  if (refused) std::rethrow_exception(refused);
  if (!failed.empty()) {
    throw checkpoint::CheckpointError(fmt::format(
        "{}: rank{} {} refused this training state (the reason is in {} error); nothing was loaded on any rank",
        dir, failed.size() == 1 ? "" : "s", fmt::join(failed, ", "), failed.size() == 1 ? "its" : "their"));
  }

  load_optimizer(*boosted.optimizer, dir);
  load_model(*boosted.model, dir);
  if (boosted.lr_scheduler) load_lr_scheduler(*boosted.lr_scheduler, dir);
  if (boosted.dataloader) boosted.dataloader->load_state(progress.data);
  if (!same_world) {
    dist::Logger(world_rank(*plugin_), world_size(*plugin_))
        .warn("{}: saved by {} ranks, loaded by {}: the random streams (dropout, augmentation) start afresh, "
              "so training goes on but is not an exact continuation",
              dir, saved_world, world_size(*plugin_));
  } else {
    auto cpu_generator = at::detail::getDefaultCPUGenerator();  // a handle; copies share state
    cpu_generator.set_state(rng.at("cpu"));
    if (plugin_->context().device.is_cuda() && rng.contains("cuda")) {
      compat::set_cuda_rng_state(plugin_->context().device, rng.at("cuda"));
    }
  }
  return progress;
}

}  // namespace colo
