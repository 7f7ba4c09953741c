#include <colo/booster/per_stage_checkpoint_io.h>
#include <colo/checkpoint/atomic_file.h>
#include <colo/checkpoint/checkpoint_error.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/files/files.h>
#include <colo/dist/process_group.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace colo {
namespace {

// The parameter an optimizer state entry belongs to: "master.<param>" or "<param>.<key>"; delayed
// float8 scaling's "fp8_scaling.<layer>.<operand>.<key>" goes with its layer's weight (the stage
// holding that layer saves and loads it).
std::string param_of_optimizer_entry(const std::string& name) {
  if (OptimizerWrapper::is_fp8_scaling_entry(name)) {
    const auto layer = name.substr(std::string(OptimizerWrapper::kFp8ScalingPrefix).size());
    const auto key = layer.rfind('.');
    const auto operand = key == std::string::npos || key == 0 ? std::string::npos : layer.rfind('.', key - 1);
    return operand == std::string::npos ? name : layer.substr(0, operand) + ".weight";
  }
  const std::string master = "master.";
  if (name.compare(0, master.size(), master) == 0) return name.substr(master.size());
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

std::string param_of_model_entry(const std::string& name) { return name; }

// Every rank's piece of `local` (all of one shape), in rank order, on the CPU.
std::vector<torch::Tensor> all_pieces(const torch::Tensor& local, dist::ProcessGroup& group) {
  auto flat = group.communicable(local.contiguous().reshape({-1}));
  auto out = torch::empty({flat.numel() * group.size()}, flat.options());
  group.all_gather(out, flat).wait();
  std::vector<torch::Tensor> pieces;
  for (auto& piece : out.to(torch::kCPU).chunk(group.size(), 0)) pieces.push_back(piece.view(local.sizes()));
  return pieces;
}

// Whether `tensor` is cut by `cuts` (a scalar entry, an optimizer's step, travels whole; so does a
// layer's float8 scaling state, which its tensor-parallel ranks agree on whole).
bool is_cut(const std::string& name, const torch::Tensor& tensor, const std::vector<nn::ShardSpec>& cuts) {
  if (OptimizerWrapper::is_fp8_scaling_entry(name)) return false;
  for (const auto& cut : cuts) {
    if (tensor.dim() <= cut.dim) return false;
  }
  return !cuts.empty();
}

std::string describe(const std::vector<nn::ShardSpec>& cuts) {
  std::string text;
  for (const auto& cut : cuts) text += (text.empty() ? "" : "; then ") + cut.describe();
  return text;
}

}  // namespace

PerStageCheckpointIO::NamedTensors PerStageCheckpointIO::sliced(NamedTensors state, ParamOf param_of) const {
  if (!part_.tp || part_.tp->size() == 1) return state;
  for (auto& [name, tensor] : state) {
    const auto cuts = part_.cuts.find(param_of(name));
    if (cuts == part_.cuts.end() || !is_cut(name, tensor, cuts->second)) continue;
    try {
      tensor = nn::shard_of(tensor, cuts->second).contiguous();
    } catch (const std::invalid_argument& e) {
      throw checkpoint::CheckpointError(fmt::format("'{}' does not split over the {} tensor-parallel ranks ({}): {}", name,
                                                    part_.tp->size(), describe(cuts->second), e.what()));
    }
  }
  return state;
}

PerStageCheckpointIO::PerStageCheckpointIO(std::shared_ptr<dist::ProcessGroup> world, Part part)
    : CheckpointIO(std::move(world)), part_(std::move(part)) {
  if (!world_) throw std::invalid_argument("PerStageCheckpointIO needs the world group");
}

void PerStageCheckpointIO::save_parts(const std::string& dir, const std::string& base, const NamedTensors& tensors,
                                    ParamOf param_of) {
  // Keyed by directory too: groups of one job (the store is the job's) may save at once.
  const auto prefix = fmt::format("colo/checkpoint/{}/{}/{}", dir, saves_++, base);
  // Each tensor as the file holds it: whole. A split one is gathered over tp when its turn to be
  // written comes, so that no rank holds more than one whole tensor beyond its own pieces.
  const bool split_over_tp = part_.tp && part_.tp->size() > 1;
  std::vector<checkpoint::PendingTensor> pending;
  for (const auto& entry : tensors) {
    const auto& name = entry.first;
    const torch::Tensor tensor = entry.second;
    const auto cuts = split_over_tp ? part_.cuts.find(param_of(name)) : part_.cuts.end();
    // Scalars (an optimizer's step) travel whole.
    if (cuts == part_.cuts.end() || !is_cut(name, tensor, cuts->second)) {
      pending.push_back({name, tensor.scalar_type(), tensor.sizes().vec(), [tensor] { return tensor.detach(); }});
      continue;
    }
    auto shape = tensor.sizes().vec();
    for (const auto& cut : cuts->second) shape[cut.dim] = cut.full_size(shape[cut.dim]);
    // The group's first pieces_of ranks hold the distinct pieces, in unshard's order; the rest
    // repeat them (2D's LayerNorms and biases).
    pending.push_back({name, tensor.scalar_type(), shape, [tensor, cuts = cuts->second, tp = part_.tp] {
                         auto pieces = all_pieces(tensor.detach(), *tp);
                         pieces.resize(static_cast<std::size_t>(nn::pieces_of(cuts)));
                         return nn::unshard(pieces, cuts);
                       }});
  }
  if (part_.writer) {
    const auto path = files::join(dir, checkpoint::safetensors_part_name(base, part_.index, part_.count));
    if (writes_deferred()) {
      // The gathers are collectives: they happen now, on the training thread; only the file waits.
      checkpoint::NamedTensors whole;
      for (const auto& tensor : pending) whole.emplace_back(tensor.name, host_copy(tensor.values()));
      write_or_defer([dir, path, whole = std::move(whole)] {
        files::create_directories(dir);
        checkpoint::write_safetensors(path, whole, {{"format", "colo"}});
      });
    } else {
      files::create_directories(dir);
      checkpoint::write_safetensors(path, pending, {{"format", "colo"}});
    }
    // Sizes are known before the values: an asynchronous save announces its part at once.
    nlohmann::json written = nlohmann::json::object();
    for (const auto& tensor : pending) {
      int64_t numel = 1;
      for (const auto d : tensor.shape) numel *= d;
      written[tensor.name] = numel * static_cast<int64_t>(c10::elementSize(tensor.dtype));
    }
    const auto text = written.dump();
    world_->store_set(fmt::format("{}/{}", prefix, part_.index), text);
  } else if (split_over_tp && part_.writer_tp_peer) {
    // The writer's gathers, in its order; the whole tensors are dropped at once.
    for (const auto& tensor : pending) tensor.values();
  }
  if (world_->rank() == 0) {
    // Rank 0 writes part 0 and waits for the others' lists (the store's get waits for a key).
    std::map<std::string, std::string> weight_map;
    int64_t total = 0;
    for (int i = 0; i < part_.count; ++i) {
      const auto written = nlohmann::json::parse(world_->store_get(fmt::format("{}/{}", prefix, i)));
      const auto file = checkpoint::safetensors_part_name(base, i, part_.count);
      for (const auto& [name, size] : written.items()) {
        if (weight_map.count(name)) {
          throw checkpoint::CheckpointError(fmt::format("{}: '{}' is held by two pipeline parts ({} and {})", dir, name,
                                                        weight_map[name], file));
        }
        weight_map[name] = file;
        total += size.get<int64_t>();
      }
    }
    write_after_every_rank([dir, base, weight_map, total] {
      checkpoint::write_safetensors_index(dir, base, weight_map, total);
    });
  }
}

void PerStageCheckpointIO::save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& /*options*/) {
  // full_state: collective over dp for ZeRO; the gather: over tp.
  save_parts(dir, "model", model.full_state(), param_of_model_entry);
  barrier();
}

