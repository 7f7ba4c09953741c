#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>
#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/layer_stack.h>
#include <colo/pipeline/schedule_format.h>
#include <colo/pipeline/schedule_generators.h>
#include <colo/pipeline/schedule_runner.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace colo::pipeline {
namespace {

// Messages, microbatches and (stage, microbatch) pairs as map keys.
using MessageKey = std::tuple<int, int, int, int>;  // kind, from, to, microbatch
MessageKey key_of(const Message& m) { return {static_cast<int>(m.kind), m.from_stage, m.to_stage, m.microbatch}; }
using SlotKey = std::pair<int, int>;  // stage, microbatch

std::string shape_key(const torch::Tensor& t) {
  return fmt::format("{}:{}:{}", fmt::join(t.sizes(), "x"), c10::toString(t.scalar_type()), t.device().str());
}

// The header a stage's rank sends the next one during shape discovery: ndim, dtype, sizes.
constexpr int64_t kMaxDims = 8;

template <typename Map>
auto take(Map& map, const typename Map::key_type& key, const std::string& what) {
  auto it = map.find(key);
  if (it == map.end()) throw std::logic_error(fmt::format("pipeline runner: {} is missing", what));
  auto value = std::move(it->second);
  map.erase(it);
  return value;
}

}  // namespace

// The state of one run(): what is in flight between steps.
struct ScheduleRunner::Run {
  const std::vector<torch::Tensor>& inputs;
  const std::vector<torch::Tensor>& targets;
  const StageCallbacks& callbacks;
  const RunOptions& options;
  const Schedule& schedule;
  // Received, not used yet; computed, not sent yet.
  std::map<MessageKey, torch::Tensor> received;
  std::map<MessageKey, torch::Tensor> to_send;
  // Per (stage, microbatch) whose backward has not run: its input (a leaf, so that backward
  // leaves its gradient there) and its output (the loss, on the last stage).
  struct Held {
    torch::Tensor input;
    torch::Tensor output;
  };
  std::map<SlotKey, Held> held;
  std::map<SlotKey, nn::DeferredWeightGrads> deferred;
  RunResult result;
};

ScheduleRunner::ScheduleRunner(Schedule schedule, StageManager stages, std::shared_ptr<dist::ProcessGroup> pp_group,
                               std::vector<std::shared_ptr<nn::LayerStack>> chunks)
    : schedule_(std::move(schedule)), stages_(stages), pp_group_(std::move(pp_group)), chunks_(std::move(chunks)) {
  if (!pp_group_) throw std::invalid_argument("ScheduleRunner: the pipeline process group is null");
  if (pp_group_->size() != stages_.pp_size() || pp_group_->rank() != stages_.pp_rank()) {
    throw std::invalid_argument(fmt::format("ScheduleRunner: the pp group {} does not match the stage manager (pp rank {} of {})",
                                            pp_group_->describe(), stages_.pp_rank(), stages_.pp_size()));
  }
  if (schedule_.pp() != stages_.pp_size() || schedule_.shape.chunks() != stages_.chunks()) {
    throw std::invalid_argument(fmt::format(
        "ScheduleRunner: the schedule is for pp {} with {} chunks, the stage manager for pp {} with {}", schedule_.pp(),
        schedule_.shape.chunks(), stages_.pp_size(), stages_.chunks()));
  }
  if (static_cast<int>(chunks_.size()) != stages_.chunks()) {
    throw std::invalid_argument(
        fmt::format("ScheduleRunner: {} model chunks given for {} per rank", chunks_.size(), stages_.chunks()));
  }
  program_ = lower(schedule_)[stages_.pp_rank()];
}

ScheduleRunner::~ScheduleRunner() = default;

const RankProgram& ScheduleRunner::forward_program(int microbatches) {
  auto it = forward_programs_.find(microbatches);
  if (it == forward_programs_.end()) {
    auto schedule = forward_only_schedule(
        ScheduleShape(stages_.pp_size(), microbatches).chunks(stages_.chunks()));
    auto program = lower(schedule)[stages_.pp_rank()];
    it = forward_programs_.emplace(microbatches, std::make_pair(std::move(schedule), std::move(program))).first;
  }
  return it->second.second;
}

