#include <colo/engine/parallelize.h>
#include <colo/engine/optimizer_wrapper.h>
#include <colo/compat/torch_compat.h>
#include <colo/data/data_loader.h>
#include <colo/ddp/broadcast_coalesced.h>
#include <colo/dist/process_group.h>
#include <colo/nn/cuda_graphed_stack.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/nn/fp8_switchable.h>
#include <colo/nn/layer_stack.h>
#include <colo/optim/optimizer_state.h>
#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <unordered_set>

namespace colo {

std::shared_ptr<nn::Fp8DelayedScaling> apply_matmul_precision(nn::LayerStack& model, amp::Precision precision,
                                                              c10::Device device, const nn::Fp8Recipe& fp8) {
  if (precision != amp::Precision::kFp8) return nullptr;
  auto scaling = nn::use_fp8_linears(model, device, fp8).delayed_scaling;
  if (scaling) {
    // Canonical names, in use_fp8_linears' order (the stack's modules, layer by layer): what a
    // checkpoint names each layer's history by, under any pipeline split.
    std::vector<std::string> names;
    for (size_t i = 0; i < model.size(); ++i) {
      const auto& layer = model.layer(i);
      for (const auto& item : layer->named_modules()) {
        const auto* linear = dynamic_cast<const nn::Fp8Switchable*>(item.value().get());
        if (linear == nullptr || !linear->fp8()) continue;
        auto name = layer->canonical_prefix() + item.key();
        if (!name.empty() && name.back() == '.') name.pop_back();
        names.push_back(name.empty() ? fmt::format("layer{}", i) : name);
      }
    }
    scaling->set_layer_names(std::move(names));
  }
  return scaling;
}

void attach_fp8_scaling(OptimizerWrapper& optimizer, std::shared_ptr<nn::Fp8DelayedScaling> scaling,
                        std::vector<std::shared_ptr<dist::ProcessGroup>> agree_over) {
  if (!scaling) return;
  const std::string prefix = OptimizerWrapper::kFp8ScalingPrefix;
  OptimizerWrapper::CheckpointedCompanion companion;
  companion.prefix = prefix;
  companion.save = [scaling, prefix] {
    OptimizerWrapper::FullState state;
    for (auto& [name, tensor] : scaling->layer_entries()) state.tensors.emplace_back(prefix + name, std::move(tensor));
    state.scalars[prefix + "primed"] = scaling->primed() ? 1.0 : 0.0;
    return state;
  };
  companion.prepare_load = [scaling, prefix](const OptimizerWrapper::FullState& state) -> std::function<void()> {
    const auto primed = state.scalars.find(prefix + "primed");
    if (primed == state.scalars.end()) {
      if (!state.tensors.empty()) {
        throw std::invalid_argument(fmt::format("the checkpoint's delayed float8 scaling state has '{}' but no '{}primed'",
                                                state.tensors.front().first, prefix));
      }
      return nullptr;  // saved without delayed scaling: this run starts its history afresh
    }
    std::vector<std::pair<std::string, torch::Tensor>> entries;
    for (const auto& [name, tensor] : state.tensors) entries.emplace_back(name.substr(prefix.size()), tensor);
    return scaling->prepare_load(entries, primed->second != 0.0);
  };
  optimizer.add_checkpointed_companion(std::move(companion));  // first: a refusal here adds nothing
  optimizer.add_after_step([scaling, groups = std::move(agree_over)] {
    std::vector<dist::ProcessGroup*> raw;
    for (const auto& g : groups) raw.push_back(g.get());
    scaling->update(raw);
  });
}

void broadcast_model(nn::LayerStack& model, c10::Device device, dist::ProcessGroup& group) {
  model.to(device);
  auto states = model.parameters();
  for (auto& b : model.buffers()) states.push_back(b);
  ddp::broadcast_coalesced(group, states, 0);
}

std::shared_ptr<ddp::BucketedAllReduce> apply_ddp(const nn::LayerStack& model, std::shared_ptr<dist::ProcessGroup> group,
                                                  const ddp::BucketedAllReduceOptions& options) {
  if (!group) throw std::invalid_argument("apply_ddp: the data-parallel group is null");
  if (group->size() == 1) return nullptr;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : model.canonical_named_parameters()) named.emplace_back(item.key(), item.value());
  return std::make_shared<ddp::BucketedAllReduce>(std::move(named), std::move(group), options);
}

void reduce_after_graph_backward(nn::CudaGraphedStack& graphed,
                                 const std::shared_ptr<ddp::BucketedAllReduce>& reducer) {
  if (!reducer) return;
  // Weak: the model wrapper owns both, and a reducer gone first must not be kept alive here.
  graphed.on_backward_end([weak = std::weak_ptr<ddp::BucketedAllReduce>(reducer)] {
    if (auto r = weak.lock(); r && r->sync_enabled()) r->reduce_accumulated();
  });
}

void restrict_optimizer(torch::optim::Optimizer& optimizer, const nn::LayerStack& model) {
  std::unordered_set<const void*> kept;
  for (const auto& p : model.parameters()) kept.insert(p.unsafeGetTensorImpl());

  // Torch optimizers key their state by the parameter's TensorImpl (a string or the pointer,
  // depending on the LibTorch version); colo's do the same.
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    std::vector<torch::Tensor> keep;
    for (const auto& p : group.params()) {
      if (kept.count(p.unsafeGetTensorImpl())) {
        keep.push_back(p);
      } else {
        state.erase(compat::optimizer_state_key(p));
      }
    }
    group.params() = std::move(keep);
  }
}

int64_t per_rank_batch(int64_t global_batch, int64_t dp_size, int64_t accumulation_steps) {
  if (global_batch < 1 || dp_size < 1 || accumulation_steps < 1) {
    throw std::invalid_argument(fmt::format("a global batch of {} over {} data-parallel ranks x {} accumulation steps: "
                                            "each must be at least 1",
                                            global_batch, dp_size, accumulation_steps));
  }
  const int64_t parts = dp_size * accumulation_steps;
  if (global_batch % parts != 0) {
    throw std::invalid_argument(fmt::format(
        "a global batch of {} does not split over {} data-parallel rank{} x {} accumulation step{}; use a multiple of {}",
        global_batch, dp_size, dp_size == 1 ? "" : "s", accumulation_steps, accumulation_steps == 1 ? "" : "s", parts));
  }
  return global_batch / parts;
}

std::optional<int64_t> accumulation_keeping_global_batch(int64_t global_batch, int64_t dp_size, int64_t planned_dp,
                                                         int64_t planned_accumulation) {
  if (global_batch < 1 || dp_size < 1 || planned_dp < 1 || planned_accumulation < 1) {
    throw std::invalid_argument(
        fmt::format("accumulation_keeping_global_batch: global batch {}, {} data-parallel ranks, planned {} x {} "
                    "accumulation: each must be at least 1",
                    global_batch, dp_size, planned_dp, planned_accumulation));
  }
  const int64_t planned_parts = planned_dp * planned_accumulation;
  for (int64_t a = (planned_parts + dp_size - 1) / dp_size; a * dp_size <= global_batch; ++a) {
    if (global_batch % (a * dp_size) == 0) return a;
  }
  return std::nullopt;
}

void shard_dataloader(data::DataLoader& loader, const dist::ProcessGroup& dp_group, const std::string& plugin) {
  try {
    loader.reshard(dp_group.size(), dp_group.rank());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: the data loader cannot be split over the {} data-parallel ranks of "
                                            "this job: {}",
                                            plugin, dp_group.size(), e.what()));
  }
}

}  // namespace colo
