// GeminiChunkOwner: the chunk plan, the chunks' placement (static, and auto's warm-up), the
// chunked parameters and the gradient reducer, built once for the model. The step that updates
// each chunk's state is GeminiOptimizer's (gemini_optimizer.cpp); checkpoints stream through
// GeminiStateStreamer (gemini_state_streamer.cpp).
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/memory_size.h>
#include <colo/dist/process_group.h>
#include <colo/nn/shard_spec.h>
#include <colo/zero/allocate.h>
#include <colo/zero/chunk_plan.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/device_memory.h>
#include <colo/zero/reduce_scatter_grad_reducer.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "parameter_match.h"
#include "sharded_adam_checks.h"

namespace colo {

std::vector<std::string> GeminiChunkOptions::violations() const {
  std::vector<std::string> errors;
  for (const auto& [name, value] : {std::pair<const char*, double>{"shard_param_frac", shard_param_frac()},
                                    {"offload_param_frac", offload_param_frac()},
                                    {"offload_optim_frac", offload_optim_frac()}}) {
    if (!(value >= 0.0 && value <= 1.0)) errors.push_back(fmt::format("{} must lie in [0, 1], got {}", name, value));
  }
  if (offload_param_frac() > 0.0 && shard_param_frac() < 1.0) {
    errors.push_back(fmt::format(
        "offload_param_frac={} needs shard_param_frac=1 (got {}): only sharded chunks keep a shard that can live in "
        "host memory",
        offload_param_frac(), shard_param_frac()));
  }
  if (placement_policy() == GeminiPlacementPolicy::kAuto &&
      (shard_param_frac() != 1.0 || offload_param_frac() != 0.0 || offload_optim_frac() != 0.0)) {
    errors.push_back(
        "shard_param_frac, offload_param_frac and offload_optim_frac belong to placement_policy=static; auto places "
        "the chunks itself (leave them out, or choose static)");
  }
  if (!(steady_cuda_cap_ratio() > 0.0 && steady_cuda_cap_ratio() <= 1.0)) {
    errors.push_back(fmt::format("steady_cuda_cap_ratio must lie in (0, 1], got {}", steady_cuda_cap_ratio()));
  }
  if (chunk_size_mb()) {
    if (auto problem = memory_size_problem(*chunk_size_mb(), kMebibytes, false); !problem.empty()) {
      errors.push_back(fmt::format("chunk_size_mb {} {}", *chunk_size_mb(), problem));
    }
  }
  if (device_memory_bytes()) {
    const auto bytes = static_cast<double>(*device_memory_bytes());
    if (auto problem = memory_size_problem(bytes, kBytes, false); !problem.empty()) {
      errors.push_back(fmt::format("device_memory_bytes {} {}", *device_memory_bytes(), problem));
    }
  }
  if (max_prefetch() < 0) errors.push_back(fmt::format("max_prefetch must be >= 0, got {}", max_prefetch()));
  return errors;
}

GeminiChunking GeminiChunkOwner::plan(const std::vector<int64_t>& numels, const std::vector<std::string>& names,
                                      const GeminiChunkOptions& options, bool on_gpu) {
  const auto compute = amp::PrecisionPolicy(options.precision()).compute_dtype();
  const int64_t element_size = static_cast<int64_t>(c10::elementSize(compute));
  std::optional<int64_t> capacity;
  if (options.chunk_size_mb()) {
    capacity = std::max<int64_t>(1, static_cast<int64_t>(*options.chunk_size_mb() * 1024.0 * 1024.0) / element_size);
  }
  auto plan = zero::plan_chunks(numels, names, capacity, element_size);
  GeminiChunking out;
  out.capacity = plan.capacity;
  out.searched = plan.searched;
  out.chunks = std::move(plan.chunks);
  for (const auto& members : out.chunks) {
    int64_t n = 0;
    for (auto i : members) n += numels[i];
    out.chunk_numels.push_back(n);
  }
  if (options.placement_policy() == GeminiPlacementPolicy::kStatic) {
    out.placement = zero::static_placement(out.chunk_numels, options.shard_param_frac(), options.offload_param_frac(),
                                           options.offload_optim_frac());
  } else {
    // Auto: every chunk sharded, its parameter shard on the device; the optimizer state waits in
    // host memory until the first step has measured what else the device holds.
    out.placement.assign(out.chunks.size(), zero::ChunkPlacement{true, false, on_gpu});
  }
  return out;
}

GeminiChunkOwner::GeminiChunkOwner(std::shared_ptr<nn::LayerStack> model,
                                   const std::shared_ptr<torch::optim::Optimizer>& optimizer,
                                   std::shared_ptr<dist::ProcessGroup> group, GeminiChunkOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(std::move(options)), policy_(options_.precision()) {
  if (!optimizer) throw std::invalid_argument("GeminiChunkOwner: the optimizer is null");
  if (!model_) throw std::invalid_argument("GeminiChunkOwner: the model is null");
  if (!group_) throw std::invalid_argument("GeminiChunkOwner: the data-parallel process group is null");
  detail::check_adam_like(*optimizer, options_.caller());
  if (const auto errors = options_.violations(); !errors.empty()) {
    throw std::invalid_argument(fmt::format("{}: {}", options_.caller(), fmt::join(errors, "; ")));
  }

  // 1. The chunked parameters: the optimizer's, in the model's canonical order.
  const auto matched = detail::match_optimizer_to_model(*model_, *optimizer, options_.caller());
  model_names_ = matched.model_names;
  model_params_ = matched.model_params;
  auto stepped = detail::floating_stepped_parameters(matched, options_.caller());
  names_ = std::move(stepped.names);
  params_ = std::move(stepped.params);
  group_of_param_ = std::move(stepped.groups);
  for (auto i : matched.others) unsharded_.push_back(model_params_[i]);
  // Tensor parallelism: each rank chunks its own pieces (the chunks shard them over `group`, the
  // data-parallel ranks that hold the same pieces); the gradient norm counts each piece once.
  const auto cuts = model_->canonical_shard_cuts();
  for (const auto& name : names_) {
    const auto it = cuts.find(name);
    tp_pieces_.push_back(it == cuts.end() ? 1 : nn::pieces_of(it->second));
  }
  device_ = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
  torch::NoGradGuard no_grad;
  const auto compute = policy_.compute_dtype();
  // 2. Chunks and placement.
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  auto chunking = plan(numels, names_, options_, device_.is_cuda());
  chunk_capacity_ = chunking.capacity;
  chunk_capacity_searched_ = chunking.searched;
  chunk_members_ = std::move(chunking.chunks);
  chunk_of_.assign(params_.size(), 0);
  for (std::size_t c = 0; c < chunk_members_.size(); ++c) {
    for (auto i : chunk_members_[c]) chunk_of_[i] = c;
  }
  placement_ = std::move(chunking.placement);
  settled_ = options_.placement_policy() == GeminiPlacementPolicy::kStatic;

  // 3. Each chunk's fp32 state.
  const int rank = group_->rank();
  for (std::size_t c = 0; c < chunk_members_.size(); ++c) {
    std::vector<int64_t> member_numels;
    std::vector<std::size_t> member_groups;
    std::vector<torch::Tensor> member_values;
    for (auto i : chunk_members_[c]) {
      member_numels.push_back(numels[i]);
      member_groups.push_back(group_of_param_[i]);
      // The exact fp32 values go straight to where the master lives: no second device copy of the model.
      member_values.push_back(params_[i].detach().reshape(-1));
    }
    std::vector<std::size_t> all(member_numels.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    auto layout = std::make_shared<zero::ShardLayout>(member_numels, std::vector<std::vector<std::size_t>>{all},
                                                      group_->size());
    // Auto placement moves the state at the first step: Adam's moments (half of it) are made
    // there, where they stay, not here.
    auto adam = std::make_shared<zero::ShardedAdam>(
        layout, rank, member_groups, state_options(placement_[c].optim_on_host),
        settled_ ? zero::ShardedAdam::Moments::kNow : zero::ShardedAdam::Moments::kAtFirstStep);
    auto master = adam->master();
    layout->copy_to_shard(rank, member_values, master);
    layouts_.push_back(std::move(layout));
    adam_.push_back(std::move(adam));
  }

  for (auto& p : model_params_) {
    if (p.is_floating_point() && p.scalar_type() != compute) p.set_data(p.detach().to(compute));
  }

  // 4. The working parameters in chunks.
  chunks_ = std::make_unique<zero::ChunkedParameters>(
      params_, chunk_members_, layouts_, placement_, group_,
      zero::ChunkedParametersOptions().working_dtype(compute).pin_memory(options_.pin_memory()));
  for (std::size_t c = 0; c < chunk_members_.size(); ++c) {
    const bool same_side = placement_[c].params_on_host == placement_[c].optim_on_host || !device_.is_cuda();
    if (compute == torch::kFloat && placement_[c].sharded && same_side) chunks_->share_shard(c, adam_[c]->master());
  }

  // 5. Gradients: chunks in reverse, the order backward completes them.
  const std::size_t num_chunks = chunk_members_.size();
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<torch::Tensor> destinations;
  for (std::size_t b = 0; b < num_chunks; ++b) {
    buckets.push_back(chunk_members_[num_chunks - 1 - b]);
    destinations.push_back(adam_[num_chunks - 1 - b]->grad());
  }
  auto reduce_layout = std::make_shared<zero::ShardLayout>(numels, buckets, group_->size());
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (std::size_t i = 0; i < params_.size(); ++i) named.emplace_back(names_[i], params_[i]);
  reducer_ = std::make_unique<zero::ReduceScatterGradReducer>(
      std::move(named), group_, reduce_layout, std::move(destinations),
      zero::ReduceScatterGradReducerOptions()
          .overlap_communication(options_.overlap_communication())
          .communication_dtype(options_.communication_dtype())
          .pin_memory(options_.pin_memory())
          .after_launch([this, num_chunks](std::size_t b) { chunks_->release(num_chunks - 1 - b); }));
}

GeminiChunkOwner::~GeminiChunkOwner() = default;

torch::TensorOptions GeminiChunkOwner::state_options(bool on_host) const {
  // Host state is read and written by the CPU's Adam only: it needs no pinning (gradients arrive
  // through the reducer's pinned staging, updates leave through the pinned parameter shards).
  return torch::TensorOptions(on_host ? torch::Device(torch::kCPU) : device_);
}

const zero::ChunkPlacement& GeminiChunkOwner::placement(std::size_t c) const { return placement_.at(c); }

zero::AllocationError GeminiChunkOwner::out_of_memory(const std::string& pass, const torch::Device& device,
                                                      const c10::Error& e) const {
  const std::string cause = e.what_without_backtrace();
  return zero::AllocationError(fmt::format(
      "{}: the {} pass ran out of {} memory: {}. What helps: a smaller batch per pass (with gradient "
      "accumulation for the same step), activation checkpointing (LayerStack::set_activation_checkpointing; "
      "train_vit --activation-checkpointing), max_prefetch=0, a smaller chunk_size_mb, or more optimizer state in "
      "host memory (placement_policy=auto with a lower steady_cuda_cap_ratio, or a higher offload_optim_frac)",
      options_.caller(), pass, device.str(), cause.substr(0, cause.find('\n'))));
}

void GeminiChunkOwner::prepare_for_backward() { reducer_->prepare_for_backward(); }
void GeminiChunkOwner::set_gradient_sync(bool enabled) { reducer_->set_sync(enabled); }
bool GeminiChunkOwner::gradient_sync() const { return reducer_->sync_enabled(); }
void GeminiChunkOwner::reduce_accumulated_gradients() { reducer_->reduce_accumulated(); }
void GeminiChunkOwner::finalize_gradients() { reducer_->finalize(); }

void GeminiChunkOwner::zero_grad() {
  reducer_->zero_grad();
  detail::zero_defined_grads(unsharded_);
}

void GeminiChunkOwner::begin_warmup() {
  if (settled_ || warmup_started_) return;
  warmup_started_ = true;
  zero::reset_device_peak(device_);
}

void GeminiChunkOwner::move_optimizer_state(std::size_t c, bool to_host) {
  auto& old = *adam_[c];
  std::vector<std::size_t> member_groups;
  for (auto i : chunk_members_[c]) member_groups.push_back(group_of_param_[i]);
  const auto moments =
      old.exp_avg().defined() ? zero::ShardedAdam::Moments::kNow : zero::ShardedAdam::Moments::kAtFirstStep;
  auto moved =
      std::make_shared<zero::ShardedAdam>(layouts_[c], group_->rank(), member_groups, state_options(to_host), moments);
  torch::NoGradGuard no_grad;
  const_cast<torch::Tensor&>(moved->master()).copy_(old.master());
  const_cast<torch::Tensor&>(moved->grad()).copy_(old.grad());
  if (old.exp_avg().defined()) {
    const_cast<torch::Tensor&>(moved->exp_avg()).copy_(old.exp_avg());
    const_cast<torch::Tensor&>(moved->exp_avg_sq()).copy_(old.exp_avg_sq());
  }
  moved->set_step_count(old.step_count());
  adam_[c] = std::move(moved);
  placement_[c].optim_on_host = to_host;
  reducer_->set_destination(chunk_members_.size() - 1 - c, adam_[c]->grad());
}

// The warm-up step's peak on the device, less the model state resident then (parameter shards,
// replicated chunks, optimizer state placed there), is the working memory (activations, gathered
// chunks, workspaces) every step needs again. Of steady_cuda_cap_ratio of the device, what the
// parameters and that working memory leave goes to optimizer state, chunk by chunk in forward
// order; the chunks that do not fit stay in host memory.
void GeminiChunkOwner::settle_placement() {
  if (settled_) return;
  settled_ = true;
  auto capacity = options_.device_memory_bytes();
  if (!capacity) capacity = zero::device_capacity_bytes(device_);
  int64_t budget = std::numeric_limits<int64_t>::max();
  if (capacity) {
    const int64_t params = chunks_->resident_device_bytes();
    const int64_t resident = params + optimizer_state_device_bytes();
    const int64_t working = std::max<int64_t>(0, zero::device_peak_allocated_bytes(device_) - resident);
    budget = static_cast<int64_t>(options_.steady_cuda_cap_ratio() * static_cast<double>(*capacity)) - params - working;
    placement_overhead_bytes_ = params + working;
  }
  for (std::size_t c = 0; c < adam_.size(); ++c) {
    const int64_t bytes = adam_[c]->full_bytes();
    const bool fits = bytes <= budget;
    if (fits) budget -= bytes;
    if (placement_[c].optim_on_host == fits) move_optimizer_state(c, /*to_host=*/!fits);
  }
}

int64_t GeminiChunkOwner::optimizer_state_device_bytes() const {
  int64_t bytes = 0;
  for (const auto& adam : adam_) {
    if (adam->master().device() == device_) bytes += adam->held_bytes();
  }
  return bytes;
}

int64_t GeminiChunkOwner::optimizer_state_host_bytes() const {
  int64_t bytes = 0;
  for (const auto& adam : adam_) {
    if (adam->master().device() != device_) bytes += adam->held_bytes();
  }
  return bytes;
}

}  // namespace colo
