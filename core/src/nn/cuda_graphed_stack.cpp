#include <colo/compat/backward_callbacks.h>
#include <colo/compat/torch_compat.h>
#include <colo/nn/cuda_graphed_stack.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#ifdef COLO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace colo::nn {

std::optional<std::string> cuda_graphs_unavailable_reason(const torch::Device& device) {
#ifndef COLO_WITH_CUDA
  (void)device;
  return std::string("colo was built without CUDA: CUDA graphs need the CUDA build and a GPU");
#else
  if (!device.is_cuda()) {
    return fmt::format("the model trains on {}, not on a GPU: CUDA graphs capture GPU work only", device.str());
  }
  return std::nullopt;
#endif
}

#ifdef COLO_WITH_CUDA

namespace {

// The layers whose activation checkpointing is on, by index: a graph cannot hold them.
std::vector<std::size_t> checkpointed_layers(const LayerStack& stack) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < stack.size(); ++i) {
    if (stack.layer(i)->activation_checkpointing()) out.push_back(i);
  }
  return out;
}

std::string signature_of(const torch::Tensor& t) {
  return fmt::format("{}:{}:{}:{}", fmt::join(t.sizes(), "x"), c10::toString(t.scalar_type()), t.device().str(),
                     t.requires_grad() ? "grad" : "nograd");
}

// A capture that failed part-way leaves its stream capturing, and then every later CUDA call of
// the process fails ("operation not permitted when stream is capturing"): the error must be the
// capture's alone. Ends the capture and drops the partial graph.
void end_failed_capture(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(stream.stream(), &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
  }
  (void)cudaGetLastError();  // clear the error the failed capture left behind
}

}  // namespace

// One input shape's graphs in one slot and their static tensors (which live as long as the
// graphs). Named, not anonymous: CudaGraphedStack::Impl, a member type of an exported class,
// holds them.
namespace detail {
struct CapturedGraphs {
  at::cuda::CUDAGraph forward_graph;
  at::cuda::CUDAGraph backward_graph;
  torch::Tensor static_input;
  torch::Tensor static_output;
  torch::Tensor static_grad_output;
  torch::Tensor static_grad_input;  // defined when the input needs a gradient
};

// What one training forward in flight holds until its backward: the graphs of every shape that
// ran in this slot, all in one memory pool of the slot's own. Why a pool per slot is safe:
//  - two slots never share a pool, so the activations of two forwards in flight never alias;
//  - within a slot, graphs run only as one forward replay then its backward replay, never
//    interleaved with another pair of the slot (the slot is busy in between). A capture may
//    reuse memory an earlier capture of the slot left free (its activations once its backward
//    was captured); that memory is live only between one pair's replays, so no two live uses
//    meet. Static buffers stay allocated and are rewritten at the start of each use; what a
//    caller keeps (the output, the input's gradient) is copied out of them.
struct CaptureSlot {
  std::map<std::string, std::unique_ptr<CapturedGraphs>> captured;  // by input signature
  std::optional<at::cuda::MempoolId_t> pool;                        // after the slot's first capture
  bool busy = false;                                                // a forward awaits its backward
  std::optional<compat::WeakNode> owner;                            // that forward's autograd node
  int64_t generation = 0;                                           // forwards taken so far
};
}  // namespace detail
using Captured = detail::CapturedGraphs;
using Slot = detail::CaptureSlot;

struct CudaGraphedStack::Impl {
  CudaGraphOptions options;
  std::vector<torch::Tensor> params;         // the trainable parameters, in stack order
  std::vector<torch::Tensor> grad_buffers;   // their gradients' fixed home (written by backward graphs)
  std::vector<std::unique_ptr<Slot>> slots;  // grows to options.max_in_flight
  std::set<std::string> shapes;              // every input signature captured, in any slot
  torch::Tensor anchor;                      // makes the replay's output require a gradient
  std::function<void()> backward_end;        // on_backward_end's
  bool backward_end_queued = false;          // in the autograd pass running now
  int64_t replays = 0;

  // Before a backward replay: every parameter's .grad is its buffer, holding what was
  // accumulated so far (zero after a zero_grad that dropped it).
  void adopt_gradients() {
    std::vector<torch::Tensor> to_zero;
    for (std::size_t k = 0; k < params.size(); ++k) {
      auto& grad = params[k].mutable_grad();
      if (grad.defined() && grad.is_same(grad_buffers[k])) continue;
      if (grad.defined()) {
        grad_buffers[k].copy_(grad);
      } else {
        to_zero.push_back(grad_buffers[k]);
      }
      grad = grad_buffers[k];
    }
    if (!to_zero.empty()) torch::_foreach_zero_(to_zero);
  }

