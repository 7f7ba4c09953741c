#pragma once

#include <colo/pipeline/program.h>
#include <colo/pipeline/schedule.h>
#include <colo/pipeline/stage_manager.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class LayerStack;
}

namespace colo::pipeline {

// What the runner leaves to its caller: the loss and the two kinds of backward pass, which a
// plugin routes through its optimizer wrapper (loss scaling, gradient hooks, accumulation).
struct StageCallbacks {
  // One microbatch's loss from the last stage's output (cast to fp32) and its targets, as the
  // step should count it (e.g. the criterion divided by the number of microbatches).
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  // Backward from a microbatch's loss (last stage).
  std::function<void(const torch::Tensor& loss)> backward_loss;
  // Backward from a stage's output given the gradient the next stage sent for it.
  std::function<void(const torch::Tensor& output, const torch::Tensor& grad)> backward_output;
  // Runs a model chunk on a microbatch (optional; default: the chunk's own forward). A plugin
  // sets it to replay the chunk as CUDA graphs.
  std::function<torch::Tensor(int chunk, const torch::Tensor& input)> forward;
};

struct RunOptions {
  // Only the forward passes (evaluation): no autograd graph, no backward, nothing held.
  TORCH_ARG(bool, forward_only) = false;
  // Keep the last stage's outputs (fp32, detached), per microbatch.
  TORCH_ARG(bool, keep_outputs) = false;
};

struct RunResult {
  // Last stage: the sum of StageCallbacks::loss over the microbatches (detached); undefined on
  // other ranks, and without targets.
  torch::Tensor loss;
  // Last stage, with keep_outputs: each microbatch's output, in microbatch order.
  std::vector<torch::Tensor> outputs;
  // The most microbatches whose activations this rank held at once (forwarded, backward not run).
  int64_t peak_held_microbatches = 0;
};

// Runs one rank's part of a pipeline schedule: the program lower() makes of it (its actions,
// with batches of point-to-point operations between them) over the pp group, on this rank's
// model chunks. One interpreter for every schedule (GPipe, 1F1B, interleaved, zero bubble):
//
//   F   stage 0 takes its microbatch of the inputs, other stages the activation received; the
//       output is kept for backward and sent on (the last stage computes the loss instead).
//   B   backward from the loss (last stage) or from the received gradient; the input gradient
//       is sent back. In a zero-bubble schedule the weight gradients of colo's linear and
//       LayerNorm layers are set aside (nn::WeightGradDeferral) for the W that follows later.
//   W   runs what that B set aside.
//   comm  posts the batch with ProcessGroup::batch_send_recv and waits for it.
// A microbatch's activations are freed as soon as its backward has run.
//
// Receive buffers are sized from the shapes each stage produces, found once per input shape by
// passing a microbatch of zeros through the stages in eval mode (no random numbers drawn, no
// statistics updated) and handing each output's shape to the next stage's rank. Every rank
// therefore gets the inputs' shapes (run()'s `inputs` on every rank, of which only the first
// stage reads the values).
//
// When a step fails or times out, the error names this rank, the action (or the communication
// before it and its peers) and prints this rank's schedule with the failing action marked; a
// communication failure stays a dist::DistError.
class ScheduleRunner {
 public:
  // `chunks[c]`: this rank's layers of virtual stage stages.stage(c), on their device.
  ScheduleRunner(Schedule schedule, StageManager stages, std::shared_ptr<dist::ProcessGroup> pp_group,
                 std::vector<std::shared_ptr<nn::LayerStack>> chunks);
  ~ScheduleRunner();

  // One step's forward (and backward) over the microbatches. `inputs`: one per microbatch, on
  // every rank; `targets`: one per microbatch on the last stage (may be empty in forward-only
  // runs, which then compute no loss). A training run needs exactly the schedule's microbatch
  // count; a forward-only run takes any number (its schedule is made for it).
  RunResult run(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets,
                const StageCallbacks& callbacks, const RunOptions& options = {});

  const Schedule& schedule() const { return schedule_; }
  const StageManager& stages() const { return stages_; }

 private:
  struct Run;
  struct EdgeShape {
    std::vector<int64_t> sizes;
    c10::ScalarType dtype;
  };
  using ShapeKey = std::string;

  // The shape of the activation entering each virtual stage (index s: between s - 1 and s) for
  // microbatches shaped like `input`; found on first use (see above).
  const std::vector<EdgeShape>& edge_shapes(const torch::Tensor& input);
  const RankProgram& forward_program(int microbatches);
  // Opens both directions with every pipeline neighbour at once, before the first schedule (see
  // schedule_runner.cpp for the deadlock this avoids).
  void connect_neighbours(const torch::TensorOptions& options);

  Schedule schedule_;
  StageManager stages_;
  std::shared_ptr<dist::ProcessGroup> pp_group_;
  std::vector<std::shared_ptr<nn::LayerStack>> chunks_;
  RankProgram program_;
  std::map<int, std::pair<Schedule, RankProgram>> forward_programs_;
  std::map<ShapeKey, std::vector<EdgeShape>> shapes_;
  bool neighbours_connected_ = false;
};

}  // namespace colo::pipeline
