// GeminiOptimizer's state streaming (the optimizer's third job beside placing chunks and the
// step): the full, unsharded state gathered chunk by chunk for a checkpoint and the inverse,
// scattering a checkpoint's tensors back into each rank's shards. The step and the placement
// live in gemini_optimizer.cpp.
#include <colo/engine/gemini_optimizer.h>
#include <colo/dist/process_group.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/gather_full_tensors.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "optimizer_scalars.h"
#include "optimizer_state_entries.h"
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

std::vector<torch::Tensor> GeminiOptimizer::gather_chunk(std::size_t c, ChunkState which) const {
  const auto& adam = *adam_.at(c);
  const auto& shard = which == ChunkState::kMaster ? adam.master()
                      : which == ChunkState::kExpAvg ? adam.exp_avg()
                                                     : adam.exp_avg_sq();
  if (!shard.defined()) throw std::logic_error("GeminiOptimizer::gather_chunk: Adam's moments are not allocated yet");
  auto full = zero::gather_full_tensors(*layouts_[c], *group_, shard);
  for (std::size_t k = 0; k < full.size(); ++k) full[k] = full[k].view(params_[chunk_members_[c][k]].sizes());
  return full;
}

torch::Tensor GeminiOptimizer::ChunkStream::get(std::size_t i) {
  const auto c = optimizer_.chunk_of(i);
  if (c != held_chunk_) {
    held_ = optimizer_.gather_chunk(c, which_);
    held_chunk_ = c;
  }
  const auto& members = optimizer_.chunk_members_[c];
  const auto k = static_cast<std::size_t>(std::find(members.begin(), members.end(), i) - members.begin());
  auto value = held_.at(k);
  if (k + 1 == members.size()) {  // the chunk's last parameter: nothing more is asked of it
    held_.clear();
    held_chunk_ = static_cast<std::size_t>(-1);
  }
  return value;
}

std::vector<std::pair<std::string, torch::Tensor>> GeminiOptimizer::full_masters() const {
  ChunkStream masters(*this, ChunkState::kMaster);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t i = 0; i < params_.size(); ++i) out.emplace_back(names_[i], masters.get(i));
  return out;
}

void GeminiOptimizer::load_chunk(std::size_t c, const std::vector<torch::Tensor>& masters,
                                 const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  const int rank = group_->rank();
  const auto flat = [](const std::vector<torch::Tensor>& values) {
    std::vector<torch::Tensor> out;
    for (const auto& v : values) out.push_back(v.reshape(-1).to(torch::kFloat));
    return out;
  };
  if (!masters.empty()) {
    const auto full = flat(masters);
    auto master = adam_[c]->master();
    layouts_[c]->copy_to_shard(rank, full, master);
    chunks_->load_values(c, full);
  }
  if (!exp_avg.empty()) {
    adam_[c]->allocate_moments();
    auto m = adam_[c]->exp_avg();
    auto v = adam_[c]->exp_avg_sq();
    layouts_[c]->copy_to_shard(rank, flat(exp_avg), m);
    layouts_[c]->copy_to_shard(rank, flat(exp_avg_sq), v);
  }
}

void GeminiOptimizer::load_masters(const std::map<std::string, torch::Tensor>& values) {
  for (std::size_t c = 0; c < adam_.size(); ++c) {
    std::vector<torch::Tensor> full;
    for (auto i : chunk_members_[c]) full.push_back(values.at(names_[i]));
    load_chunk(c, full);
  }
}

std::vector<checkpoint::PendingTensor> GeminiOptimizer::pending_full_state() const {
  std::vector<checkpoint::PendingTensor> pending;
  const int64_t steps = adam_.empty() ? 0 : adam_.front()->step_count();
  if (steps > 0) {
    auto exp_avg = std::make_shared<ChunkStream>(*this, ChunkState::kExpAvg);
    auto exp_avg_sq = std::make_shared<ChunkStream>(*this, ChunkState::kExpAvgSq);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto shape = params_[i].sizes().vec();
      pending.push_back({names_[i] + ".step", torch::kFloat, {},
                         [steps] { return torch::full({}, static_cast<double>(steps), torch::kFloat); }});
      pending.push_back({names_[i] + ".exp_avg", torch::kFloat, shape, [exp_avg, i] { return exp_avg->get(i); }});
      pending.push_back(
          {names_[i] + ".exp_avg_sq", torch::kFloat, shape, [exp_avg_sq, i] { return exp_avg_sq->get(i); }});
    }
  }
  if (policy_.uses_master_weights()) {
    std::unordered_map<std::string, std::size_t> chunked;
    for (std::size_t i = 0; i < names_.size(); ++i) chunked.emplace(names_[i], i);
    auto masters = std::make_shared<ChunkStream>(*this, ChunkState::kMaster);
    for (std::size_t m = 0; m < model_names_.size(); ++m) {
      const auto it = chunked.find(model_names_[m]);
      const auto shape = model_params_[m].sizes().vec();
      if (it != chunked.end()) {
        pending.push_back({"master." + model_names_[m], torch::kFloat, shape,
                           [masters, i = it->second] { return masters->get(i); }});
      } else {
        pending.push_back({"master." + model_names_[m], torch::kFloat, shape,
                           [p = model_params_[m]] { return p.detach().to(torch::kFloat); }});
      }
    }
  }
  return pending;
}

