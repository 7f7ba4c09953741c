// GeminiStateStreamer: gemini's full, unsharded state gathered chunk by chunk for a checkpoint,
// and the inverse, a checkpoint's tensors scattered back into each rank's shards, for the model
// (masters under canonical names, buffers) and the optimizer (moments, step, masters, scalars).
#include <colo/engine/gemini_state_streamer.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/optimizer_wrapper.h>
#include <colo/dist/process_group.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/gather_full_tensors.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "optimizer_scalars.h"
#include "sharded_adam_checks.h"

namespace colo {

CheckpointSetReader CheckpointSetReader::over(const checkpoint::NamedTensors& tensors) {
  CheckpointSetReader reader;
  auto by_name = std::make_shared<std::map<std::string, torch::Tensor>>();
  for (const auto& [name, tensor] : tensors) {
    reader.entries.push_back({name, tensor.scalar_type(), tensor.sizes().vec()});
    by_name->emplace(name, tensor);
  }
  reader.read = [by_name](const std::set<std::string>& names) {
    checkpoint::NamedTensors out;
    for (const auto& name : names) {
      auto it = by_name->find(name);
      if (it != by_name->end()) out.emplace_back(name, it->second);
    }
    return out;
  };
  return reader;
}

checkpoint::NamedTensors CheckpointSetReader::shapes() const { return checkpoint::meta_tensors(entries); }

std::vector<torch::Tensor> GeminiStateStreamer::gather_chunk(std::size_t c, ChunkState which) const {
  const auto& adam = chunks_.chunk_state(c);
  const auto& shard = which == ChunkState::kMaster ? adam.master()
                      : which == ChunkState::kExpAvg ? adam.exp_avg()
                                                     : adam.exp_avg_sq();
  if (!shard.defined()) {
    throw std::logic_error("GeminiStateStreamer::gather_chunk: Adam's moments are not allocated yet");
  }
  auto full = zero::gather_full_tensors(adam.layout(), *chunks_.group(), shard);
  const auto& members = chunks_.chunk_members(c);
  for (std::size_t k = 0; k < full.size(); ++k) full[k] = full[k].view(chunks_.params()[members[k]].sizes());
  return full;
}

torch::Tensor GeminiStateStreamer::ChunkStream::get(std::size_t i) {
  const auto c = chunks_.chunk_of(i);
  if (c != held_chunk_) {
    held_ = GeminiStateStreamer(chunks_).gather_chunk(c, which_);
    held_chunk_ = c;
  }
  const auto& members = chunks_.chunk_members(c);
  const auto k = static_cast<std::size_t>(std::find(members.begin(), members.end(), i) - members.begin());
  auto value = held_.at(k);
  if (k + 1 == members.size()) {  // the chunk's last parameter: nothing more is asked of it
    held_.clear();
    held_chunk_ = static_cast<std::size_t>(-1);
  }
  return value;
}

std::vector<std::pair<std::string, torch::Tensor>> GeminiStateStreamer::full_masters() const {
  ChunkStream masters(chunks_, ChunkState::kMaster);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t i = 0; i < chunks_.params().size(); ++i) out.emplace_back(chunks_.param_names()[i], masters.get(i));
  return out;
}

void GeminiStateStreamer::load_chunk(std::size_t c, const std::vector<torch::Tensor>& masters,
                                     const std::vector<torch::Tensor>& exp_avg,
                                     const std::vector<torch::Tensor>& exp_avg_sq) const {
  torch::NoGradGuard no_grad;
  const int rank = chunks_.group()->rank();
  auto& adam = chunks_.chunk_state(c);
  const auto& layout = adam.layout();
  const auto flat = [](const std::vector<torch::Tensor>& values) {
    std::vector<torch::Tensor> out;
    for (const auto& v : values) out.push_back(v.reshape(-1).to(torch::kFloat));
    return out;
  };
  if (!masters.empty()) {
    const auto full = flat(masters);
    auto master = adam.master();
    layout.copy_to_shard(rank, full, master);
    chunks_.chunks().load_values(c, full);
  }
  if (!exp_avg.empty()) {
    adam.allocate_moments();
    auto m = adam.exp_avg();
    auto v = adam.exp_avg_sq();
    layout.copy_to_shard(rank, flat(exp_avg), m);
    layout.copy_to_shard(rank, flat(exp_avg_sq), v);
  }
}

