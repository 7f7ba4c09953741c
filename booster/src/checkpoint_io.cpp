#include <colo/booster/checkpoint_io.h>
#include <colo/booster/memory_size.h>
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

namespace colo {

namespace {

std::vector<std::pair<std::string, torch::Tensor>> to_cpu(std::vector<std::pair<std::string, torch::Tensor>> state) {
  for (auto& entry : state) entry.second = entry.second.detach().to(torch::kCPU).contiguous();
  return state;
}

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

bool CheckpointIO::is_writer() const { return !world_ || world_->rank() == 0; }

void CheckpointIO::barrier() const {
  if (world_ && world_->size() > 1) world_->barrier().wait();
}

void CheckpointIO::save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options) {
  auto state = model.full_state();  // collective for sharded models: every rank calls it
  if (is_writer()) {
    checkpoint::save_safetensors_set(dir, "model", to_cpu(std::move(state)), max_shard_bytes(options), {{"format", "colo"}});
  }
  barrier();
}

void CheckpointIO::load_model(ModelWrapper& model, const std::string& dir) {
  model.load_full_state(checkpoint::load_safetensors_set(dir, "model"));
}

void CheckpointIO::save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options) {
  auto state = optimizer.full_state();
  if (is_writer()) {
    checkpoint::save_safetensors_set(dir, "optimizer", to_cpu(std::move(state.tensors)), max_shard_bytes(options),
                                     {{"format", "colo"}});
    write_number_map(files::join(dir, "optimizer.json"), state.scalars);
  }
  barrier();
}

void CheckpointIO::load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) {
  OptimizerWrapper::FullState state;
  state.tensors = checkpoint::load_safetensors_set(dir, "optimizer");
  state.scalars = read_number_map(files::join(dir, "optimizer.json"));
  optimizer.load_full_state(state);
}

void CheckpointIO::save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir) {
  if (is_writer()) {
    files::create_directories(dir);
    write_number_map(files::join(dir, "lr_scheduler.json"), scheduler.state_dict());
  }
  barrier();
}

void CheckpointIO::load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir) {
  scheduler.load_state_dict(read_number_map(files::join(dir, "lr_scheduler.json")));
}

}  // namespace colo