void PerStageCheckpointIO::load_model(ModelWrapper& model, const std::string& dir) {
  model.load_full_state(sliced(
      checkpoint::load_safetensors_set(dir, "model", [this](const std::string& name) { return part_.names.count(name) > 0; }),
      param_of_model_entry));
}

void PerStageCheckpointIO::check_model(const ModelWrapper& model, const std::string& dir) {
  auto entries = checkpoint::list_safetensors_set(dir, "model");
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [this](const checkpoint::TensorInfo& e) { return part_.names.count(e.name) == 0; }),
                entries.end());
  model.check_full_state(sliced(checkpoint::meta_tensors(entries), param_of_model_entry));
}

void PerStageCheckpointIO::save_optimizer(OptimizerWrapper& optimizer, const std::string& dir,
                                        const SaveOptions& /*options*/) {
  auto state = optimizer.checkpoint_state();
  save_parts(dir, "optimizer", state.tensors, param_of_optimizer_entry);
  if (world_->rank() == 0) {
    // Learning rates and the loss scaler are the same on every rank.
    write_or_defer([dir, scalars = state.scalars] { write_number_map(files::join(dir, "optimizer.json"), scalars); });
  }
  barrier();
}

void PerStageCheckpointIO::load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) {
  OptimizerWrapper::FullState state;
  state.tensors = sliced(
      checkpoint::load_safetensors_set(
          dir, "optimizer",
          [this](const std::string& name) { return part_.names.count(param_of_optimizer_entry(name)) > 0; }),
      param_of_optimizer_entry);
  state.scalars = read_number_map(files::join(dir, "optimizer.json"));
  optimizer.load_checkpoint_state(state);
}

}  // namespace colo