void GeminiStateStreamer::load_masters(const std::map<std::string, torch::Tensor>& values) const {
  for (std::size_t c = 0; c < chunks_.num_chunks(); ++c) {
    std::vector<torch::Tensor> full;
    for (auto i : chunks_.chunk_members(c)) full.push_back(values.at(chunks_.param_names()[i]));
    load_chunk(c, full);
  }
}

std::vector<checkpoint::PendingTensor> GeminiStateStreamer::model_entries() const {
  const auto& module = *chunks_.model();
  std::unordered_map<std::string, std::size_t> chunked;
  for (std::size_t i = 0; i < chunks_.param_names().size(); ++i) chunked.emplace(chunks_.param_names()[i], i);
  // Chunked parameters may be released: their masters are read, one chunk at a time.
  auto masters = std::make_shared<ChunkStream>(chunks_, ChunkState::kMaster);
  std::vector<checkpoint::PendingTensor> pending;
  for (const auto& item : module.canonical_named_parameters()) {
    const auto it = chunked.find(item.key());
    if (it != chunked.end()) {
      pending.push_back({item.key(), torch::kFloat, item.value().sizes().vec(), [masters, i = it->second] {
                           return masters->get(i);
                         }});
    } else {
      pending.push_back({item.key(), item.value().scalar_type(), item.value().sizes().vec(),
                         [p = item.value()] { return p.detach(); }});
    }
  }
  for (const auto& item : module.canonical_named_buffers()) {
    pending.push_back({item.key(), item.value().scalar_type(), item.value().sizes().vec(),
                       [b = item.value()] { return b.detach(); }});
  }
  return pending;
}

void GeminiStateStreamer::load_model(const CheckpointSetReader& reader) const {
  const auto& module = *chunks_.model();
  torch::NoGradGuard no_grad;
  const auto& names = chunks_.param_names();
  std::unordered_set<std::string> chunked(names.begin(), names.end());
  // What is not chunked (buffers, frozen parameters) is small: read at once.
  std::set<std::string> others;
  for (const auto& item : module.canonical_named_parameters()) {
    if (!chunked.count(item.key())) others.insert(item.key());
  }
  for (const auto& item : module.canonical_named_buffers()) others.insert(item.key());
  std::map<std::string, torch::Tensor> values;
  for (auto& [name, value] : reader.read(others)) values.emplace(name, value);
  for (const auto& item : module.canonical_named_parameters()) {
    if (!chunked.count(item.key())) item.value().copy_(values.at(item.key()));
  }
  for (const auto& item : module.canonical_named_buffers()) item.value().copy_(values.at(item.key()));
  // The masters take the saved values themselves, the working shards their rounding: chunk by chunk.
  for (std::size_t c = 0; c < chunks_.num_chunks(); ++c) {
    std::set<std::string> wanted;
    for (auto i : chunks_.chunk_members(c)) wanted.insert(names[i]);
    std::map<std::string, torch::Tensor> chunk;
    for (auto& [name, value] : reader.read(wanted)) chunk.emplace(name, value);
    std::vector<torch::Tensor> full;
    for (auto i : chunks_.chunk_members(c)) full.push_back(chunk.at(names[i]));
    load_chunk(c, full);
  }
}

std::vector<checkpoint::PendingTensor> GeminiStateStreamer::optimizer_entries() const {
  const auto& names = chunks_.param_names();
  const auto& params = chunks_.params();
  std::vector<checkpoint::PendingTensor> pending;
  const int64_t steps = chunks_.num_chunks() == 0 ? 0 : chunks_.chunk_state(0).step_count();
  if (steps > 0) {
    auto exp_avg = std::make_shared<ChunkStream>(chunks_, ChunkState::kExpAvg);
    auto exp_avg_sq = std::make_shared<ChunkStream>(chunks_, ChunkState::kExpAvgSq);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto shape = params[i].sizes().vec();
      pending.push_back({names[i] + ".step", torch::kFloat, {},
                         [steps] { return torch::full({}, static_cast<double>(steps), torch::kFloat); }});
      pending.push_back({names[i] + ".exp_avg", torch::kFloat, shape, [exp_avg, i] { return exp_avg->get(i); }});
      pending.push_back(
          {names[i] + ".exp_avg_sq", torch::kFloat, shape, [exp_avg_sq, i] { return exp_avg_sq->get(i); }});
    }
  }
  if (chunks_.precision_policy().uses_master_weights()) {
    const auto& model_names = chunks_.model_param_names();
    const auto& model_params = chunks_.model_params();
    std::unordered_map<std::string, std::size_t> chunked;
    for (std::size_t i = 0; i < names.size(); ++i) chunked.emplace(names[i], i);
    auto masters = std::make_shared<ChunkStream>(chunks_, ChunkState::kMaster);
    for (std::size_t m = 0; m < model_names.size(); ++m) {
      const auto it = chunked.find(model_names[m]);
      const auto shape = model_params[m].sizes().vec();
      if (it != chunked.end()) {
        pending.push_back({"master." + model_names[m], torch::kFloat, shape,
                           [masters, i = it->second] { return masters->get(i); }});
      } else {
        pending.push_back({"master." + model_names[m], torch::kFloat, shape,
                           [p = model_params[m]] { return p.detach().to(torch::kFloat); }});
      }
    }
  }
  return pending;
}