  static void release(Slot& slot) {
    slot.busy = false;
    slot.owner.reset();
  }

  // A free slot for a forward of `signature`: one that has it captured if any, else any free
  // one (a capture into its pool), else a new slot while fewer than max_in_flight exist.
  Slot& take_slot(const std::string& signature);
  Captured& capture(Slot& slot, LayerStack& stack, const torch::Tensor& input);
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The replay as one autograd node: forward copies the input into the slot's static buffer and
// replays the forward graph; backward copies the output gradient in and replays the backward
// graph, which also accumulates the parameters' gradients, and frees the slot.
struct GraphReplay : torch::autograd::Function<GraphReplay> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& anchor,
                               CudaGraphedStack::Impl* impl, Slot* slot, Captured* captured) {
    (void)anchor;
    captured->static_input.detach().copy_(input);
    captured->forward_graph.replay();
    ++impl->replays;
    ctx->saved_data["impl"] = reinterpret_cast<int64_t>(impl);
    ctx->saved_data["slot"] = reinterpret_cast<int64_t>(slot);
    ctx->saved_data["captured"] = reinterpret_cast<int64_t>(captured);
    ctx->saved_data["generation"] = slot->generation;
    // The slot's next forward overwrites its static output: the caller gets its own copy.
    return captured->static_output.detach().clone();
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto* impl = reinterpret_cast<CudaGraphedStack::Impl*>(ctx->saved_data["impl"].toInt());
    auto* slot = reinterpret_cast<Slot*>(ctx->saved_data["slot"].toInt());
    auto* captured = reinterpret_cast<Captured*>(ctx->saved_data["captured"].toInt());
    if (!slot->busy || slot->generation != ctx->saved_data["generation"].toInt()) {
      throw std::runtime_error(
          "cuda_graphs: a second backward through one graphed forward (retain_graph=true): its activations were "
          "consumed by the first, and its capture slot may be another forward's now; run one backward per "
          "training forward, or set cuda_graphs=false");
    }
    impl->adopt_gradients();
    if (grads[0].defined()) {
      captured->static_grad_output.copy_(grads[0]);
    } else {
      captured->static_grad_output.zero_();
    }
    captured->backward_graph.replay();
    CudaGraphedStack::Impl::release(*slot);
    if (impl->backward_end && !impl->backward_end_queued) {
      impl->backward_end_queued = true;
      compat::queue_end_of_backward_callback([impl] {
        impl->backward_end_queued = false;
        impl->backward_end();
      });
    }
    // The static gradient is overwritten by the slot's next replay: the caller gets its own copy.
    torch::Tensor grad_input =
        captured->static_grad_input.defined() ? captured->static_grad_input.clone() : torch::Tensor();
    return {grad_input, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Restores the random state and the buffers (BatchNorm statistics) that warm-up passes change.
class SideEffectGuard {
 public:
  SideEffectGuard(LayerStack& stack, const torch::Device& device)
      : device_(device), rng_(compat::cuda_rng_state(device)) {
    for (auto& b : stack.buffers()) saved_.emplace_back(b, b.clone());
  }
  ~SideEffectGuard() {
    torch::NoGradGuard no_grad;
    for (auto& [buffer, copy] : saved_) buffer.copy_(copy);
    compat::set_cuda_rng_state(device_, rng_);
  }

 private:
  torch::Device device_;
  torch::Tensor rng_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
};

}  // namespace

Slot& CudaGraphedStack::Impl::take_slot(const std::string& signature) {
  Slot* free = nullptr;
  int64_t busy = 0;
  for (auto& slot : slots) {
    // A forward whose output was dropped without a backward left its slot free.
    if (slot->busy && slot->owner && slot->owner->expired()) release(*slot);
    if (slot->busy) {
      ++busy;
    } else if (!free || (!free->captured.count(signature) && slot->captured.count(signature))) {
      free = slot.get();
    }
  }
  if (busy >= options.max_in_flight()) {
    throw std::runtime_error(fmt::format(
        "cuda_graphs: a training forward while {} earlier ones still await their backward, and max_in_flight is {}: "
        "each forward in flight holds a capture slot (its activations) until its backward replays, so one more "
        "would overwrite another's; raise CudaGraphOptions::max_in_flight (a pipeline stage needs as many as its "
        "schedule holds microbatches), run each forward's backward first, or set cuda_graphs=false",
        busy, options.max_in_flight()));
  }
  // A free slot without this shape still costs one capture but no new pool.
  if (free) return *free;
  slots.push_back(std::make_unique<Slot>());
  return *slots.back();
}

Captured& CudaGraphedStack::Impl::capture(Slot& slot, LayerStack& stack, const torch::Tensor& input) {
  const auto checkpointed = checkpointed_layers(stack);
  if (!checkpointed.empty()) {
    throw std::invalid_argument(fmt::format(
        "cuda_graphs: layers [{}] checkpoint their activations, which reads the random state on the host in "
        "forward: a CUDA graph cannot hold that; turn activation checkpointing off or set cuda_graphs=false",
        fmt::join(checkpointed, ",")));
  }
  const auto device = input.device();
  c10::cuda::CUDAGuard device_guard(device);
  auto current = c10::cuda::getCurrentCUDAStream(device.index());
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);

  auto entry = std::make_unique<Captured>();
  Captured& c = *entry;
  try {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    const bool input_grad = input.requires_grad();
    {
      // Warm-up: eager passes whose gradients go nowhere (autograd::grad, not backward).
      SideEffectGuard restore(stack, device);
      for (int i = 0; i < options.warmup_iterations(); ++i) {
        auto x = input.detach().clone().requires_grad_(input_grad);
        auto y = stack.forward(x);
        std::vector<torch::Tensor> wrt;
        if (input_grad) wrt.push_back(x);
        wrt.insert(wrt.end(), params.begin(), params.end());
        if (!wrt.empty()) {
          torch::autograd::grad({y}, wrt, {torch::ones_like(y)}, /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
        }
      }
    }
    side.synchronize();

    c.static_input = input.detach().clone().requires_grad_(input_grad);
    if (slot.pool) {
      c.forward_graph.capture_begin(*slot.pool, cudaStreamCaptureModeThreadLocal);
    } else {
      c.forward_graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);  // a new pool: the slot's
    }
    c.static_output = stack.forward(c.static_input);
    c.forward_graph.capture_end();
    slot.pool = c.forward_graph.pool();

    c.static_grad_output = torch::zeros_like(c.static_output);
    std::vector<torch::Tensor> wrt;
    if (input_grad) wrt.push_back(c.static_input);
    wrt.insert(wrt.end(), params.begin(), params.end());
    c.backward_graph.capture_begin(*slot.pool, cudaStreamCaptureModeThreadLocal);
    auto grads = torch::autograd::grad({c.static_output}, wrt, {c.static_grad_output}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    const std::size_t offset = input_grad ? 1 : 0;
    std::vector<torch::Tensor> targets, values;
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (!grads[k + offset].defined()) continue;
      targets.push_back(grad_buffers[k]);
      values.push_back(grads[k + offset]);
    }
    if (!targets.empty()) torch::_foreach_add_(targets, values);
    if (input_grad) c.static_grad_input = grads[0];
    c.backward_graph.capture_end();
  } catch (const std::exception& e) {
    end_failed_capture(side);
    throw std::runtime_error(fmt::format(
        "cuda_graphs: capturing the forward and backward of a training input of shape {} failed: {}\nSomething "
        "in the model cannot run inside a CUDA graph (a host synchronisation, a value read on the host, an "
        "operation CUDA refuses during capture); set cuda_graphs=false",
        signature_of(input), e.what()));
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
  auto key = signature_of(input);
  shapes.insert(key);
  return *slot.captured.emplace(std::move(key), std::move(entry)).first->second;
}

CudaGraphedStack::CudaGraphedStack(std::shared_ptr<LayerStack> stack, CudaGraphOptions options)
    : stack_(std::move(stack)), impl_(std::make_unique<Impl>()) {
  if (!stack_) throw std::invalid_argument("CudaGraphedStack: the layer stack is null");
  std::optional<torch::Device> device;
  for (const auto& p : stack_->parameters()) {
    if (!device) device = p.device();
  }
  if (!device) throw std::invalid_argument("CudaGraphedStack: the layer stack has no parameters to tell its device");
  if (auto why = cuda_graphs_unavailable_reason(*device)) throw std::invalid_argument("cuda_graphs: " + *why);
  if (options.warmup_iterations() < 1 || options.max_shapes() < 1 || options.max_in_flight() < 1) {
    throw std::invalid_argument(
        fmt::format("CudaGraphOptions: warmup_iterations ({}), max_shapes ({}) and max_in_flight ({}) must be >= 1",
                    options.warmup_iterations(), options.max_shapes(), options.max_in_flight()));
  }
  impl_->options = options;
  for (const auto& p : stack_->parameters()) {
    if (!p.requires_grad()) continue;
    impl_->params.push_back(p);
    impl_->grad_buffers.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  }
  impl_->anchor = torch::zeros({}, torch::TensorOptions().device(*device)).requires_grad_(true);
}

CudaGraphedStack::~CudaGraphedStack() = default;

torch::Tensor CudaGraphedStack::forward(const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled() || !stack_->is_training()) return stack_->forward(input);
  if (!input.is_cuda()) {
    throw std::invalid_argument(
        fmt::format("cuda_graphs: the input is on {}; the graphed model runs on GPUs", input.device().str()));
  }
  // No backward pass runs while a forward does: a callback still marked queued belongs to a pass
  // that failed before its end, and the next pass must queue its own.
  impl_->backward_end_queued = false;
  const auto signature = signature_of(input);
  if (!impl_->shapes.count(signature) && static_cast<int>(impl_->shapes.size()) >= impl_->options.max_shapes()) {
    throw std::invalid_argument(fmt::format(
        "cuda_graphs: a training input of shape {} would be the {}th captured shape (already: {}); each shape "
        "holds its own graphs and activations: give the loader a fixed batch (drop_last) or set cuda_graphs=false",
        signature, impl_->shapes.size() + 1, fmt::join(impl_->shapes, ", ")));
  }
  Slot& slot = impl_->take_slot(signature);
  auto it = slot.captured.find(signature);
  Captured& captured = it != slot.captured.end() ? *it->second : impl_->capture(slot, *stack_, input);
  ++slot.generation;
  auto output = GraphReplay::apply(input, impl_->anchor, impl_.get(), &slot, &captured);
  slot.busy = true;
  slot.owner.emplace(output.grad_fn());
  return output;
}

