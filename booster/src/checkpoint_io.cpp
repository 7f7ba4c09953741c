#include <colo/booster/checkpoint_io.h>
#include <colo/engine/memory_size.h>
#include <colo/checkpoint/atomic_file.h>
#include <colo/checkpoint/checkpoint_error.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/dist/process_group.h>
#include <colo/optim/lr_scheduler.h>

#include <colo/files/files.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "deferred_writes.h"

namespace colo {

namespace {

nlohmann::json read_json(const std::string& path) {
  if (!files::exists(path)) throw checkpoint::CheckpointError(fmt::format("{}: file not found", path));
  try {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw checkpoint::CheckpointError(fmt::format("{}: not valid JSON ({}); the file is corrupt", path, e.what()));
  }
}

}  // namespace

CheckpointIO::CheckpointIO(std::shared_ptr<dist::ProcessGroup> world) : world_(std::move(world)) {}

int64_t CheckpointIO::max_shard_bytes(const SaveOptions& options) {
  if (!options.shard()) return 0;
  if (auto problem = memory_size_problem(options.max_shard_mb(), kMebibytes, false); !problem.empty()) {
    throw std::invalid_argument(fmt::format("SaveOptions::max_shard_mb {} {}", options.max_shard_mb(), problem));
  }
  return std::max<int64_t>(1, memory_size_bytes(options.max_shard_mb(), kMebibytes));
}

std::map<std::string, double> CheckpointIO::read_number_map(const std::string& path) {
  const auto json = read_json(path);
  std::map<std::string, double> values;
  if (!json.is_object()) throw checkpoint::CheckpointError(fmt::format("{}: expected a JSON object", path));
  for (const auto& [key, value] : json.items()) {
    if (!value.is_number()) throw checkpoint::CheckpointError(fmt::format("{}: '{}' is not a number", path, key));
    values[key] = value.get<double>();
  }
  return values;
}

void CheckpointIO::write_number_map(const std::string& path, const std::map<std::string, double>& values) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [key, value] : values) json[key] = value;
  checkpoint::atomic_write_file(path, json.dump(2));
}

void CheckpointIO::write_or_defer(std::function<void()> write) {
  if (deferred_) {
    deferred_->local.push_back(std::move(write));
  } else {
    write();
  }
}

void CheckpointIO::write_after_every_rank(std::function<void()> write) {
  if (deferred_) {
    deferred_->after_every_rank.push_back(std::move(write));
  } else {
    write();
  }
}

torch::Tensor CheckpointIO::host_copy(const torch::Tensor& tensor) const {
  const auto source = tensor.detach();
  if (!deferred_) return source.to(torch::kCPU).contiguous();
  auto copy = torch::empty(source.sizes(), source.options().device(torch::kCPU).pinned_memory(deferred_->pinned));
  copy.copy_(source);  // blocking: done when this returns, whatever the device
  if (copied_bytes_) *copied_bytes_ += static_cast<int64_t>(copy.nbytes());
  return copy;
}

CheckpointIO::NamedTensors CheckpointIO::host_copies(NamedTensors state) const {
  for (auto& entry : state) entry.second = host_copy(entry.second);
  return state;
}

bool CheckpointIO::is_writer() const { return !world_ || world_->rank() == 0; }

void CheckpointIO::barrier() const {
  if (world_ && world_->size() > 1) world_->barrier().wait();
}

void CheckpointIO::save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options) {
  auto state = model.full_state();  // collective for sharded models: every rank calls it
  if (is_writer()) {
    write_or_defer([dir, state = host_copies(std::move(state)), bytes = max_shard_bytes(options)] {
      checkpoint::save_safetensors_set(dir, "model", state, bytes, {{"format", "colo"}});
    });
  }
  barrier();
}

void CheckpointIO::load_model(ModelWrapper& model, const std::string& dir) {
  model.load_full_state(checkpoint::load_safetensors_set(dir, "model"));
}

void CheckpointIO::check_model(const ModelWrapper& model, const std::string& dir) {
  model.check_full_state(checkpoint::meta_tensors(checkpoint::list_safetensors_set(dir, "model")));
}

void CheckpointIO::save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options) {
  auto state = optimizer.checkpoint_state();
  if (is_writer()) {
    write_or_defer([dir, tensors = host_copies(std::move(state.tensors)), scalars = state.scalars,
                    bytes = max_shard_bytes(options)] {
      checkpoint::save_safetensors_set(dir, "optimizer", tensors, bytes, {{"format", "colo"}});
      write_number_map(files::join(dir, "optimizer.json"), scalars);
    });
  }
  barrier();
}

void CheckpointIO::load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) {
  OptimizerWrapper::FullState state;
  state.tensors = checkpoint::load_safetensors_set(dir, "optimizer");
  state.scalars = read_number_map(files::join(dir, "optimizer.json"));
  optimizer.load_checkpoint_state(state);
}

void CheckpointIO::save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir) {
  if (is_writer()) {
    write_or_defer([dir, values = scheduler.state_dict()] {
      files::create_directories(dir);
      write_number_map(files::join(dir, "lr_scheduler.json"), values);
    });
  }
  barrier();
}

void CheckpointIO::load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir) {
  scheduler.load_state_dict(read_number_map(files::join(dir, "lr_scheduler.json")));
}

void CheckpointIO::check_lr_scheduler(const optim::LRScheduler& scheduler, const std::string& dir) {
  scheduler.check_state_dict(read_number_map(files::join(dir, "lr_scheduler.json")));
}

}  // namespace colo