void GeminiStateStreamer::load_optimizer(const CheckpointSetReader& reader, const std::map<std::string, double>& scalars,
                                         torch::optim::Optimizer& optimizer, amp::DynamicLossScaler* scaler,
                                         const std::string& caller) const {
  const auto& names = chunks_.param_names();
  const auto& model_names = chunks_.model_param_names();
  const auto& model_params = chunks_.model_params();
  const bool keep_masters = chunks_.precision_policy().uses_master_weights();
  // 1. Everything checked from the entries' shapes (the step counts' values too) before any change.
  std::set<std::string> step_names;
  for (const auto& e : reader.entries) {
    if (e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".step") == 0) step_names.insert(e.name);
  }
  std::map<std::string, torch::Tensor> step_values;
  for (auto& [name, value] : reader.read(step_names)) step_values.emplace(name, value);
  OptimizerWrapper::FullState shadow;
  shadow.scalars = scalars;
  shadow.tensors = reader.shapes();
  for (auto& [name, tensor] : shadow.tensors) {
    if (auto it = step_values.find(name); it != step_values.end()) tensor = it->second;
  }
  const auto checked = detail::check_sharded_adam_state(shadow, names, chunks_.params(), model_names, model_params,
                                                        keep_masters, optimizer, scaler, caller);
  // 2. Chunk by chunk: read its entries, scatter them into its shards.
  torch::NoGradGuard no_grad;
  const bool masters = keep_masters && !checked.masters.empty();
  for (std::size_t c = 0; c < chunks_.num_chunks(); ++c) {
    const auto& members = chunks_.chunk_members(c);
    std::set<std::string> wanted;
    for (auto i : members) {
      if (checked.step) {
        wanted.insert(names[i] + ".exp_avg");
        wanted.insert(names[i] + ".exp_avg_sq");
      }
      if (masters) wanted.insert("master." + names[i]);
    }
    std::map<std::string, torch::Tensor> values;
    for (auto& [name, value] : reader.read(wanted)) values.emplace(name, value);
    std::vector<torch::Tensor> master_values, exp_avg, exp_avg_sq;
    for (auto i : members) {
      if (masters) master_values.push_back(values.at("master." + names[i]));
      if (checked.step) {
        exp_avg.push_back(values.at(names[i] + ".exp_avg"));
        exp_avg_sq.push_back(values.at(names[i] + ".exp_avg_sq"));
      }
    }
    load_chunk(c, master_values, exp_avg, exp_avg_sq);
    auto& adam = chunks_.chunk_state(c);
    if (checked.step) {
      adam.set_step_count(*checked.step);
    } else {
      if (adam.exp_avg().defined()) {
        adam.exp_avg().zero_();
        adam.exp_avg_sq().zero_();
      }
      adam.set_step_count(0);
    }
  }
  if (masters) {
    std::unordered_set<std::string> chunked(names.begin(), names.end());
    std::set<std::string> others;
    for (const auto& name : model_names) {
      if (!chunked.count(name)) others.insert("master." + name);
    }
    std::map<std::string, torch::Tensor> values;
    for (auto& [name, value] : reader.read(others)) values.emplace(name, value);
    for (std::size_t i = 0; i < model_names.size(); ++i) {
      if (!chunked.count(model_names[i])) model_params[i].copy_(values.at("master." + model_names[i]));
    }
  }
  detail::apply_optimizer_scalars(checked.scalars, optimizer, scaler);
}

}  // namespace colo