const std::vector<ScheduleRunner::EdgeShape>& ScheduleRunner::edge_shapes(const torch::Tensor& input) {
  const auto key = shape_key(input);
  auto found = shapes_.find(key);
  if (found != shapes_.end()) return found->second;

  // Each stage, in order, on the rank that holds it: the incoming shape (the input's, or the
  // previous stage's rank's header), one forward of zeros in eval mode, the outgoing shape to
  // the next stage's rank. One chain through the ranks, so blocking sends cannot deadlock.
  const int stages = stages_.num_stages();
  std::vector<EdgeShape> shapes(static_cast<std::size_t>(stages) + 1);
  const auto header_options = torch::TensorOptions().dtype(torch::kLong).device(input.device());
  torch::NoGradGuard no_grad;
  for (int s : stages_.stages()) {
    EdgeShape in{input.sizes().vec(), input.scalar_type()};
    if (s > 0) {
      auto header = pp_group_->communicable(torch::zeros({kMaxDims + 2}, header_options));
      pp_group_->recv(header, stages_.prev_rank(s)).wait();
      header = header.cpu();
      in.sizes.clear();
      for (int64_t d = 0; d < header[0].item<int64_t>(); ++d) in.sizes.push_back(header[d + 2].item<int64_t>());
      in.dtype = static_cast<c10::ScalarType>(header[1].item<int64_t>());
    }
    shapes[s] = in;
    auto& chunk = *chunks_[stages_.chunk_of(s)];
    // Every module's own mode is restored, not the chunk's: the chunk is a LayerStack of its own
    // whose flag the model's train()/eval() need not reach, and train(flag) is recursive, so
    // restoring that one flag would switch every layer of an evaluation into training mode
    // (BatchNorm statistics moved, drop-path drawing random numbers).
    const auto modules = chunk.modules(/*include_self=*/true);  // parents before their children
    std::vector<bool> training;
    for (const auto& module : modules) training.push_back(module->is_training());
    chunk.eval();
    const auto out = chunk.forward(torch::zeros(in.sizes, input.options().dtype(in.dtype)));
    for (std::size_t i = 0; i < modules.size(); ++i) modules[i]->train(training[i]);
    shapes[s + 1] = {out.sizes().vec(), out.scalar_type()};
    if (s + 1 < stages) {
      if (out.dim() > kMaxDims) {
        throw std::invalid_argument(fmt::format("pipeline stage {} outputs a {}-dimensional tensor; at most {} dimensions "
                                                "travel between stages",
                                                s, out.dim(), kMaxDims));
      }
      auto header = torch::zeros({kMaxDims + 2}, torch::kLong);
      header[0] = out.dim();
      header[1] = static_cast<int64_t>(out.scalar_type());
      for (int64_t d = 0; d < out.dim(); ++d) header[d + 2] = out.size(d);
      auto travelling = pp_group_->communicable(header.to(input.device()));
      pp_group_->send(travelling, stages_.next_rank(s)).wait();
    }
  }
  return shapes_.emplace(key, std::move(shapes)).first->second;
}

// NCCL sets up a pair of ranks' point-to-point channels at their first message in each direction,
// and the set-up needs the peer's CPU to take part. A rank whose first message one way is grouped
// with a send the peer is waiting for deadlocks if the peer's CPU is held meanwhile: seen under
// GPipe at pp 2 on two GPUs (2026-11-26: rank 0 in NCCL's bootstrap accept inside a group of "send
// activation, receive gradient"; rank 1 loading a cuBLAS kernel lazily, which waits for its
// spinning receive kernel). So every rank opens both directions with each neighbour at once,
// before its first schedule: one element each way, all ranks at the same point of the run.
void ScheduleRunner::connect_neighbours(const torch::TensorOptions& options) {
  if (neighbours_connected_) return;
  std::set<int> peers;
  for (int s : stages_.stages()) {
    if (s > 0) peers.insert(stages_.prev_rank(s));
    if (s + 1 < stages_.num_stages()) peers.insert(stages_.next_rank(s));
  }
  peers.erase(stages_.pp_rank());
  std::vector<dist::P2POp> p2p;
  for (int peer : peers) {
    p2p.push_back({dist::P2POp::Kind::kSend, pp_group_->communicable(torch::zeros({1}, options)), peer});
    p2p.push_back({dist::P2POp::Kind::kRecv, pp_group_->communicable(torch::empty({1}, options)), peer});
  }
  if (!p2p.empty()) pp_group_->batch_send_recv(p2p).wait();
  neighbours_connected_ = true;
}

