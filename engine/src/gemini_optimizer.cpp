// GeminiOptimizer: the step over a GeminiChunkOwner's chunks (unscale, clip, Adam per chunk where
// its state lives, the working shards refreshed), with loss scaling for fp16. What the chunks
// are and where they live is the owner's (gemini_chunk_owner.cpp).
#include <colo/amp/grad_clip.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/engine/gemini_state_streamer.h>
#include <colo/dist/process_group.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/zero/allocate.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>

#include "optimizer_scalars.h"
#include "parameter_match.h"
#include "sharded_adam_checks.h"

namespace colo {

std::vector<std::string> GeminiOptimizerOptions::violations() const {
  std::vector<std::string> errors;
  if (auto problem = detail::max_grad_norm_problem(max_grad_norm()); !problem.empty()) errors.push_back(problem);
  return errors;
}

void GeminiOptimizer::check_optimizer(const torch::optim::Optimizer& optimizer, const std::string& caller) {
  detail::check_adam_like(optimizer, caller);
}

GeminiOptimizer::GeminiOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                 std::shared_ptr<GeminiChunkOwner> chunks, GeminiOptimizerOptions options)
    : optimizer_(std::move(optimizer)), chunks_(std::move(chunks)), options_(std::move(options)) {
  if (!optimizer_) throw std::invalid_argument("GeminiOptimizer: the optimizer is null");
  if (!chunks_) throw std::invalid_argument("GeminiOptimizer: the chunk owner is null");
  detail::check_adam_like(*optimizer_, options_.caller());
  if (const auto errors = options_.violations(); !errors.empty()) {
    throw std::invalid_argument(fmt::format("{}: {}", options_.caller(), fmt::join(errors, "; ")));
  }
  // The state the owner keeps per chunk is laid out for this optimizer's parameters and groups.
  const auto matched = detail::match_optimizer_to_model(*chunks_->model(), *optimizer_, options_.caller());
  const auto stepped = detail::floating_stepped_parameters(matched, options_.caller());
  bool same = stepped.params.size() == chunks_->params().size() && stepped.groups == chunks_->param_groups();
  for (std::size_t i = 0; same && i < stepped.params.size(); ++i) {
    same = stepped.params[i].unsafeGetTensorImpl() == chunks_->params()[i].unsafeGetTensorImpl();
  }
  if (!same) {
    throw std::invalid_argument(fmt::format(
        "{}: the optimizer steps other parameters (or groups) than the chunk owner chunked; build the "
        "GeminiChunkOwner and the GeminiOptimizer over the same optimizer",
        options_.caller()));
  }
  max_grad_norm_ = options_.max_grad_norm();
  if (chunks_->precision_policy().needs_loss_scaler()) {
    scaler_ = std::make_unique<amp::DynamicLossScaler>(options_.loss_scaler());
  }
}

GeminiOptimizer::~GeminiOptimizer() = default;

void GeminiOptimizer::backward(const torch::Tensor& loss) {
  try {
    OptimizerWrapper::backward(loss);
  } catch (const c10::OutOfMemoryError& e) {
    throw chunks_->out_of_memory("backward", chunks_->device(), e);
  }
}

void GeminiOptimizer::set_gradient_sync(bool enabled) { chunks_->set_gradient_sync(enabled); }
bool GeminiOptimizer::gradient_sync() const { return chunks_->gradient_sync(); }
void GeminiOptimizer::reduce_accumulated_gradients() { chunks_->reduce_accumulated_gradients(); }
void GeminiOptimizer::zero_grad() { chunks_->zero_grad(); }

bool GeminiOptimizer::step() {
  const bool taken = take_step();
  run_after_step();
  return taken;
}

bool GeminiOptimizer::take_step() {
  auto& owner = *chunks_;
  owner.finalize_gradients();
  owner.settle_placement();
  const std::size_t num_chunks = owner.num_chunks();
  const auto& group = owner.group();
  bool found_inf = false;
  if (scaler_ || max_grad_norm_ > 0.0) {
    const double inv_scale = scaler_ ? scaler_->inv_scale() : 1.0;
    // The chunks' shards are disjoint: their squared norms sum to the global one. Normed per
    // parameter piece, as a replica's gradients are, so that the norm does not depend on the layout.
    std::vector<torch::Tensor> pieces;
    std::vector<int64_t> tp_pieces;
    for (std::size_t c = 0; c < num_chunks; ++c) {
      const auto& state = owner.chunk_state(c);
      const auto& members = owner.chunk_members(c);
      for (const auto& piece : state.layout().pieces(group->rank())) {
        pieces.push_back(state.grad().narrow(0, piece.shard_offset, piece.numel));
        tp_pieces.push_back(owner.tp_pieces().at(members.at(piece.param)));
      }
    }
    amp::GradNormPlan plan;
    plan.sum_over.push_back(group);
    for (const auto& g : options_.grad_norm_sum_over()) plan.sum_over.push_back(g);
    plan.tp = options_.tp_group();
    const double norm = amp::global_grad_norm(pieces, plan, inv_scale, tp_pieces);
    for (std::size_t c = 0; c < num_chunks; ++c) {
      const auto result = amp::apply_unscale_and_clip({owner.chunk_state(c).grad()}, inv_scale, max_grad_norm_, norm);
      last_grad_norm_ = result.total_norm;
      found_inf = result.found_inf;
    }
    if (num_chunks == 0) last_grad_norm_ = norm, found_inf = !std::isfinite(norm);
  }
  if (scaler_ && !scaler_->update(found_inf)) return false;
  const auto groups = detail::adam_hyperparameters(*optimizer_);
  // The chunks whose state is on the device first: their fused kernels are queued and run while
  // the CPU steps the host chunks, each of whose updated working values travels to the device
  // (a pinned staging buffer, a copy stream) while the CPU steps the next.
  for (const bool on_host : {false, true}) {
    for (std::size_t c = 0; c < num_chunks; ++c) {
      auto& state = owner.chunk_state(c);
      if (state.master().device().is_cpu() != on_host) continue;
      state.step(groups);
      owner.chunks().update_from_master(c, state.master());
    }
  }
  owner.chunks().finish_updates();
  return true;
}

std::vector<checkpoint::PendingTensor> GeminiOptimizer::pending_full_state() const {
  return GeminiStateStreamer(*chunks_).optimizer_entries();
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
  GeminiStateStreamer(*chunks_).load_optimizer(reader, scalars, *optimizer_, scaler_.get(), options_.caller());
}

}  // namespace colo