std::map<std::string, double> GeminiOptimizer::full_state_scalars() const {
  return detail::optimizer_scalars(*optimizer_, scaler_.get());
}

OptimizerWrapper::FullState GeminiOptimizer::full_state() const {
  FullState state;
  for (const auto& entry : pending_full_state()) state.tensors.emplace_back(entry.name, entry.values());
  state.scalars = full_state_scalars();
  return state;
}

void GeminiOptimizer::load_full_state(const FullState& state) {
  load_full_state(CheckpointSetReader::over(state.tensors), state.scalars);
}

void GeminiOptimizer::load_full_state(const CheckpointSetReader& reader, const std::map<std::string, double>& scalars) {
  // 1. Everything checked from the entries' shapes (the step counts' values too) before any change.
  std::set<std::string> step_names;
  for (const auto& e : reader.entries) {
    if (e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".step") == 0) step_names.insert(e.name);
  }
  std::map<std::string, torch::Tensor> step_values;
  for (auto& [name, value] : reader.read(step_names)) step_values.emplace(name, value);
  FullState shadow;
  shadow.scalars = scalars;
  for (const auto& e : reader.entries) {
    auto it = step_values.find(e.name);
    shadow.tensors.emplace_back(
        e.name, it != step_values.end() ? it->second
                                        : torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype).device(torch::kMeta)));
  }
  const auto checked = detail::check_sharded_adam_state(shadow, names_, params_, model_names_, model_params_,
                                                        policy_.uses_master_weights(), *optimizer_, scaler_.get(), options_.caller());
  // 2. Chunk by chunk: read its entries, scatter them into its shards.
  torch::NoGradGuard no_grad;
  const bool masters = policy_.uses_master_weights() && !checked.masters.empty();
  for (std::size_t c = 0; c < adam_.size(); ++c) {
    std::set<std::string> wanted;
    for (auto i : chunk_members_[c]) {
      if (checked.step) {
        wanted.insert(names_[i] + ".exp_avg");
        wanted.insert(names_[i] + ".exp_avg_sq");
      }
      if (masters) wanted.insert("master." + names_[i]);
    }
    std::map<std::string, torch::Tensor> values;
    for (auto& [name, value] : reader.read(wanted)) values.emplace(name, value);
    std::vector<torch::Tensor> master_values, exp_avg, exp_avg_sq;
    for (auto i : chunk_members_[c]) {
      if (masters) master_values.push_back(values.at("master." + names_[i]));
      if (checked.step) {
        exp_avg.push_back(values.at(names_[i] + ".exp_avg"));
        exp_avg_sq.push_back(values.at(names_[i] + ".exp_avg_sq"));
      }
    }
    load_chunk(c, master_values, exp_avg, exp_avg_sq);
    if (checked.step) {
      adam_[c]->set_step_count(*checked.step);
    } else {
      if (adam_[c]->exp_avg().defined()) {
        adam_[c]->exp_avg().zero_();
        adam_[c]->exp_avg_sq().zero_();
      }
      adam_[c]->set_step_count(0);
    }
  }
  if (masters) {
    std::unordered_set<std::string> chunked(names_.begin(), names_.end());
    std::set<std::string> others;
    for (const auto& name : model_names_) {
      if (!chunked.count(name)) others.insert("master." + name);
    }
    std::map<std::string, torch::Tensor> values;
    for (auto& [name, value] : reader.read(others)) values.emplace(name, value);
    for (std::size_t i = 0; i < model_names_.size(); ++i) {
      if (!chunked.count(model_names_[i])) model_params_[i].copy_(values.at("master." + model_names_[i]));
    }
  }
  detail::apply_optimizer_scalars(checked.scalars, *optimizer_, scaler_.get());
}

}  // namespace colo