RunResult ScheduleRunner::run(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets,
                              const StageCallbacks& callbacks, const RunOptions& options) {
  const bool training = !options.forward_only();
  const int microbatches = static_cast<int>(inputs.size());
  if (training && microbatches != schedule_.shape.microbatches()) {
    throw std::invalid_argument(fmt::format("ScheduleRunner::run: {} microbatches for a schedule of {}", microbatches,
                                            schedule_.shape.microbatches()));
  }
  if (microbatches == 0) throw std::invalid_argument("ScheduleRunner::run: no microbatches");
  const bool last_rank = stages_.is_last_stage();
  const bool with_loss = last_rank && !targets.empty();
  if (last_rank && (training || !targets.empty()) && static_cast<int>(targets.size()) != microbatches) {
    throw std::invalid_argument(fmt::format("ScheduleRunner::run: {} target microbatches for {} input microbatches",
                                            targets.size(), microbatches));
  }
  if (training && (!callbacks.loss || !callbacks.backward_loss || !callbacks.backward_output)) {
    throw std::invalid_argument("ScheduleRunner::run: training needs the loss and both backward callbacks");
  }
  if (with_loss && !callbacks.loss) throw std::invalid_argument("ScheduleRunner::run: targets given but no loss callback");

  const RankProgram& program = training ? program_ : forward_program(microbatches);
  const Schedule& schedule = training ? schedule_ : forward_programs_.at(microbatches).first;
  const int stages = stages_.num_stages();
  std::vector<const std::vector<EdgeShape>*> shapes_of(microbatches);
  for (int mb = 0; mb < microbatches; ++mb) shapes_of[mb] = &edge_shapes(inputs[mb]);
  connect_neighbours(inputs.front().options().dtype(torch::kFloat));

  Run run{inputs, targets, callbacks, options, schedule, {}, {}, {}, {}, {}};
  if (options.keep_outputs() && last_rank) run.result.outputs.resize(microbatches);
  std::optional<torch::NoGradGuard> no_grad;
  if (!training) no_grad.emplace();

  auto forward = [&](const Action& a) {
    const int chunk = stages_.chunk_of(a.stage);
    torch::Tensor x = a.stage == 0 ? inputs.at(a.microbatch)
                                   : take(run.received, key_of({ActionKind::kForward, a.stage - 1, a.stage, a.microbatch}),
                                          "the activation for " + a.str());
    if (training && a.stage > 0) x.requires_grad_(true);
    auto y = callbacks.forward ? callbacks.forward(chunk, x) : chunks_[chunk]->forward(x);
    if (a.stage + 1 < stages) {
      run.to_send[key_of({ActionKind::kForward, a.stage, a.stage + 1, a.microbatch})] = y.detach();
      if (training) run.held[{a.stage, a.microbatch}] = {x, y};
    } else {
      const auto out = y.is_floating_point() ? y.to(torch::kFloat) : y;
      if (options.keep_outputs()) run.result.outputs[a.microbatch] = out.detach();
      torch::Tensor loss;
      if (with_loss) {
        loss = callbacks.loss(out, targets.at(a.microbatch));
        run.result.loss = run.result.loss.defined() ? run.result.loss + loss.detach() : loss.detach();
      }
      if (training) run.held[{a.stage, a.microbatch}] = {x, loss};
    }
    run.result.peak_held_microbatches =
        std::max<int64_t>(run.result.peak_held_microbatches, static_cast<int64_t>(run.held.size()));
  };

  auto backward = [&](const Action& a) {
    auto held = take(run.held, {a.stage, a.microbatch}, "the activations of " + a.str());
    {
      std::optional<nn::WeightGradDeferral> deferral;
      if (schedule.split_backward) deferral.emplace(run.deferred[{a.stage, a.microbatch}]);
      if (a.stage + 1 == stages) {
        callbacks.backward_loss(held.output);
      } else {
        const auto grad = take(run.received, key_of({ActionKind::kBackward, a.stage + 1, a.stage, a.microbatch}),
                               "the gradient for " + a.str());
        callbacks.backward_output(held.output, grad);
      }
    }
    if (a.stage > 0) {
      auto grad = held.input.grad();
      // An output that does not depend on the input (a stage that ignores it) sends zeros.
      if (!grad.defined()) grad = torch::zeros_like(held.input);
      run.to_send[key_of({ActionKind::kBackward, a.stage, a.stage - 1, a.microbatch})] = grad;
    }
  };

  auto weight = [&](const Action& a) {
    auto it = run.deferred.find({a.stage, a.microbatch});
    if (it == run.deferred.end()) throw std::logic_error("pipeline runner: W of " + a.str() + " before its B");
    it->second.run();
    run.deferred.erase(it);
  };

  auto communicate = [&](const std::vector<CommOp>& ops) {
    std::vector<dist::P2POp> p2p;
    std::vector<std::pair<MessageKey, torch::Tensor>> arriving;
    for (const auto& op : ops) {
      const auto key = key_of(op.message);
      if (op.kind == CommKind::kSend) {
        auto tensor = take(run.to_send, key, "the data of " + op.message.str()).contiguous();
        p2p.push_back({dist::P2POp::Kind::kSend, pp_group_->communicable(tensor), op.peer});
      } else {
        // Activations entering stage `to` and gradients leaving it have the same shape.
        const int edge = op.message.kind == ActionKind::kForward ? op.message.to_stage : op.message.from_stage;
        const auto& shape = (*shapes_of.at(op.message.microbatch))[edge];
        auto buffer = torch::empty(shape.sizes, inputs.front().options().dtype(shape.dtype));
        p2p.push_back({dist::P2POp::Kind::kRecv, pp_group_->communicable(buffer), op.peer});
        arriving.emplace_back(key, p2p.back().tensor);
      }
    }
    pp_group_->batch_send_recv(p2p).wait();
    for (auto& [key, tensor] : arriving) run.received[key] = tensor.to(inputs.front().device());
  };

  for (const auto& step : program.steps) {
    try {
      if (!step.is_compute()) {
        communicate(step.comm());
      } else if (step.action().kind == ActionKind::kForward) {
        forward(step.action());
      } else if (step.action().kind == ActionKind::kBackward) {
        backward(step.action());
      } else {
        weight(step.action());
      }
    } catch (const std::exception& e) {
      // Which step, which peers, and where in the schedule.
      std::string what;
      if (step.is_compute()) {
        what = fmt::format("action {}", step.action().str());
      } else {
        std::vector<std::string> ops;
        for (const auto& op : step.comm()) {
          ops.push_back(fmt::format("{} (peer: pp rank {}, global rank {})", op.str(), op.peer,
                                    pp_group_->global_rank(op.peer)));
        }
        const auto& actions = schedule.actions[stages_.pp_rank()];
        what = fmt::format("the communication before {} [{}]",
                           step.action_index < actions.size() ? "action " + actions[step.action_index].str()
                                                              : std::string("the end of the schedule"),
                           fmt::join(ops, "; "));
      }
      const auto message = fmt::format("pipeline: pp rank {} (global rank {}) failed at {}: {}\n{}", stages_.pp_rank(),
                                       pp_group_->global_rank(stages_.pp_rank()), what, e.what(),
                                       format_rank_schedule(schedule, stages_.pp_rank(), step.action_index));
      if (dynamic_cast<const dist::DistError*>(&e)) throw dist::DistError(message);
      throw std::runtime_error(message);
    }
  }
  if (!run.held.empty() || !run.deferred.empty() || !run.to_send.empty() || !run.received.empty()) {
    throw std::logic_error(fmt::format(
        "pipeline runner: the schedule ended with {} microbatches' activations, {} deferred weight gradients, {} "
        "unsent and {} unused messages left",
        run.held.size(), run.deferred.size(), run.to_send.size(), run.received.size()));
  }
  return std::move(run.result);
}

}  // namespace colo::pipeline