void CudaGraphedStack::set_max_in_flight(int slots) {
  if (slots < 1) {
    throw std::invalid_argument(fmt::format("CudaGraphedStack: max_in_flight must be >= 1, got {}", slots));
  }
  impl_->options.max_in_flight(slots);
}

void CudaGraphedStack::on_backward_end(std::function<void()> fn) { impl_->backward_end = std::move(fn); }

int64_t CudaGraphedStack::captured_shapes() const { return static_cast<int64_t>(impl_->shapes.size()); }
int64_t CudaGraphedStack::captured_graphs() const {
  int64_t count = 0;
  for (const auto& slot : impl_->slots) count += static_cast<int64_t>(slot->captured.size());
  return count;
}
int64_t CudaGraphedStack::in_flight() const {
  int64_t count = 0;
  for (const auto& slot : impl_->slots) count += slot->busy && !(slot->owner && slot->owner->expired()) ? 1 : 0;
  return count;
}
int64_t CudaGraphedStack::forward_replays() const { return impl_->replays; }

#else  // CPU build: the class exists, and says why it cannot run.

struct CudaGraphedStack::Impl {};

CudaGraphedStack::CudaGraphedStack(std::shared_ptr<LayerStack> stack, CudaGraphOptions options)
    : stack_(std::move(stack)) {
  (void)options;
  throw std::invalid_argument("cuda_graphs: " + *cuda_graphs_unavailable_reason(torch::Device(torch::kCPU)));
}
CudaGraphedStack::~CudaGraphedStack() = default;
torch::Tensor CudaGraphedStack::forward(const torch::Tensor& input) { return stack_->forward(input); }
void CudaGraphedStack::set_max_in_flight(int slots) { (void)slots; }
void CudaGraphedStack::on_backward_end(std::function<void()> fn) { (void)fn; }
int64_t CudaGraphedStack::captured_shapes() const { return 0; }
int64_t CudaGraphedStack::captured_graphs() const { return 0; }
int64_t CudaGraphedStack::in_flight() const { return 0; }
int64_t CudaGraphedStack::forward_replays() const { return 0; }

#endif

}  // namespace colo::nn
